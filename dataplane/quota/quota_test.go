package quota

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a manual clock for a Limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setup(t *testing.T) (*Limiter, *clock) {
	t.Helper()
	c := newClock()
	return New(Config{Now: c.Now}), c
}

// offer sends requests of cost at offered per second for d of the clock
// and returns the cost admitted.
func offer(l *Limiter, c *clock, id string, dim Dimension, cost, offered float64, d time.Duration) float64 {
	step := time.Duration(float64(time.Second) * cost / offered)
	admitted := 0.0
	for end := c.Now().Add(d); c.Now().Before(end); c.Add(step) {
		if l.Take(id, dim, cost).OK {
			admitted += cost
		}
	}
	return admitted
}

func TestQuotaLongRunRateUnderTenfoldLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		dim        Dimension
		rate, cost float64
	}{
		{"produce 5 MiB/s in 64 KiB requests", ProduceBytes, 5 << 20, 64 << 10},
		{"produce 5 MiB/s in 3 MiB requests (over the burst)", ProduceBytes, 5 << 20, 3 << 20},
		{"requests 500/s", Requests, 500, 1},
		{"requests 7/s", Requests, 7, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, c := setup(t)
			l.SetRates("a", rates(tc.dim, tc.rate))
			const run = 100 * time.Second
			got := offer(l, c, "a", tc.dim, tc.cost, 10*tc.rate, run) / run.Seconds()
			// The burst (1 s of the rate) and one request's cost are all
			// it may exceed the rate by; under load it never falls short.
			require.InEpsilon(t, tc.rate, got, 0.03, "admitted %.1f/s against %.1f/s", got, tc.rate)
			require.LessOrEqual(t, got*run.Seconds(), tc.rate*(run.Seconds()+1)+tc.cost)
		})
	}
}

func rates(d Dimension, r float64) Rates {
	var out Rates
	out[d] = r
	return out
}

func TestQuotaDebt(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(ProduceBytes, 1000)) // burst 1000
	// A request larger than the burst is admitted, taking the bucket into
	// debt: 3000 - 1000 = 2000 tokens, 2 s at 1000/s.
	d := l.Take("a", ProduceBytes, 3000)
	require.True(t, d.OK)
	require.Equal(t, 1000.0, d.Rate)
	d = l.Take("a", ProduceBytes, 1)
	require.False(t, d.OK)
	require.Equal(t, 2*time.Second, d.RetryAfter)
	// Half a second later the debt is 1500: 1.5 s.
	c.Add(500 * time.Millisecond)
	d = l.Take("a", ProduceBytes, 1)
	require.False(t, d.OK)
	require.Equal(t, 1500*time.Millisecond, d.RetryAfter)
	// Refusals charge nothing: once the delay has passed, the next is
	// admitted.
	c.Add(d.RetryAfter)
	require.True(t, l.Take("a", ProduceBytes, 1).OK)
	// Other tenants and dimensions are not affected.
	require.True(t, l.Take("b", ProduceBytes, 1e9).OK)
	require.True(t, l.Take("a", FetchBytes, 1e9).OK)
}

func TestQuotaCheckThenCharge(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(FetchBytes, 100))
	require.True(t, l.Check("a", FetchBytes, 50).OK)
	l.Charge("a", FetchBytes, 400) // answered 400 bytes: 300 in debt
	d := l.Check("a", FetchBytes, 50)
	require.False(t, d.OK)
	require.Equal(t, 3*time.Second, d.RetryAfter)
	c.Add(time.Second)
	m, span := l.Window()
	require.Equal(t, time.Second, span)
	// Offered: the 400 answered and the 50 estimated for the refusal.
	require.Equal(t, 450.0, m["a"].Offered[FetchBytes])
	require.Equal(t, 400.0, m["a"].Admitted[FetchBytes])
	require.Equal(t, 400.0, l.MeanCharge("a", FetchBytes))
}

func TestQuotaRateChange(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(Requests, 100))
	got := offer(l, c, "a", Requests, 1, 1000, 10*time.Second)
	require.InDelta(t, 100*11, got, 2) // 10 s at 100/s and the 1 s burst
	// Halved: the bucket keeps its debt and pays it at the new rate; the
	// admitted rate follows at once.
	l.SetRates("a", rates(Requests, 50))
	require.Equal(t, Rates{Requests: 50}, l.RatesOf("a"))
	got = offer(l, c, "a", Requests, 1, 1000, 20*time.Second)
	require.InEpsilon(t, 50*20, got, 0.03)
	// Raised: the new rate holds from now on.
	l.SetRates("a", rates(Requests, 400))
	got = offer(l, c, "a", Requests, 1, 4000, 20*time.Second)
	require.InEpsilon(t, 400*20, got, 0.03)
	// Debt survives a change: 3 s of debt at 100/s is 1.5 s at 200/s.
	l.SetRates("b", rates(ProduceBytes, 100))
	require.True(t, l.Take("b", ProduceBytes, 400).OK)
	l.SetRates("b", rates(ProduceBytes, 200))
	require.Equal(t, 1500*time.Millisecond, l.Take("b", ProduceBytes, 1).RetryAfter)
	// No rate: no limit.
	l.SetRates("b", Rates{})
	require.True(t, l.Take("b", ProduceBytes, 1e12).OK)
	require.True(t, l.Take("b", ProduceBytes, 1e12).OK)
}

func TestQuotaNoRatesAdmitsAndMeters(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	for range 1000 {
		require.True(t, l.Take("new", Requests, 1).OK)
	}
	c.Add(2 * time.Second)
	m, span := l.Window()
	require.Equal(t, 2*time.Second, span)
	require.Equal(t, 500.0, m["new"].Offered[Requests])
	require.Equal(t, 500.0, m["new"].Admitted[Requests])
}

func TestQuotaMetersOfferedAndAdmitted(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(ProduceBytes, 1000))
	admitted := offer(l, c, "a", ProduceBytes, 100, 10000, 10*time.Second)
	m, span := l.Window()
	require.Equal(t, 10*time.Second, span)
	require.InEpsilon(t, 10000, m["a"].Offered[ProduceBytes], 0.01)
	require.InEpsilon(t, admitted/10, m["a"].Admitted[ProduceBytes], 1e-9)
	require.InEpsilon(t, 1000, m["a"].Admitted[ProduceBytes], 0.15) // 10 s plus the 1 s burst
	// The next window starts empty.
	c.Add(time.Second)
	m, _ = l.Window()
	require.Equal(t, Meter{}, m["a"])
}

func TestQuotaForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	c := newClock()
	l := New(Config{Now: c.Now, ForgetAfter: 3})
	l.SetRates("a", rates(Requests, 10))
	l.Take("b", Requests, 1)
	for i := range 3 {
		c.Add(time.Second)
		m, _ := l.Window()
		_, ok := m["a"]
		require.Equal(t, i < 2, ok, "window %d", i)
		l.Take("b", Requests, 1)
	}
	require.Equal(t, Rates{}, l.RatesOf("a"))
	require.Equal(t, Rates{}, l.RatesOf("b"))
	m, _ := l.Window()
	require.Contains(t, m, "b")
}

func TestQuotaProducerIDBurst(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	// 360 per hour: 0.1/s, a minute's burst of 6.
	l.SetRates("a", rates(ProducerIDs, 0.1))
	n := 0
	for l.Take("a", ProducerIDs, 1).OK {
		n++
	}
	require.Equal(t, 7, n) // 6 tokens, and the 7th into debt
	d := l.Take("a", ProducerIDs, 1)
	require.Equal(t, 10*time.Second, d.RetryAfter)
	c.Add(d.RetryAfter)
	require.True(t, l.Take("a", ProducerIDs, 1).OK)
}

func TestQuotaBucketRejectsBadRates(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		var b Bucket
		b.SetRate(now, r, r)
		b.Charge(now, 1e9)
		require.Zero(t, b.Debt(now), "rate %v", r)
	}
}

func TestQuotaConcurrent(t *testing.T) {
	t.Parallel()
	l := New(Config{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				id := []string{"a", "b"}[j%2]
				l.Take(id, Dimension(i%Dimensions), 1)
				if j%100 == 0 {
					l.SetRates(id, rates(Requests, float64(j+1)))
					l.Window()
				}
			}
		})
	}
	wg.Wait()
}

func TestQuotaDimensionNames(t *testing.T) {
	t.Parallel()
	require.Equal(t, "produce_bytes", ProduceBytes.String())
	require.Equal(t, "producer_ids", ProducerIDs.String())
	require.Equal(t, "unknown", Dimension(9).String())
}
