package clock

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// A loop on a fake ticker does one round per tick, and Advance returns
// only once the ticks due were taken: after two advances, the round of
// the first has finished.
func TestClockFakeTickerRounds(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	tk := f.NewTicker(time.Second)
	require.Equal(t, 1, f.Tickers())
	var mu sync.Mutex
	var rounds []time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		for at := range tk.C() {
			mu.Lock()
			rounds = append(rounds, at)
			mu.Unlock()
			if len(rounds) == 3 {
				tk.Stop()
				return
			}
		}
	}()
	f.Advance(500 * time.Millisecond)
	mu.Lock()
	require.Empty(t, rounds, "no tick before its time")
	mu.Unlock()
	require.Equal(t, t0.Add(500*time.Millisecond), f.Now())
	f.Advance(500 * time.Millisecond) // the first tick
	f.Advance(time.Second)            // the second: the first round is done
	mu.Lock()
	require.GreaterOrEqual(t, len(rounds), 1)
	require.Equal(t, t0.Add(time.Second), rounds[0])
	mu.Unlock()
	// Far behind: one tick, the rest dropped.
	f.Advance(10 * time.Second)
	<-done
	require.Equal(t, []time.Time{t0.Add(time.Second), t0.Add(2 * time.Second), t0.Add(3 * time.Second)}, rounds)
	require.Zero(t, f.Tickers(), "stopped")
	f.Advance(time.Hour) // a stopped ticker holds nothing up
	require.Equal(t, t0.Add(time.Hour+12*time.Second), f.Now())
}

func TestClockFakeSetAndFunc(t *testing.T) {
	t.Parallel()
	f := NewFake(t0)
	f.Set(t0.Add(-time.Minute))
	require.Equal(t, t0, f.Now(), "never backwards")
	f.Set(t0.Add(time.Minute))
	require.Equal(t, t0.Add(time.Minute), f.Now())
	now := t0
	c := Func(func() time.Time { return now })
	now = now.Add(time.Hour)
	require.Equal(t, t0.Add(time.Hour), c.Now())
	require.Equal(t, Real, Or(nil))
	require.Equal(t, Clock(f), Or(f))
}
