package httpgate

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// pool is one level of the memory budget: the server, one principal, one
// connection. Its fields are guarded by the budget's mutex.
type pool struct {
	name string
	cap  int64
	used int64
	// refs counts the requests holding or waiting for a share of this
	// pool; a principal's pool is forgotten when it drops to 0.
	refs int
	// key is the pool's key in budget.principals ("" for pools kept
	// elsewhere).
	key string
}

// charge is what one request holds: the same amount at each of its pools.
type charge struct {
	pools []*pool
	n     []int64
}

func newCharge(n int64, pools ...*pool) *charge {
	c := &charge{pools: pools, n: make([]int64, len(pools))}
	for i := range pools {
		c.n[i] = n
	}
	return c
}

// fits reports whether c fits beside what the pools hold, and if not,
// whether only the first pool (the shared one) lacks room.
//
// A request larger than a pool's capacity fits there when the pool is
// empty: it goes in alone rather than never (so a pool holds at most its
// capacity, or one request larger than it).
func (c *charge) fits() (ok, sharedFull bool) {
	ok, others := true, true
	for i, p := range c.pools {
		if p.used+c.n[i] > p.cap && p.used > 0 {
			ok = false
			if i > 0 {
				others = false
			}
		}
	}
	return ok, !ok && others
}

// budget bounds the request bytes held at once, at every level of a
// request's pools. Requests that do not fit wait in arrival order: a
// waiter is granted as soon as it fits, and one that lacks room only in
// the shared pool (the first of its pools) holds back every waiter after
// it, so that small requests cannot starve a large one there; a waiter
// short of room in its own principal's or connection's pool holds back
// nobody (one tenant's backlog never delays another tenant). A request
// that does not wait (acquire with wait 0) takes room it finds whatever
// waits.
type budget struct {
	mu         sync.Mutex
	principals map[string]*pool
	waiters    list.List // of *waiter
}

type waiter struct {
	c     *charge
	ready chan struct{} // closed when granted
}

func newBudget() *budget {
	return &budget{principals: map[string]*pool{}}
}

// principal returns the pool of key with capacity cap, counting a
// reference the caller gives back through acquire's release (or, when
// acquire is not called, unref).
func (b *budget) principal(key string, cap int64) *pool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.principals[key]
	if p == nil {
		p = &pool{name: "principal", cap: cap, key: key}
		b.principals[key] = p
	}
	p.refs++
	return p
}

func (b *budget) unrefLocked(p *pool) {
	p.refs--
	if p.key != "" && p.refs == 0 && p.used == 0 {
		delete(b.principals, p.key)
	}
}

// acquire takes c, waiting up to wait (or until ctx ends) for room; with
// wait 0 it takes c only if there is room at once. It returns false when
// the wait ended first; c is then given back (and the principal pools'
// references dropped). After true, the caller gives c back with release.
func (b *budget) acquire(ctx context.Context, c *charge, wait time.Duration) bool {
	b.mu.Lock()
	if wait <= 0 {
		// A call that does not wait takes room it finds whatever waits:
		// it holds up no one, and no one's wait holds it up (a waiter
		// short of shared room would otherwise refuse every such call).
		defer b.mu.Unlock()
		if ok, _ := c.fits(); ok {
			for i, p := range c.pools {
				p.used += c.n[i]
			}
			return true
		}
		for _, p := range c.pools {
			if p.key != "" {
				b.unrefLocked(p)
			}
		}
		return false
	}
	w := &waiter{c: c, ready: make(chan struct{})}
	e := b.waiters.PushBack(w)
	b.grantLocked()
	select {
	case <-w.ready:
		b.mu.Unlock()
		return true
	default:
	}
	b.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.ready:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready: // granted meanwhile
		return true
	default:
	}
	b.giveUpLocked(e)
	return false
}

// giveUpLocked removes the waiter at e, not granted.
func (b *budget) giveUpLocked(e *list.Element) {
	w := b.waiters.Remove(e).(*waiter)
	for _, p := range w.c.pools {
		if p.key != "" {
			b.unrefLocked(p)
		}
	}
	// Its place no longer holds back the waiters behind it.
	b.grantLocked()
}

// grantLocked grants the waiters that fit, in arrival order, stopping at
// the first that lacks room only in its shared pool.
func (b *budget) grantLocked() {
	for e := b.waiters.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		ok, sharedFull := w.c.fits()
		switch {
		case ok:
			for i, p := range w.c.pools {
				p.used += w.c.n[i]
			}
			b.waiters.Remove(e)
			close(w.ready)
		case sharedFull:
			return
		}
		e = next
	}
}

// shrink lowers what c holds to n at every pool (a body that ended short
// of what was reserved for it) and grants the waiters that now fit.
func (b *budget) shrink(c *charge, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range c.pools {
		if m := n; m < c.n[i] {
			p.used -= c.n[i] - m
			c.n[i] = m
		}
	}
	b.grantLocked()
}

// release gives back everything c holds.
func (b *budget) release(c *charge) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range c.pools {
		p.used -= c.n[i]
		c.n[i] = 0
		if p.key != "" {
			b.unrefLocked(p)
		}
	}
	b.grantLocked()
}
