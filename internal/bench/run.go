package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// HeaderSize is the part of each record value the benchmark writes itself:
// the run's id and the record's scheduled time. RecordSize is at least
// this.
const HeaderSize = 16

// SendFunc hands one record value to a producer. It may block, for
// instance while the producer's buffer is full (that wait counts toward
// the record's latency). It calls done exactly once: with nil when the
// record was acknowledged, else with why it failed; done may run on any
// goroutine, before or after SendFunc returns.
type SendFunc func(ctx context.Context, value []byte, done func(error))

// Step is one rate held for a time: Duration is measured, after the
// Config's Warmup.
type Step struct {
	Rate     Rate
	Duration time.Duration
}

// Config is a benchmark run.
type Config struct {
	// Steps run one after another, each Warmup then its Duration.
	Steps []Step
	// Warmup starts each step; records scheduled in it are sent and
	// consumed but left out of the step's numbers.
	Warmup time.Duration
	// RecordSize is each record value's size in bytes, HeaderSize or more.
	RecordSize int
	// EndToEnd says a consumer feeds Consumed with the records it reads,
	// so the run measures end-to-end latency and, at the end, waits for the
	// consumer to read what was acknowledged.
	EndToEnd bool
	// Drain bounds the wait after the last step for outstanding
	// acknowledgements and, with EndToEnd, consumption (default 30 s).
	Drain time.Duration
	// Progress, when set, is called about once a second with the numbers
	// of the past interval, on a goroutine of its own.
	Progress func(Progress)

	clock Clock // the real clock unless a test sets one
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch {
	case len(c.Steps) == 0:
		return errors.New("no steps: give a rate and a duration")
	case c.Warmup < 0:
		return fmt.Errorf("warm-up %s must not be negative", c.Warmup)
	case c.RecordSize < HeaderSize:
		return fmt.Errorf("record size %d: at least %d bytes (the benchmark's header: run id and send time)", c.RecordSize, HeaderSize)
	case c.Drain < 0:
		return fmt.Errorf("drain %s must not be negative", c.Drain)
	}
	for i, s := range c.Steps {
		switch {
		case s.Duration <= 0:
			return fmt.Errorf("step %d: duration %s must be positive", i+1, s.Duration)
		case s.Rate.Records < 0 || s.Rate.Bytes < 0:
			return fmt.Errorf("step %d: rate %s must not be negative", i+1, s.Rate)
		}
	}
	return nil
}

// Runner runs one benchmark: it generates records on the senders'
// schedules, records each one's outcome, and takes in what the consumer
// reads.
type Runner struct {
	cfg     Config
	senders []SendFunc
	clock   Clock
	runID   uint64
	payload []byte
	rec     *recorder
}

// New returns a runner sending through senders (one per producer).
func New(cfg Config, senders []SendFunc) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(senders) == 0 {
		return nil, errors.New("no producers")
	}
	if cfg.Drain == 0 {
		cfg.Drain = 30 * time.Second
	}
	clk := cfg.clock
	if clk == nil {
		clk = realClock{start: time.Now()}
	}
	// Random bytes: incompressible, so a codec does not flatter the
	// numbers.
	payload := make([]byte, cfg.RecordSize)
	rng := rand.NewChaCha8([32]byte{byte(cfg.RecordSize)})
	_, _ = rng.Read(payload)
	return &Runner{
		cfg: cfg, senders: senders, clock: clk, runID: rand.Uint64() | 1, payload: payload,
		rec: &recorder{errs: map[string]int64{}},
	}, nil
}

// value is a record value scheduled at at: the header, then random bytes.
func (r *Runner) value(at time.Duration) []byte {
	v := make([]byte, r.cfg.RecordSize)
	binary.LittleEndian.PutUint64(v, r.runID)
	binary.LittleEndian.PutUint64(v[8:], uint64(at))
	copy(v[HeaderSize:], r.payload[HeaderSize:])
	return v
}

// Consumed takes a record value the consumer read, at the time it read
// it. Values this run did not write (other runs', other producers') are
// ignored. Safe for concurrent use.
func (r *Runner) Consumed(value []byte) {
	if len(value) < HeaderSize || binary.LittleEndian.Uint64(value) != r.runID {
		return
	}
	at := time.Duration(binary.LittleEndian.Uint64(value[8:]))
	r.rec.consumed(at, r.clock.Now())
}

// ConsumeError counts an error the consumer met.
func (r *Runner) ConsumeError(err error) { r.rec.fail(fmt.Errorf("consume: %w", err)) }

// Run runs the steps, then waits up to Drain for every record's outcome
// and (with EndToEnd) for the consumer to read every acknowledged record.
// When ctx ends it stops sending, waits a little for outcomes, and returns
// what it measured with Interrupted set.
func (r *Runner) Run(ctx context.Context) *Result {
	base := r.clock.Now()
	t := base
	for _, s := range r.cfg.Steps {
		b := stepBounds{start: t, warmEnd: t + r.cfg.Warmup, end: t + r.cfg.Warmup + s.Duration}
		r.rec.bounds = append(r.rec.bounds, b)
		t = b.end
	}
	r.rec.steps = make([]stepStats, len(r.cfg.Steps))

	stopProgress := r.startProgress()
	defer stopProgress()

	interrupted := false
	for i, s := range r.cfg.Steps {
		if ctx.Err() != nil {
			interrupted = true
			break
		}
		r.rec.start(i)
		b := r.rec.bounds[i]
		perProducer := s.Rate.RecordsPerSecond(r.cfg.RecordSize) / float64(len(r.senders))
		var wg sync.WaitGroup
		for j, send := range r.senders {
			sched := schedule{start: b.start, end: b.end}
			if perProducer > 0 {
				sched.interval = 1e9 / perProducer
				// Producers take turns: together they keep the step's
				// rate at even spacing.
				sched.phase = time.Duration(sched.interval * float64(j) / float64(len(r.senders)))
			}
			wg.Go(func() {
				_, unsent := generate(ctx, r.clock, sched, func(ctx context.Context, at time.Duration) {
					r.rec.offered(at)
					send(ctx, r.value(at), func(err error) { r.rec.done(at, r.clock.Now(), err) })
				})
				r.rec.unsentIn(i, unsent)
			})
		}
		wg.Wait()
		if ctx.Err() != nil && r.clock.Now() < b.end {
			interrupted = true
			r.rec.stop(i, r.clock.Now())
			break
		}
	}

	drain := r.cfg.Drain
	if interrupted {
		drain = min(drain, 5*time.Second)
	}
	drained := r.drain(drain)
	res := r.rec.result(r.cfg)
	res.Interrupted, res.Drained = interrupted, drained
	return res
}

// drain waits up to d for every offered record's outcome and, with
// EndToEnd, for the consumer to have read as many of the run's records as
// were acknowledged. It polls: the run is over, the cost is nil.
func (r *Runner) drain(d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if r.rec.drained(r.cfg.EndToEnd) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startProgress calls Config.Progress every second until the returned
// func is called.
func (r *Runner) startProgress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := r.clock.Now()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				now := r.clock.Now()
				p := r.rec.progress(now, now-last)
				p.AckedBytes = p.Acked * int64(r.cfg.RecordSize)
				last = now
				r.cfg.Progress(p)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// Progress is one progress report: the numbers of the past Interval.
type Progress struct {
	// Elapsed is the time since the run started.
	Elapsed  time.Duration
	Interval time.Duration
	// Step is the step running (1-based), of Steps; Draining after the last.
	Step, Steps int
	Rate        Rate
	Warmup      bool
	Draining    bool
	// Sent, Acked, Failed and Consumed count what happened in the
	// interval (warm-up included), whatever step the records belong to.
	Sent, Acked, Failed, Consumed int64
	// AckedBytes is the record bytes acknowledged in the interval.
	AckedBytes int64
	// Publish and EndToEnd summarise the latencies of the interval.
	Publish, EndToEnd Summary
	// Errors counts failures since the run started.
	Errors int64
}

// Result is what a run measured.
type Result struct {
	// Steps has the steps that started (all of them unless interrupted).
	Steps []StepResult
	// Errors are the distinct failures, most frequent first.
	Errors []ErrorCount
	// Interrupted says the run was stopped before its end.
	Interrupted bool
	// Drained says every record got its outcome, and with EndToEnd every
	// acknowledged record was consumed, within the drain time.
	Drained bool
}

// StepResult is one step's numbers. Counts are of records scheduled in
// the step after its warm-up, whenever their outcome came.
type StepResult struct {
	Rate Rate
	// TargetRecordsPerSecond is the rate in records (0: saturated).
	TargetRecordsPerSecond float64
	Warmup, Duration       time.Duration
	// Sent were handed to a producer; Unsent were due but not handed over
	// before the step ended, because the producer was behind (an offer was
	// blocked); Acked and Failed had that outcome, and the rest of Sent
	// none before the drain ended.
	Sent, Unsent, Acked, Failed int64
	// Consumed were read back by the consumer (with EndToEnd).
	Consumed int64
	// RecordsPerSecond and BytesPerSecond are acknowledged records and
	// their value bytes over Duration.
	RecordsPerSecond, BytesPerSecond float64
	// Publish is the latency from each record's scheduled send time to its
	// acknowledgement; EndToEnd to the consumer reading it.
	Publish, EndToEnd Summary
}

// Summary is a latency distribution: exact Min, Mean and Max, quantiles
// within RelativeError.
type Summary struct {
	Count                               int64
	Min, Mean, P50, P90, P99, P999, Max time.Duration
}

func summarize(h *Histogram) Summary {
	return Summary{
		Count: h.Count(), Min: h.Min(), Mean: h.Mean(), Max: h.Max(),
		P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), P999: h.Quantile(0.999),
	}
}

// ErrorCount is a distinct failure and how often it happened.
type ErrorCount struct {
	Message string
	Count   int64
}

// maxErrorKinds bounds the distinct error messages kept; the rest are
// counted as one.
const maxErrorKinds = 10

const otherErrors = "other errors"

type stepBounds struct{ start, warmEnd, end time.Duration }

type stepStats struct {
	sent, unsent, acked, failed, consumed int64
	publish, e2e                          Histogram
	started, stopped                      bool
	stoppedAt                             time.Duration // when stopped (interrupted)
}

// recorder holds the run's numbers. Every method is safe for concurrent
// use; one mutex guards everything (a few hundred thousand records a
// second at most).
type recorder struct {
	mu     sync.Mutex
	bounds []stepBounds // set before the first record
	steps  []stepStats

	// The run's records, warm-ups included, for drain.
	nOffered, nDone, nAcked, nConsumed int64

	// Since the last progress report.
	iv struct {
		sent, acked, failed, consumed int64
		publish, e2e                  Histogram
	}
	nErrors int64
	errs    map[string]int64
}

// locate is the step a record scheduled at at belongs to, and whether it
// is measured (after the step's warm-up); -1 before the first step.
func (r *recorder) locate(at time.Duration) (int, bool) {
	for i := len(r.bounds) - 1; i >= 0; i-- {
		if b := r.bounds[i]; at >= b.start {
			return i, at >= b.warmEnd
		}
	}
	return -1, false
}

func (r *recorder) offered(at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nOffered++
	r.iv.sent++
	if i, ok := r.locate(at); ok {
		r.steps[i].sent++
	}
}

func (r *recorder) start(step int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps[step].started = true
}

func (r *recorder) unsentIn(step int, n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps[step].unsent += n
}

func (r *recorder) stop(step int, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps[step].stopped, r.steps[step].stoppedAt = true, at
}

func (r *recorder) done(at, now time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nDone++
	i, ok := r.locate(at)
	if err != nil {
		r.iv.failed++
		r.failLocked(err)
		if ok {
			r.steps[i].failed++
		}
		return
	}
	r.nAcked++
	r.iv.acked++
	r.iv.publish.Record(now - at)
	if ok {
		r.steps[i].acked++
		r.steps[i].publish.Record(now - at)
	}
}

func (r *recorder) consumed(at, now time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nConsumed++
	r.iv.consumed++
	r.iv.e2e.Record(now - at)
	if i, ok := r.locate(at); ok {
		r.steps[i].consumed++
		r.steps[i].e2e.Record(now - at)
	}
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(err)
}

func (r *recorder) failLocked(err error) {
	r.nErrors++
	msg := err.Error()
	if _, ok := r.errs[msg]; !ok && len(r.errs) >= maxErrorKinds {
		msg = otherErrors
	}
	r.errs[msg]++
}

func (r *recorder) drained(endToEnd bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nDone == r.nOffered && (!endToEnd || r.nConsumed >= r.nAcked)
}

// progress reports the interval ending at now and starts the next.
func (r *recorder) progress(now, interval time.Duration) Progress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := Progress{
		Elapsed: now - r.bounds[0].start, Interval: interval, Steps: len(r.bounds),
		Sent: r.iv.sent, Acked: r.iv.acked, Failed: r.iv.failed, Consumed: r.iv.consumed,
		Publish: summarize(&r.iv.publish), EndToEnd: summarize(&r.iv.e2e), Errors: r.nErrors,
	}
	if i, _ := r.locate(now); i >= 0 {
		p.Step = i + 1
		p.Warmup = now < r.bounds[i].warmEnd
		p.Draining = now >= r.bounds[i].end
	}
	r.iv.sent, r.iv.acked, r.iv.failed, r.iv.consumed = 0, 0, 0, 0
	r.iv.publish.Reset()
	r.iv.e2e.Reset()
	return p
}

func (r *recorder) result(cfg Config) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{}
	for i, s := range cfg.Steps {
		st, b := &r.steps[i], r.bounds[i]
		if !st.started {
			break
		}
		measured := s.Duration
		if st.stopped {
			measured = max(0, st.stoppedAt-b.warmEnd)
		}
		sr := StepResult{
			Rate: s.Rate, TargetRecordsPerSecond: s.Rate.RecordsPerSecond(cfg.RecordSize),
			Warmup: cfg.Warmup, Duration: measured,
			Sent: st.sent, Unsent: st.unsent, Acked: st.acked, Failed: st.failed, Consumed: st.consumed,
			Publish: summarize(&st.publish), EndToEnd: summarize(&st.e2e),
		}
		if measured > 0 {
			sr.RecordsPerSecond = float64(st.acked) / measured.Seconds()
			sr.BytesPerSecond = sr.RecordsPerSecond * float64(cfg.RecordSize)
		}
		res.Steps = append(res.Steps, sr)
	}
	for msg, n := range r.errs {
		res.Errors = append(res.Errors, ErrorCount{Message: msg, Count: n})
	}
	slices.SortFunc(res.Errors, func(a, b ErrorCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Message, b.Message))
	})
	return res
}
