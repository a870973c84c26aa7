package runtime

import (
	"context"
	"slices"
)

// The key locks. An operation holds its key exclusively (Write, a timer,
// an effect's follow-up), or shared together with sub-keys of it held
// exclusively (WriteShared). Every lock grants in arrival order: a waiting
// exclusive holder keeps the shared ones that come after it waiting, so a
// stream of shared operations never starves it. An operation takes its
// key first and then its sub-keys in sorted order, and holds the locks of
// one key only, so waits never form a cycle: whoever holds a lock another
// waits for waits itself only for locks later in that order.

// lockID names a lock: a key, or one of its sub-keys.
type lockID struct {
	key, sub string
	isSub    bool
}

// keyLock is one lock of the table, under mu: held exclusively by one
// operation or shared by several, and its waiters in arrival order.
type keyLock struct {
	excl   bool
	shared int
	queue  []*lockWaiter
	refs   int // holders and waiters: the lock is forgotten at 0
}

// lockWaiter is an operation waiting for a lock.
type lockWaiter struct {
	shared  bool
	granted bool          // under mu
	ready   chan struct{} // closed once granted
}

// free reports whether the lock can be taken (shared or not) now.
func (kl *keyLock) free(shared bool) bool {
	return !kl.excl && (shared || kl.shared == 0)
}

func (kl *keyLock) take(shared bool) {
	if shared {
		kl.shared++
	} else {
		kl.excl = true
	}
}

// grant hands the lock to the waiters at the head of the queue that it
// can take: one exclusive, or every shared one up to the next exclusive.
func (kl *keyLock) grant() {
	for len(kl.queue) > 0 && kl.free(kl.queue[0].shared) {
		w := kl.queue[0]
		kl.queue = kl.queue[1:]
		kl.take(w.shared)
		w.granted = true
		close(w.ready)
	}
}

// locks are the locks an operation holds: its key, shared or exclusive,
// and with a shared key its sub-keys (sorted, distinct), exclusive. The
// empty key holds nothing.
type locks struct {
	key    string
	shared bool
	subs   []string
}

func exclusive(key string) locks { return locks{key: key} }

func sharedWith(key string, subs []string) locks {
	subs = slices.Compact(slices.Sorted(slices.Values(subs)))
	return locks{key: key, shared: true, subs: subs}
}

// lockAll takes l's locks in order, waiting in ctx; on failure it holds
// none.
func (h *Hosted[S]) lockAll(ctx context.Context, l locks) error {
	if l.key == "" {
		return nil
	}
	if err := h.acquire(ctx, lockID{key: l.key}, l.shared); err != nil {
		return err
	}
	for i, sub := range l.subs {
		if err := h.acquire(ctx, lockID{key: l.key, sub: sub, isSub: true}, false); err != nil {
			h.unlockAll(locks{key: l.key, shared: l.shared, subs: l.subs[:i]})
			return err
		}
	}
	return nil
}

// unlockAll releases l's locks.
func (h *Hosted[S]) unlockAll(l locks) {
	if l.key == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sub := range slices.Backward(l.subs) {
		h.releaseLocked(lockID{key: l.key, sub: sub, isSub: true}, false)
	}
	h.releaseLocked(lockID{key: l.key}, l.shared)
}

// lock takes key exclusively (nothing for the empty key), waiting in ctx.
func (h *Hosted[S]) lock(ctx context.Context, key string) error {
	return h.lockAll(ctx, exclusive(key))
}

// unlock releases key, taken exclusively.
func (h *Hosted[S]) unlock(key string) { h.unlockAll(exclusive(key)) }

// tryLock takes key exclusively if it is free and nobody waits for it.
func (h *Hosted[S]) tryLock(key string) bool {
	if key == "" {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	id := lockID{key: key}
	kl := h.keys[id]
	if kl == nil {
		kl = &keyLock{}
		h.keys[id] = kl
	}
	if len(kl.queue) > 0 || !kl.free(false) {
		return false
	}
	kl.take(false)
	kl.refs++
	return true
}

// acquire takes one lock, waiting in ctx.
func (h *Hosted[S]) acquire(ctx context.Context, id lockID, shared bool) error {
	h.mu.Lock()
	kl := h.keys[id]
	if kl == nil {
		kl = &keyLock{}
		h.keys[id] = kl
	}
	kl.refs++
	if len(kl.queue) == 0 && kl.free(shared) {
		kl.take(shared)
		h.mu.Unlock()
		return nil
	}
	w := &lockWaiter{shared: shared, ready: make(chan struct{})}
	kl.queue = append(kl.queue, w)
	h.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.granted { // granted as ctx ended: give it back
		h.releaseLocked(id, shared)
		return ctx.Err()
	}
	kl.queue = slices.DeleteFunc(kl.queue, func(x *lockWaiter) bool { return x == w })
	kl.grant() // it may have held back shared waiters behind it
	h.forgetLocked(id, kl)
	return ctx.Err()
}

// releaseLocked releases one lock (taken shared or not) and grants it to
// its next waiters. The caller holds mu.
func (h *Hosted[S]) releaseLocked(id lockID, shared bool) {
	kl := h.keys[id]
	if shared {
		kl.shared--
	} else {
		kl.excl = false
	}
	kl.grant()
	h.forgetLocked(id, kl)
}

// forgetLocked drops one reference to kl, forgetting it when none is
// left. The caller holds mu.
func (h *Hosted[S]) forgetLocked(id lockID, kl *keyLock) {
	if kl.refs--; kl.refs == 0 && h.keys[id] == kl {
		delete(h.keys, id)
	}
}
