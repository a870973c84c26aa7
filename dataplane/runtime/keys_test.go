package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendsStarted is how many appends reached the partition (each waits
// for the gate there, before anything is written).
func (f *fixture) appendsStarted() int {
	var n int
	f.p.set(func(p *logPartition) { n = p.appends })
	return n
}

// waiting is how many operations wait for lock id.
func (f *fixture) waiting(id lockID) int {
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if kl := f.h.keys[id]; kl != nil {
		return len(kl.queue)
	}
	return 0
}

// offsetOf reads the log offset the shard replayed key k's last record at.
func offsetOf(h *Hosted[*kv], k string) int64 {
	off, _ := Read(h, func(s *kv) int64 { return s.offsets[k] })
	return off
}

// TestRuntimeSharedWrites: operations holding one key shared with
// different sub-keys have their appends in flight at once, and each
// answers only once its own records are written and replayed; one with a
// sub-key in use waits for it and runs against its records; an exclusive
// operation on the key waits for every shared one before it and sees
// their records, and a shared one arriving after it waits behind it (no
// starvation). Operations that exclude each other replay in log order.
func TestRuntimeSharedWrites(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gate := make(chan struct{})
	f.p.set(func(p *logPartition) { p.appendGate = gate })
	type answer struct {
		prev string
		err  error
	}
	shared := func(k, v string) chan answer {
		ch := make(chan answer, 1)
		go func() {
			prev, err := WriteShared(f.ctx, f.h, "g", []string{k}, set(k, v))
			if err == nil {
				assert.NotEmpty(t, get(f.h, k), "answered once replayed") // (a later write of k may have replayed too)
				assert.Positive(t, f.p.LEO(), "answered once written")
			}
			ch <- answer{prev, err}
		}()
		return ch
	}
	p0, p1 := shared("p0", "1"), shared("p1", "1")
	waitFor(t, func() bool { return f.appendsStarted() == 2 }, "both appends in flight at once")
	require.Empty(t, get(f.h, "p0"), "nothing replayed before its append returned")

	again := shared("p0", "2")
	waitFor(t, func() bool { return f.waiting(lockID{key: "g", sub: "p0", isSub: true}) == 1 }, "the second commit of p0 to wait for the first")
	excl := make(chan answer, 1)
	go func() {
		r, err := Write(f.ctx, f.h, "g", func(s *kv, _ time.Time) (Result[string], error) {
			return Result[string]{Update: Update{Records: []Record{{Key: []byte("x"), Value: []byte("x")}}},
				Response: fmt.Sprintf("p0=%s p1=%s", s.vals["p0"], s.vals["p1"])}, nil
		})
		excl <- answer{r, err}
	}()
	waitFor(t, func() bool { return f.waiting(lockID{key: "g"}) == 1 }, "the exclusive operation to wait for the key")
	late := shared("p2", "1")
	waitFor(t, func() bool { return f.waiting(lockID{key: "g"}) == 2 }, "a later shared operation to wait behind the exclusive one")
	require.Equal(t, 2, f.appendsStarted(), "only the first two appends started")

	close(gate)
	for _, ch := range []chan answer{p0, p1, late} {
		a := <-ch
		require.NoError(t, a.err)
	}
	a := <-again
	require.NoError(t, a.err)
	require.Equal(t, "1", a.prev, "ran after the first commit of p0, against its record")
	a = <-excl
	require.NoError(t, a.err)
	require.Equal(t, "p0=2 p1=1", a.prev, "ran after every shared operation before it, against their records")
	order := func(keys ...string) {
		t.Helper()
		for i := 1; i < len(keys); i++ {
			require.Less(t, offsetOf(f.h, keys[i-1]), offsetOf(f.h, keys[i]), "%s before %s in the log", keys[i-1], keys[i])
		}
	}
	order("p1", "x", "p2")
	order("p0", "x") // the second commit of p0
	require.Equal(t, 5, f.appendsStarted())
	f.h.mu.Lock()
	require.Empty(t, f.h.keys, "every lock released and forgotten")
	f.h.mu.Unlock()
	require.Equal(t, "2", (<-shared("p0", "3")).prev)
}

// TestRuntimeEmptyKeyNotBehindAppends: an operation under the empty key
// (writing nothing) runs while another's append waits, against the state
// before that one's records (which has not answered), and answers at
// once; reads too. One that returns records is refused.
func TestRuntimeEmptyKeyNotBehindAppends(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	_, err := Write(f.ctx, f.h, "a", set("a", "0"))
	require.NoError(t, err)
	require.Equal(t, 1, f.appendsStarted())
	gate := make(chan struct{})
	f.p.set(func(p *logPartition) { p.appendGate = gate })
	done := make(chan error, 2)
	go func() {
		_, err := Write(f.ctx, f.h, "a", set("a", "1"))
		done <- err
	}()
	go func() {
		_, err := WriteShared(f.ctx, f.h, "g", []string{"a"}, set("g", "1"))
		done <- err
	}()
	waitFor(t, func() bool { return f.appendsStarted() == 3 }, "the appends to start")
	for range 3 {
		r, err := Write(f.ctx, f.h, "", func(s *kv, _ time.Time) (Result[string], error) {
			return Result[string]{Response: s.vals["a"]}, nil
		})
		require.NoError(t, err)
		require.Equal(t, "0", r, "the state before the write in flight")
	}
	require.Equal(t, "0", get(f.h, "a"))
	_, err = Write(f.ctx, f.h, "", set("b", "1"))
	require.EqualError(t, err, "an operation under the empty key wrote records")
	_, err = WriteShared(f.ctx, f.h, "", []string{"a"}, set("b", "1"))
	require.EqualError(t, err, "a shared write needs a key")
	close(gate)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	require.Equal(t, "1", get(f.h, "a"))
	require.Equal(t, 3, f.appendsStarted(), "the refused writes appended nothing")
}

// TestRuntimeLockWaitEnds: an operation whose context ends while it waits
// for a lock answers the context's error and leaves the lock as it was;
// an exclusive waiter that gives up lets the shared ones queued behind it
// through at once.
func TestRuntimeLockWaitEnds(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gate := make(chan struct{})
	f.p.set(func(p *logPartition) { p.appendGate = gate })
	first := make(chan error, 1)
	go func() {
		_, err := WriteShared(f.ctx, f.h, "g", []string{"p0"}, set("p0", "1"))
		first <- err
	}()
	waitFor(t, func() bool { return f.appendsStarted() == 1 }, "the first append")

	ctx, cancel := context.WithCancel(f.ctx)
	excl := make(chan error, 1)
	go func() {
		_, err := Write(ctx, f.h, "g", set("x", "1"))
		excl <- err
	}()
	waitFor(t, func() bool { return f.waiting(lockID{key: "g"}) == 1 }, "the exclusive operation to wait")
	behind := make(chan error, 1)
	go func() {
		_, err := WriteShared(f.ctx, f.h, "g", []string{"p1"}, set("p1", "1"))
		behind <- err
	}()
	waitFor(t, func() bool { return f.waiting(lockID{key: "g"}) == 2 }, "the shared operation to wait behind it")
	cancel()
	require.ErrorIs(t, <-excl, context.Canceled)
	waitFor(t, func() bool { return f.appendsStarted() == 2 }, "the shared operation behind it to start its append")

	sameSub, cancelSub := context.WithCancel(f.ctx)
	subWait := make(chan error, 1)
	go func() {
		_, err := WriteShared(sameSub, f.h, "g", []string{"p0"}, set("p0", "2"))
		subWait <- err
	}()
	waitFor(t, func() bool { return f.waiting(lockID{key: "g", sub: "p0", isSub: true}) == 1 }, "the second commit of p0 to wait")
	cancelSub()
	require.ErrorIs(t, <-subWait, context.Canceled)

	close(gate)
	require.NoError(t, <-first)
	require.NoError(t, <-behind)
	require.Empty(t, get(f.h, "x"))
	require.Equal(t, "1", get(f.h, "p0"))
	f.h.mu.Lock()
	require.Empty(t, f.h.keys)
	f.h.mu.Unlock()
	_, err := Write(f.ctx, f.h, "g", set("x", "2"))
	require.NoError(t, err, "the key is free")
}
