package quota

import (
	"math"
	"sync"
	"time"

	"github.com/sluicemq/sluice/limit"
)

// Dimension is one rate a tenant is limited on: a row of the limit
// table's dimensions (limit.ProduceBytes, limit.Requests, ...), whose
// String is its name in metrics.
type Dimension = limit.Dimension

// Dimensions is how many there are.
const Dimensions = limit.Dimensions

// Rates are per-second rates, one per Dimension. As limits, 0 is no limit.
type Rates [Dimensions]float64

// Bucket is a token bucket that allows debt (see the package doc). The
// zero Bucket has no rate: it admits everything. Not safe for concurrent
// use: a Limiter locks it.
type Bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
	// reserved is the end of the queue of refused requests: when the
	// bucket will have paid its debt and the cost of every request refused
	// so far that was told to come back after the debt (Refuse). Zero or
	// past: no queue.
	reserved time.Time
}

// SetRate changes the bucket's rate and burst at now: it first fills at
// the old rate, then keeps its tokens (at most the new burst) and debt,
// and the cost its queue of refused requests has reserved beyond the debt
// (at most the new queue's length): the queue's end moves to when the new
// rate will have paid for both. A bucket that had no rate starts full,
// with no queue. rate 0 removes the limit.
func (b *Bucket) SetRate(now time.Time, rate, burst float64) {
	if rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		*b = Bucket{}
		return
	}
	if b.rate <= 0 {
		*b = Bucket{rate: rate, burst: burst, tokens: burst, last: now}
		return
	}
	b.fill(now)
	queued := 0.0 // reserved beyond the debt, in tokens
	if base := b.paid(now); b.reserved.After(base) {
		queued = b.reserved.Sub(base).Seconds() * b.rate
	}
	same := rate == b.rate
	b.rate, b.burst = rate, burst
	b.tokens = min(b.tokens, burst)
	switch base := b.paid(now); {
	case queued <= 0:
		b.reserved = time.Time{}
	case same:
		b.reserved = minTime(b.reserved, base.Add(b.queueLength()))
	default:
		b.reserved = base.Add(min(b.duration(queued), b.queueLength()))
	}
}

// Rate is the bucket's rate per second, 0 for none.
func (b *Bucket) Rate() float64 { return b.rate }

func (b *Bucket) fill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
		b.last = now
	}
}

// Debt returns how long the bucket's debt takes to pay off at its rate,
// 0 when it is not in debt (a request may be admitted).
func (b *Bucket) Debt(now time.Time) time.Duration {
	if b.rate <= 0 {
		return 0
	}
	b.fill(now)
	if b.tokens >= 0 {
		return 0
	}
	return max(b.duration(-b.tokens), 1)
}

// paid is when the bucket's debt is paid off (now when it has none); the
// bucket is filled to now.
func (b *Bucket) paid(now time.Time) time.Time { return now.Add(b.Debt(now)) }

// Charge takes cost tokens at now, into debt if need be.
func (b *Bucket) Charge(now time.Time, cost float64) {
	if b.rate <= 0 {
		return
	}
	b.fill(now)
	b.tokens -= cost
}

// Refund gives back cost tokens charged at or before now for a request
// that then did nothing (the log refused its batch): at most up to the
// burst, as if the request had never come.
func (b *Bucket) Refund(now time.Time, cost float64) {
	if b.rate <= 0 || !(cost > 0) {
		return
	}
	b.fill(now)
	b.tokens = min(b.burst, b.tokens+cost)
}

// Refuse is the delay to give a request of cost refused at now because
// the bucket is in debt, and queues it (see the package doc): it is to
// come back when the bucket will have paid its debt and the costs of the
// requests queued before it; the queue's end moves on by cost / rate.
// The queue reaches at most burst / rate past the debt's payoff, so the
// delay is at least Debt and at most that much longer. Not in debt,
// Refuse returns 0 and queues nothing.
func (b *Bucket) Refuse(now time.Time, cost float64) time.Duration {
	base := b.paid(now)
	if !base.After(now) {
		return 0
	}
	limit := base.Add(b.queueLength())
	start := base
	if b.reserved.After(start) {
		start = minTime(b.reserved, limit)
	}
	if cost > 0 {
		b.reserved = minTime(start.Add(b.duration(cost)), limit)
	}
	return start.Sub(now)
}

// queueLength is how far beyond the debt's payoff the queue of refused
// requests reaches at most: the burst's worth of the rate, so that the
// bucket can hold, as tokens, the cost of every queued request that does
// not come back.
func (b *Bucket) queueLength() time.Duration { return b.duration(b.burst) }

// duration is how long the bucket takes to fill by cost, rounded up to
// the nanosecond: 0 for no cost, at most maxWait.
func (b *Bucket) duration(cost float64) time.Duration {
	ns := math.Ceil(cost / b.rate * float64(time.Second))
	switch {
	case !(ns > 0): // NaN too
		return 0
	case ns >= float64(maxWait):
		return maxWait
	}
	return time.Duration(ns)
}

// maxWait bounds a debt's duration (about 146 years), which a float
// converted to time.Duration would overflow.
const maxWait = time.Duration(1 << 62)

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Config configures a Limiter. The zero value is DefaultConfig's.
type Config struct {
	// Burst is, per dimension, how many seconds of its rate a bucket
	// holds. Zero: 1 s, or the dimension's burst in the limit table when
	// longer (10 minutes for producer ids).
	Burst [Dimensions]time.Duration
	// ForgetAfter is how long a tenant without traffic is kept (its rates
	// with it), summed over whole windows; 0: 5 minutes.
	ForgetAfter time.Duration
	// OfferedSmoothing is the time constant of the moving average Window
	// reports as a tenant's offered rates (see Meter); 0: 5 s.
	OfferedSmoothing time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults the zero Config stands for.
func DefaultConfig() Config {
	var burst [Dimensions]time.Duration
	for d := range Dimensions {
		burst[d] = max(time.Second, d.Burst())
	}
	return Config{
		Burst:            burst,
		ForgetAfter:      5 * time.Minute,
		OfferedSmoothing: 5 * time.Second,
		Now:              time.Now,
	}
}

// Decision is the answer for one request in one dimension.
type Decision struct {
	// OK: admitted. Otherwise RetryAfter (never 0) is when to come
	// back: when the tenant's bucket will have paid its debt and the
	// requests refused before this one (see the package doc).
	OK         bool
	RetryAfter time.Duration
	// Rate is the bucket's rate per second (0: no limit).
	Rate float64
}

// Meter is one tenant's traffic, as rates per second. Admitted is the
// window's. Offered, what the control plane divides the tenant's limits
// by, is a moving average of the windows' offered rates (refusals
// included) with a time constant of Config.OfferedSmoothing: a client
// told to come back in several seconds offers nothing until then, and one
// window's rate would give that broker no more than the division's floor
// when it does, a debt it pays at the floor's rate, so that it offers
// little again (measured with 1 s windows: allotments swinging between
// 34 KiB/s and 956 KiB/s of a 1 MiB/s limit, 0.35 to 0.71 of it admitted).
// The average starts at the rate of the first window with traffic (over
// a second at least), and starts again so after three time constants
// without any in that
// dimension: averaged up from zero, a tenant starting to produce (or
// fetch) at a broker where it did only other things, or nothing for a
// while, would offer a fifth of its rate in the first second, and be
// allotted little more than the division's floor for several seconds.
type Meter struct {
	Offered, Admitted Rates
}

type tenant struct {
	mu      sync.Mutex
	buckets [Dimensions]Bucket
	// This window's offered and admitted totals.
	offered, admitted [Dimensions]float64
	// meanCharge: a moving average of the admitted charges per
	// dimension (MeanCharge).
	meanCharge [Dimensions]float64
	// smoothed: the offered rates' moving averages (Meter).
	smoothed [Dimensions]float64
	// quiet: per dimension, how long the windows in a row without
	// offered traffic add up to (restartQuiet for a new tenant): from
	// restartQuiet on, the next window with traffic restarts the average
	// at its rate.
	quiet [Dimensions]time.Duration
	idle  time.Duration // the windows in a row without traffic
}

// Limiter holds every tenant's buckets and meters.
type Limiter struct {
	cfg   Config
	burst [Dimensions]float64 // seconds
	mu    sync.RWMutex
	ts    map[string]*tenant
	// windowStart is when the current window began (guarded by mu).
	windowStart time.Time
}

// New returns a Limiter with no tenants.
func New(cfg Config) *Limiter {
	def := DefaultConfig()
	for d := range Dimensions {
		if cfg.Burst[d] <= 0 {
			cfg.Burst[d] = def.Burst[d]
		}
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = def.ForgetAfter
	}
	if cfg.OfferedSmoothing <= 0 {
		cfg.OfferedSmoothing = def.OfferedSmoothing
	}
	if cfg.Now == nil {
		cfg.Now = def.Now
	}
	l := &Limiter{cfg: cfg, ts: map[string]*tenant{}, windowStart: cfg.Now()}
	for d := range Dimensions {
		l.burst[d] = cfg.Burst[d].Seconds()
	}
	return l
}

func (l *Limiter) tenant(id string) *tenant {
	l.mu.RLock()
	t := l.ts[id]
	l.mu.RUnlock()
	if t != nil {
		return t
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t = l.ts[id]; t == nil {
		t = &tenant{}
		for d := range Dimensions {
			t.quiet[d] = l.restartQuiet()
		}
		l.ts[id] = t
	}
	return t
}

// Take decides a request of tenant id costing cost in dimension d: when
// the tenant's bucket is not in debt it is admitted and charged cost;
// otherwise it is refused and queued at cost (Bucket.Refuse). Either way
// it is metered as offered, and if admitted, as admitted.
func (l *Limiter) Take(id string, d Dimension, cost float64) Decision {
	t := l.tenant(id)
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := &t.buckets[d]
	t.offered[d] += cost
	if wait := b.Refuse(now, cost); wait > 0 {
		return Decision{RetryAfter: wait, Rate: b.rate}
	}
	b.Charge(now, cost)
	t.admit(d, cost)
	return Decision{OK: true, Rate: b.rate}
}

// Short reports whether a request of cost in dimension d finds tenant id
// quiet there (nothing offered in d in this window nor for restartQuiet
// before it: what it offers is not measured, and its next window's rate
// will restart the average, Meter) and its bucket short of cost (fewer
// tokens than cost: the request would leave it in debt, or be refused).
// A tenant the Limiter does not know, or with no rate in d, is not short.
func (l *Limiter) Short(id string, d Dimension, cost float64) bool {
	l.mu.RLock()
	t := l.ts[id]
	l.mu.RUnlock()
	if t == nil {
		return false
	}
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := &t.buckets[d]
	if b.rate <= 0 || t.offered[d] != 0 || t.quiet[d] < l.restartQuiet() {
		return false
	}
	b.fill(now)
	return b.tokens < cost
}

// Check decides a request of tenant id in dimension d whose cost is known
// only once it is served (a fetch): admitted when the bucket is not in
// debt, and then nothing is charged or metered until Charge. A refusal is
// queued and metered as offered at refusedCost, the caller's estimate of
// what the request would have cost.
func (l *Limiter) Check(id string, d Dimension, refusedCost float64) Decision {
	t := l.tenant(id)
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := &t.buckets[d]
	if wait := b.Refuse(now, refusedCost); wait > 0 {
		t.offered[d] += refusedCost
		return Decision{RetryAfter: wait, Rate: b.rate}
	}
	return Decision{OK: true, Rate: b.rate}
}

// Charge charges the cost of a request Check admitted, into debt if need
// be, and meters it as offered and admitted.
func (l *Limiter) Charge(id string, d Dimension, cost float64) {
	t := l.tenant(id)
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buckets[d].Charge(now, cost)
	t.offered[d] += cost
	t.admit(d, cost)
}

// Refund gives back cost in dimension d that Take or Charge charged the
// tenant for a request that turned out to do nothing (Bucket.Refund), and
// takes it off the window's offered and admitted meters: a request whose
// batch the log refused (out of sequence, say) and which the client
// sends again counts once, when it is written.
func (l *Limiter) Refund(id string, d Dimension, cost float64) {
	t := l.tenant(id)
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buckets[d].Refund(now, cost)
	t.offered[d] = max(t.offered[d]-cost, 0)
	t.admitted[d] = max(t.admitted[d]-cost, 0)
}

func (t *tenant) admit(d Dimension, cost float64) {
	t.admitted[d] += cost
	if t.meanCharge[d] == 0 {
		t.meanCharge[d] = cost
	} else {
		t.meanCharge[d] += (cost - t.meanCharge[d]) / 16
	}
}

// MeanCharge is a moving average of the tenant's admitted charges in
// dimension d (over about the last 16), 0 before the first: a caller's
// estimate of what a refused request would have cost.
func (l *Limiter) MeanCharge(id string, d Dimension) float64 {
	l.mu.RLock()
	t := l.ts[id]
	l.mu.RUnlock()
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.meanCharge[d]
}

// SetRates replaces the tenant's rates (0 in a dimension: no limit), as
// Bucket.SetRate does for each dimension.
func (l *Limiter) SetRates(id string, r Rates) {
	t := l.tenant(id)
	now := l.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for d := range Dimensions {
		t.buckets[d].SetRate(now, r[d], r[d]*l.burst[d])
	}
}

// RatesOf returns the tenant's rates (zero for a tenant it does not know).
func (l *Limiter) RatesOf(id string) Rates {
	l.mu.RLock()
	t := l.ts[id]
	l.mu.RUnlock()
	var r Rates
	if t == nil {
		return r
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for d := range Dimensions {
		r[d] = t.buckets[d].rate
	}
	return r
}

// restartQuiet is how long a dimension goes without offered traffic
// before its moving average restarts at the rate of the next window with
// some (see Meter): three time constants, by when the average holds less
// than 5 % of what it measured before.
func (l *Limiter) restartQuiet() time.Duration { return 3 * l.cfg.OfferedSmoothing }

// Window returns every tenant's meters since the previous Window (or New)
// as rates per second (offered ones smoothed, see Meter), with the
// window's length, and starts a new window. Every tenant the Limiter
// knows is in it, idle ones with zero admitted rates; one whose windows
// without traffic in a row add up to Config.ForgetAfter is forgotten (and
// not in the answer).
func (l *Limiter) Window() (map[string]Meter, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	span := now.Sub(l.windowStart)
	l.windowStart = now
	secs := span.Seconds()
	weight := 1 - math.Exp(-secs/l.cfg.OfferedSmoothing.Seconds())
	out := make(map[string]Meter, len(l.ts))
	for id, t := range l.ts {
		t.mu.Lock()
		var m Meter
		traffic := false
		for d := range Dimensions {
			if t.offered[d] > 0 {
				traffic = true
			}
			if secs > 0 {
				offered := t.offered[d] / secs
				if offered > 0 && t.quiet[d] >= l.restartQuiet() {
					// Over a second at least: an early exchange can end
					// a window 100 ms in, and one request would count
					// ten times over.
					t.smoothed[d] = t.offered[d] / max(secs, 1)
				} else {
					t.smoothed[d] += weight * (offered - t.smoothed[d])
				}
				m.Admitted[d] = t.admitted[d] / secs
				if offered > 0 {
					t.quiet[d] = 0
				} else {
					t.quiet[d] = min(t.quiet[d]+span, l.restartQuiet())
				}
			}
			m.Offered[d] = t.smoothed[d]
			t.offered[d], t.admitted[d] = 0, 0
		}
		if traffic {
			t.idle = 0
		} else {
			t.idle += span
		}
		forget := t.idle >= l.cfg.ForgetAfter
		t.mu.Unlock()
		if forget {
			delete(l.ts, id)
			continue
		}
		out[id] = m
	}
	return out, span
}
