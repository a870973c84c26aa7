package quota

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/limit"
)

// The dimensions these tests use, from the limit table.
const (
	ProduceBytes = limit.ProduceBytes
	FetchBytes   = limit.FetchBytes
	Requests     = limit.Requests
	ProducerIDs  = limit.ProducerIDs
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
	// Half a second later the debt is 1500: 1.5 s, and behind the first
	// refusal's 1 ms (its cost of 1 at 1000/s).
	c.Add(500 * time.Millisecond)
	d = l.Take("a", ProduceBytes, 1)
	require.False(t, d.OK)
	require.Equal(t, 1501*time.Millisecond, d.RetryAfter)
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
	m0 := m["a"].Offered[ProduceBytes]
	require.InEpsilon(t, 10000, m0, 0.01)
	require.InEpsilon(t, admitted/10, m["a"].Admitted[ProduceBytes], 1e-9)
	require.InEpsilon(t, 1000, m["a"].Admitted[ProduceBytes], 0.15) // 10 s plus the 1 s burst
	// The next window starts empty: nothing admitted, and the offered
	// rate's average decays with its 5 s time constant.
	c.Add(time.Second)
	m, _ = l.Window()
	require.Zero(t, m["a"].Admitted)
	require.InEpsilon(t, m0*math.Exp(-1.0/5), m["a"].Offered[ProduceBytes], 1e-9)
}

// TestQuotaOfferedSmoothed: the offered rate a broker reports is a moving
// average over windows, so that a client that waits out a refusal's delay
// keeps its share of the division meanwhile; the admitted rate is each
// window's own.
func TestQuotaOfferedSmoothed(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(ProduceBytes, 1000))
	l.Take("a", ProduceBytes, 5000) // 5000 offered and admitted in the first window: taken as it is
	c.Add(time.Second)
	m, _ := l.Window()
	require.Equal(t, 5000.0, m["a"].Offered[ProduceBytes])
	require.Equal(t, 5000.0, m["a"].Admitted[ProduceBytes])
	// Seven idle seconds, one window each: the average decays by e^(-1/5)
	// a second, to 5000·e^(-7/5) = 1233, not to 0.
	for range 7 {
		c.Add(time.Second)
		m, _ = l.Window()
		require.Zero(t, m["a"].Admitted[ProduceBytes])
	}
	require.InEpsilon(t, 5000*math.Exp(-7.0/5), m["a"].Offered[ProduceBytes], 1e-9)
	// A window's length weighs: one 7 s window decays it as much as seven
	// of 1 s.
	l2, c2 := setup(t)
	l2.SetRates("a", rates(ProduceBytes, 1000))
	l2.Take("a", ProduceBytes, 5000)
	c2.Add(time.Second)
	l2.Window()
	c2.Add(7 * time.Second)
	m2, _ := l2.Window()
	require.InEpsilon(t, m["a"].Offered[ProduceBytes], m2["a"].Offered[ProduceBytes], 1e-9)

	// Traffic again after 8 s without: averaged (the last 5000 of it
	// decayed, the new 3000 weighed by 1 − e^(-1/5)).
	l.Take("a", ProduceBytes, 3000)
	c.Add(time.Second)
	before := m["a"].Offered[ProduceBytes]
	m, _ = l.Window()
	require.InEpsilon(t, before+(1-math.Exp(-0.2))*(3000-before), m["a"].Offered[ProduceBytes], 1e-9)
}

// TestQuotaOfferedRestarts: a dimension's average starts at its first
// window with traffic, in a tenant the Limiter knew from another
// dimension too, and starts again so after three time constants (15 s)
// without traffic in it; other dimensions keep theirs.
func TestQuotaOfferedRestarts(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.Take("a", Requests, 10)
	c.Add(time.Second)
	m, _ := l.Window()
	require.Equal(t, 10.0, m["a"].Offered[Requests])
	require.Zero(t, m["a"].Offered[ProduceBytes])
	for range 3 {
		l.Take("a", Requests, 10)
		c.Add(time.Second)
		l.Window()
	}
	l.Take("a", ProduceBytes, 4000) // the first produce: not averaged up from 0
	l.Take("a", Requests, 10)
	c.Add(time.Second)
	m, _ = l.Window()
	require.Equal(t, 4000.0, m["a"].Offered[ProduceBytes])
	require.InEpsilon(t, 10.0, m["a"].Offered[Requests], 1e-9)

	// 14 s without produce: still averaged; 15 s: restarted.
	for _, quiet := range []time.Duration{14 * time.Second, 15 * time.Second} {
		for range int(quiet / time.Second) {
			c.Add(time.Second)
			l.Window()
		}
		l.Take("a", ProduceBytes, 2000)
		c.Add(time.Second)
		m, _ = l.Window()
		if quiet < 15*time.Second {
			require.Less(t, m["a"].Offered[ProduceBytes], 2000.0, "after %v", quiet)
		} else {
			require.Equal(t, 2000.0, m["a"].Offered[ProduceBytes], "after %v", quiet)
		}
	}

	// A restart in a short window (an early exchange) counts over a
	// second, not ten times over.
	for range 15 {
		c.Add(time.Second)
		l.Window()
	}
	l.Take("a", ProduceBytes, 2000)
	c.Add(100 * time.Millisecond)
	m, _ = l.Window()
	require.Equal(t, 2000.0, m["a"].Offered[ProduceBytes])
}

func TestQuotaForgetsIdleTenants(t *testing.T) {
	t.Parallel()
	c := newClock()
	l := New(Config{Now: c.Now, ForgetAfter: 3 * time.Second})
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

	// Forgetting counts time, not windows: many short windows (exchanges
	// run early) keep an idle tenant as long as a few long ones.
	l.SetRates("c", rates(Requests, 10))
	for range 29 {
		c.Add(100 * time.Millisecond)
		l.Window()
	}
	require.Equal(t, rates(Requests, 10), l.RatesOf("c"), "2.9 s idle")
	c.Add(100 * time.Millisecond)
	l.Window()
	require.Equal(t, Rates{}, l.RatesOf("c"), "3 s idle")
}

func TestQuotaProducerIDBurst(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	// 360 per hour: 0.1/s, a 10-minute burst of 60.
	l.SetRates("a", rates(ProducerIDs, 0.1))
	n := 0
	d := l.Take("a", ProducerIDs, 1)
	for ; d.OK; d = l.Take("a", ProducerIDs, 1) {
		n++
	}
	require.Equal(t, 61, n) // 60 tokens, and the 61st into debt
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
				l.Take(id, Dimension(i%int(Dimensions)), 1)
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

func TestQuotaRefusalsStaggered(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(ProduceBytes, 1000))          // burst 1000: a queue of 1 s
	require.True(t, l.Take("a", ProduceBytes, 2000).OK) // 1000 in debt: 1 s
	// Refused at the same instant: each is told to come back when the
	// debt and the costs of the ones refused before it are paid.
	want := []struct {
		cost  float64
		retry time.Duration
	}{{100, time.Second}, {200, 1100 * time.Millisecond}, {50, 1300 * time.Millisecond}, {100, 1350 * time.Millisecond}}
	var prev time.Duration
	for i, w := range want {
		d := l.Take("a", ProduceBytes, w.cost)
		require.False(t, d.OK)
		require.Equal(t, w.retry, d.RetryAfter, "refusal %d", i)
		require.Greater(t, d.RetryAfter, prev)
		prev = d.RetryAfter
	}
	// Check queues at the cost its caller estimates.
	d := l.Check("a", ProduceBytes, 150)
	require.Equal(t, 1450*time.Millisecond, d.RetryAfter)
	require.Equal(t, 1600*time.Millisecond, l.Take("a", ProduceBytes, 1).RetryAfter)
	// Each, coming back when told, is admitted, at the cost it was
	// refused at; a request in between finds the bucket in debt and is
	// told to come back after the queue.
	start := c.Now()
	for i, w := range want {
		c.Add(start.Add(w.retry).Sub(c.Now()))
		require.True(t, l.Take("a", ProduceBytes, w.cost).OK, "refusal %d coming back", i)
		if i == 1 {
			d := l.Take("a", ProduceBytes, 10)
			require.False(t, d.OK)
			require.Equal(t, start.Add(1601*time.Millisecond), c.Now().Add(d.RetryAfter))
		}
	}
	c.Add(start.Add(1450 * time.Millisecond).Sub(c.Now()))
	require.True(t, l.Check("a", ProduceBytes, 150).OK)
	l.Charge("a", ProduceBytes, 150)
	c.Add(150 * time.Millisecond)
	require.True(t, l.Take("a", ProduceBytes, 1).OK)
}

// herdRun is what herd measured: requests per client, and the delays the
// refusals asked for.
type herdRun struct {
	admitted, refused []int
	waited            time.Duration
}

func (h herdRun) total() (admitted, refused int) {
	for i := range h.admitted {
		admitted += h.admitted[i]
		refused += h.refused[i]
	}
	return admitted, refused
}

// herd simulates n clients of tenant "a" sending requests of cost in dim
// one after another, all starting at once: an admitted client sends its
// next request at the same instant, a refused one sends it again
// RetryAfter later, plus jitter(RetryAfter) when jitter is not nil. It
// runs warm + span of the clock and counts, per client, the requests
// admitted and refused during the last span.
func herd(t *testing.T, l *Limiter, c *clock, dim Dimension, n int, cost float64, warm, span time.Duration, jitter func(time.Duration) time.Duration) herdRun {
	type event struct {
		at          time.Time
		seq, client int
	}
	var q []event // a binary heap by (at, seq): the clients' next requests
	less := func(i, j int) bool {
		if !q[i].at.Equal(q[j].at) {
			return q[i].at.Before(q[j].at)
		}
		return q[i].seq < q[j].seq
	}
	seq := 0
	push := func(at time.Time, client int) {
		seq++
		q = append(q, event{at, seq, client})
		for i := len(q) - 1; i > 0 && less(i, (i-1)/2); i = (i - 1) / 2 {
			q[i], q[(i-1)/2] = q[(i-1)/2], q[i]
		}
	}
	pop := func() event {
		e := q[0]
		q[0] = q[len(q)-1]
		q = q[:len(q)-1]
		for i := 0; ; {
			m := i
			for _, k := range []int{2*i + 1, 2*i + 2} {
				if k < len(q) && less(k, m) {
					m = k
				}
			}
			if m == i {
				break
			}
			q[i], q[m] = q[m], q[i]
			i = m
		}
		return e
	}
	start := c.Now()
	from, end := start.Add(warm), start.Add(warm+span)
	for i := range n {
		push(start, i)
	}
	run := herdRun{admitted: make([]int, n), refused: make([]int, n)}
	for e := pop(); e.at.Before(end); e = pop() {
		c.Add(e.at.Sub(c.Now()))
		d := l.Take("a", dim, cost)
		counted := !e.at.Before(from)
		if d.OK {
			if counted {
				run.admitted[e.client]++
			}
			push(e.at, e.client)
			continue
		}
		require.Positive(t, d.RetryAfter)
		if counted {
			run.refused[e.client]++
			run.waited += d.RetryAfter
		}
		wait := d.RetryAfter
		if jitter != nil {
			wait = jitter(wait)
		}
		push(e.at.Add(wait), e.client)
	}
	return run
}

// sdkJitter is the Go SDK's jitterUp (client/throttle.go), with a seeded
// source: d plus up to a tenth of it.
func sdkJitter() func(time.Duration) time.Duration {
	r := rand.New(rand.NewPCG(1, 2))
	return func(d time.Duration) time.Duration { return d + time.Duration(r.Int64N(int64(d/10+1))) }
}

// TestQuotaHerdAdmittedInTurn: n clients over their tenant's rate, each
// retrying when told, over a simulated minute (after 10 s to settle).
// The bucket admits the rate either way; what staggering changes is the
// refusals. Every client sends its next request the moment one is
// admitted, which the bucket, just charged, refuses: one refusal per
// admitted request is the least there can be. Measured (refusals per
// admitted request, the worst client's in brackets):
//
//	                                          staggered      debt alone (before)
//	requests 500/s, 50 clients                1.00 (1.00)    50.0 (50.0)
//	  with the SDK's jitter                   1.00 (1.08)    50.0 (55.1)
//	produce 1 MiB/s in 64 KiB, 8 clients      1.00 (1.00)     8.0 (8.0)
//	  with the SDK's jitter                   1.00 (1.00)     8.0 (9.1)
//	more refused than the 1 s queue holds:
//	produce 1 MiB/s in 64 KiB, 40 clients     2.40 (3.17)    40.0 (40.0)
//	  with the SDK's jitter                   2.36 (4.67)    40.0 (64.0)
//	produce 2 MiB/s in 1 MiB, 8 clients       3.00 (3.00)     8.0 (8.0)
//	  with the SDK's jitter                   3.00 (13.7)     8.0 (13.3)
//
// With the debt alone every waiting client came back at the same instant
// and all but one were refused again. The sums of the delays asked for
// are about the same both ways (the clients wait as long; they ask less
// often).
func TestQuotaHerdAdmittedInTurn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		dim        Dimension
		rate, cost float64
		n          int
		jitter     bool
		perAdmit   float64 // refusals per admitted request at most, overall
		perClient  float64 // and for each client
	}{
		{"requests 500/s, 50 clients", Requests, 500, 1, 50, false, 1.001, 1.01},
		{"requests 500/s, 50 clients, SDK jitter", Requests, 500, 1, 50, true, 1.01, 1.15},
		{"produce 1 MiB/s in 64 KiB, 8 clients", ProduceBytes, 1 << 20, 64 << 10, 8, false, 1.001, 1.01},
		{"produce 1 MiB/s in 64 KiB, 8 clients, SDK jitter", ProduceBytes, 1 << 20, 64 << 10, 8, true, 1.01, 1.15},
		{"produce 1 MiB/s in 64 KiB, 40 clients", ProduceBytes, 1 << 20, 64 << 10, 40, false, 2.5, 3.5},
		{"produce 2 MiB/s in 1 MiB, 8 clients", ProduceBytes, 2 << 20, 1 << 20, 8, false, 3.1, 3.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, c := setup(t)
			l.SetRates("a", rates(tc.dim, tc.rate))
			var jitter func(time.Duration) time.Duration
			if tc.jitter {
				jitter = sdkJitter()
			}
			const span = time.Minute
			h := herd(t, l, c, tc.dim, tc.n, tc.cost, 10*time.Second, span, jitter)
			admitted, refused := h.total()
			got := float64(admitted) * tc.cost / span.Seconds()
			t.Logf("admitted %.4f of the rate: %d requests, %d refused (%.2f per admitted), delays asked %v", got/tc.rate, admitted, refused, float64(refused)/float64(admitted), h.waited)
			require.InEpsilon(t, tc.rate, got, 0.01)
			require.LessOrEqual(t, float64(refused), tc.perAdmit*float64(admitted))
			for i := range h.admitted {
				require.Positive(t, h.admitted[i], "client %d", i)
				require.LessOrEqual(t, float64(h.refused[i]), tc.perClient*float64(h.admitted[i]), "client %d", i)
			}
		})
	}
}

// TestQuotaClientWaitingLongest: a client with k requests in flight that,
// when any is refused, waits the longest delay and sends all k again, as
// the SDK's producer does per partition. Its earlier requests' slots pass
// unused, but the queue is no longer than the burst, so the bucket keeps
// them as tokens for the requests sent together at the end: it is
// admitted its rate. The SDK's jitter (up to a tenth of the longest
// delay, nearly the queue's second) can find the bucket full and lose
// what overflows: 1.7 MiB/s in 1 MiB batches, 5 in flight, measured 0.94
// of the rate (1.00 with the debt alone, whose delays were shorter); in
// 256 KiB batches 1.00.
func TestQuotaClientWaitingLongest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		rate, cost float64
		k          int
		jitter     bool
		atLeast    float64 // of the rate
	}{
		{"1.7 MiB/s, 1 MiB, 5 in flight", 1.7 * (1 << 20), 1 << 20, 5, false, 0.99},
		{"1.7 MiB/s, 256 KiB, 5 in flight", 1.7 * (1 << 20), 256 << 10, 5, false, 0.99},
		{"1 MiB/s, 64 KiB, 5 in flight", 1 << 20, 64 << 10, 5, false, 0.99},
		{"1.7 MiB/s, 1 MiB, 5 in flight, SDK jitter", 1.7 * (1 << 20), 1 << 20, 5, true, 0.9},
		{"1.7 MiB/s, 256 KiB, 5 in flight, SDK jitter", 1.7 * (1 << 20), 256 << 10, 5, true, 0.99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, c := setup(t)
			l.SetRates("a", rates(ProduceBytes, tc.rate))
			jitter := func(d time.Duration) time.Duration { return d }
			if tc.jitter {
				jitter = sdkJitter()
			}
			const warm, span = 10 * time.Second, time.Minute
			from, end := c.Now().Add(warm), c.Now().Add(warm+span)
			admitted := 0
			for c.Now().Before(end) {
				var longest time.Duration
				for range tc.k {
					d := l.Take("a", ProduceBytes, tc.cost)
					if d.OK && !c.Now().Before(from) {
						admitted++
					}
					longest = max(longest, d.RetryAfter)
				}
				c.Add(jitter(longest))
			}
			got := float64(admitted) * tc.cost / span.Seconds()
			t.Logf("admitted %.4f of the rate", got/tc.rate)
			require.GreaterOrEqual(t, got, tc.atLeast*tc.rate)
			require.LessOrEqual(t, got, tc.rate*(span.Seconds()+1)/span.Seconds()+tc.cost)
		})
	}
}

func TestQuotaQueueCapped(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(Requests, 100))          // burst 100: a queue of 1 s
	require.True(t, l.Take("a", Requests, 101).OK) // 1 in debt: 10 ms
	// Refused requests that never come back queue up to 1 s past the
	// debt, no further.
	for i := range 10_000 {
		d := l.Take("a", Requests, 1)
		require.False(t, d.OK)
		require.Equal(t, 10*time.Millisecond+min(time.Duration(i)*10*time.Millisecond, time.Second), d.RetryAfter, "refusal %d", i)
	}
	// A client that ignores the delays and sends again every millisecond
	// for a minute is admitted whenever the bucket is out of debt; no
	// delay is ever more than the debt and the queue's second.
	admitted := 0
	for range 60_000 {
		c.Add(time.Millisecond)
		d := l.Take("a", Requests, 1)
		if d.OK {
			admitted++
			continue
		}
		// The debt is at most one request's: 10 ms.
		require.Positive(t, d.RetryAfter)
		require.LessOrEqual(t, d.RetryAfter, time.Second+10*time.Millisecond)
	}
	require.InDelta(t, 60*100, admitted, 2)
	// What the queue reserved passes with time: once the queue's end has
	// passed, a refusal waits only for the debt.
	c.Add(1100 * time.Millisecond)
	require.True(t, l.Take("a", Requests, 150).OK) // from a full bucket: 50 in debt, 500 ms
	require.Equal(t, 500*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
}

func TestQuotaRateChangeKeepsQueue(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(Requests, 100))
	require.True(t, l.Take("a", Requests, 200).OK) // 100 in debt: 1 s
	for range 50 {
		l.Take("a", Requests, 1) // queued until 1.5 s
	}
	require.Equal(t, 1500*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
	// The same rate again (the broker sets allotments every exchange):
	// nothing moves.
	l.SetRates("a", rates(Requests, 100))
	require.Equal(t, 1510*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
	// Doubled: the debt (100) and what the queue reserved (52) are paid in
	// half the time.
	l.SetRates("a", rates(Requests, 200))
	require.Equal(t, 760*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
	// Quartered: 100 in debt is 2 s at 50/s; the 53 queued would be 1.06 s
	// more, but the queue now holds one second (a burst of 50).
	l.SetRates("a", rates(Requests, 50))
	require.Equal(t, 3*time.Second, l.Take("a", Requests, 1).RetryAfter)
	// Half a second on, the queue's end stays where it was.
	c.Add(500 * time.Millisecond)
	require.Equal(t, 2500*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
	// No limit, then a limit again: a full bucket, no queue.
	l.SetRates("a", Rates{})
	l.SetRates("a", rates(Requests, 50))
	require.True(t, l.Take("a", Requests, 75).OK)
	require.Equal(t, 500*time.Millisecond, l.Take("a", Requests, 1).RetryAfter)
}

func TestQuotaBucketHugeDebt(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var b Bucket
	b.SetRate(now, 1e-3, 1)
	b.Charge(now, 1e300)
	require.Equal(t, maxWait, b.Debt(now))
	require.Equal(t, maxWait, b.Refuse(now, 1e300))
}

func BenchmarkLimiterTake(b *testing.B) {
	b.Run("admitted", func(b *testing.B) {
		l := New(Config{})
		l.SetRates("a", rates(Requests, 1e18))
		for b.Loop() {
			l.Take("a", Requests, 1)
		}
	})
	b.Run("refused", func(b *testing.B) {
		c := newClock()
		l := New(Config{Now: c.Now})
		l.SetRates("a", rates(Requests, 1))
		l.Take("a", Requests, 1e6)
		for b.Loop() {
			l.Take("a", Requests, 1)
		}
	})
}

// TestQuotaRefund: a charge given back restores the tokens (up to the
// burst) and leaves the meters as if the request had never come.
func TestQuotaRefund(t *testing.T) {
	t.Parallel()
	l, c := setup(t)
	l.SetRates("a", rates(ProduceBytes, 1000)) // burst 1000
	require.True(t, l.Take("a", ProduceBytes, 1500).OK)
	require.False(t, l.Take("a", ProduceBytes, 1).OK, "500 in debt")
	// The batch was not written: refunded, the bucket is back at 1000
	// (the burst; it cannot hold more) and admits again at once.
	l.Refund("a", ProduceBytes, 1500)
	d := l.Take("a", ProduceBytes, 1000)
	require.True(t, d.OK)
	require.True(t, l.Take("a", ProduceBytes, 1).OK, "the refund filled the bucket to the burst, no more")
	require.False(t, l.Take("a", ProduceBytes, 1).OK)
	// Refunds past the burst are capped: 10,000 refunded is 1000 tokens.
	c.Add(10 * time.Second)
	l.Refund("a", ProduceBytes, 10000)
	require.True(t, l.Take("a", ProduceBytes, 1001).OK)
	require.False(t, l.Take("a", ProduceBytes, 1).OK, "1000 tokens, not 11,000")
	// Meters: 1500 admitted and refunded, 1001 admitted, refunded down to
	// zero by the 10,000, then 1001 admitted, over 10 s.
	m, span := l.Window()
	require.Equal(t, 10*time.Second, span)
	require.InDelta(t, 100.1, m["a"].Admitted[ProduceBytes], 1e-9)
	// No rate: a refund does nothing.
	l.Refund("b", ProduceBytes, 10)
	require.True(t, l.Take("b", ProduceBytes, 1e9).OK)
}

// TestQuotaRefundedRetryChargedOnce: a tenant over its rate whose every
// other admitted request does nothing (an idempotent producer's batch
// refused out of sequence) and is refunded is still admitted its rate in
// written requests.
func TestQuotaRefundedRetryChargedOnce(t *testing.T) {
	t.Parallel()
	for _, refund := range []bool{false, true} {
		l, c := setup(t)
		l.SetRates("a", rates(ProduceBytes, 1000))
		written, n := 0.0, 0
		step := 10 * time.Millisecond // offered 10,000/s in 100-byte requests
		for end := c.Now().Add(20 * time.Second); c.Now().Before(end); c.Add(step) {
			if !l.Take("a", ProduceBytes, 100).OK {
				continue
			}
			if n++; n%2 == 0 {
				if refund {
					l.Refund("a", ProduceBytes, 100)
				}
				continue
			}
			written += 100
		}
		rate := written / 20
		t.Logf("refund %v: written %.0f/s of 1000/s", refund, rate)
		if refund {
			require.InEpsilon(t, 1000, rate, 0.1)
		} else {
			require.InEpsilon(t, 500, rate, 0.1)
		}
	}
}
