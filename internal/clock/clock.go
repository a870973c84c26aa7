// Package clock is the time that long-lived loops read and wait on: the
// process's clock in production, a fake one that tests move by hand, so
// that a test of a lease, an interval or a grace period does not race
// the wall clock (a loaded machine delays a heartbeat past a lease).
//
// A loop takes a Clock (nil: Real), reads Now from it and waits on its
// tickers instead of time.Now and time.NewTicker. Durations a loop
// measures for its own metrics (how long a round took) stay on the real
// clock.
package clock

import (
	"context"
	"sort"
	"sync"
	"time"
)

// A Clock tells the time and makes tickers.
type Clock interface {
	Now() time.Time
	// NewTicker returns a ticker that ticks every d (d > 0), as
	// time.NewTicker.
	NewTicker(d time.Duration) Ticker
}

// A Ticker delivers ticks on C until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the process's clock.
var Real Clock = realClock{}

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Func is a clock whose time is now() and whose tickers are the real
// ones: for tests that call a component's rounds themselves at times
// they choose.
func Func(now func() time.Time) Clock { return funcClock(now) }

type funcClock func() time.Time

func (f funcClock) Now() time.Time                   { return f() }
func (f funcClock) NewTicker(d time.Duration) Ticker { return Real.NewTicker(d) }

// Fake is a clock that moves only when told (Advance, Set). Its tickers
// tick when the time passes their next tick, and a tick is handed to the
// loop that waits on it: Advance returns once every ticker due has been
// taken, so a loop that took its next tick has finished the round its
// previous tick started. A Fake is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
	// advancing serialises Advance and Set: ticks are handed over in
	// time order.
	advancing sync.Mutex
}

// NewFake returns a fake clock at start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now is the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTicker returns a ticker whose first tick is due d after now.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTicker{f: f, every: d, next: f.now.Add(d), c: make(chan time.Time), stop: make(chan struct{})}
	f.tickers = append(f.tickers, t)
	return t
}

// Tickers is how many tickers are running (made and not stopped): a test
// waits for a loop to have started its ticker before it advances.
func (f *Fake) Tickers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.tickers)
}

// Advance moves the time forward by d, one due tick at a time in time
// order, and returns once every tick due is taken (or its ticker
// stopped). A ticker that falls behind by several intervals ticks once
// and skips the rest, as time.Ticker drops ticks for a slow receiver.
func (f *Fake) Advance(d time.Duration) {
	f.advancing.Lock()
	defer f.advancing.Unlock()
	f.mu.Lock()
	end := f.now.Add(d)
	f.mu.Unlock()
	for {
		f.mu.Lock()
		var due []*fakeTicker
		for _, t := range f.tickers {
			if !t.next.After(end) {
				due = append(due, t)
			}
		}
		if len(due) == 0 {
			f.now = end
			f.mu.Unlock()
			return
		}
		sort.SliceStable(due, func(i, j int) bool { return due[i].next.Before(due[j].next) })
		t := due[0]
		at := t.next
		if at.After(f.now) {
			f.now = at
		}
		for !t.next.After(end) {
			t.next = t.next.Add(t.every) // ticks behind are dropped
		}
		f.mu.Unlock()
		select {
		case t.c <- at:
		case <-t.stop:
		}
	}
}

// Set moves the time to at (forward only; an earlier at does nothing),
// as Advance.
func (f *Fake) Set(at time.Time) {
	if d := at.Sub(f.Now()); d > 0 {
		f.Advance(d)
	}
}

type fakeTicker struct {
	f     *Fake
	every time.Duration
	next  time.Time // guarded by f.mu
	c     chan time.Time
	stop  chan struct{}
	once  sync.Once
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	t.once.Do(func() {
		close(t.stop)
		t.f.mu.Lock()
		defer t.f.mu.Unlock()
		for i, u := range t.f.tickers {
			if u == t {
				t.f.tickers = append(t.f.tickers[:i:i], t.f.tickers[i+1:]...)
				break
			}
		}
	})
}

// Sleep waits d on the real clock, or until ctx ends, and returns ctx's
// error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
