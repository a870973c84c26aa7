package runtime

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

// Partition is the internal-topic partition a shard is hosted on, as its
// broker provides it: the local replica's log to rebuild from, and the
// replicated write path. Every method may be called concurrently.
type Partition interface {
	// LogStartOffset, LEO and Read read the local replica's log, as
	// dataplane/log.Log does: Read returns whole batches from the one
	// holding offset, at most about maxBytes (at least one batch).
	LogStartOffset() int64
	LEO() int64
	Read(offset int64, maxBytes int) ([]byte, error)
	// CheckLeader returns nil when this replica leads the partition and
	// its high watermark has reached the start of its leader epoch (so
	// every record in its log is one it commits), and otherwise the error
	// to answer (not the leader; the HW still catching up), which a
	// caller may retry.
	CheckLeader() error
	// AppendAcksAll appends batch as the leader at leader epoch epoch and
	// returns its base offset once every ISR member has it (acks=all). It
	// fails, and the records count as not written, when this replica does
	// not lead at epoch, or when the ISR does not acknowledge them in
	// time.
	AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (base int64, err error)
	// Leads reports whether this replica still leads the partition at
	// leader epoch epoch.
	Leads(epoch int32) bool
}

// Record is one record of a coordinator's partition: its key and value as
// the shard encodes them. A nil Value is a tombstone (an empty one is not).
type Record struct{ Key, Value []byte }

// Shard is a coordinator's state machine on one partition.
type Shard interface {
	// Replay applies one record of the partition at its offset: while
	// loading, every record of the log in order; then each record a
	// write appended, once the append succeeded. An error while loading
	// fails the load.
	Replay(offset int64, r Record) error
}

// Loader is a Shard that resumes work after a load: Loaded returns the
// effects to run again (ends left unfinished) and the timers to arm for
// the state loaded. Records in its Update are not written.
type Loader interface {
	Loaded(now time.Time) Update
}

// Update is what an operation, an effect's follow-up or a timer asks of
// the runtime: records to write (one batch, acks=all), then effects to run
// and timers to arm once they are written.
type Update struct {
	Records []Record
	Effects []Effect
	Timers  []Timer
	// Written, when not nil, is called once the records are written and
	// replayed (with none of the runtime's locks held): counting what
	// happened.
	Written func()
}

// Result is an operation's outcome: its Update and its response, released
// once the records are written (with Await, once the effects succeeded).
type Result[R any] struct {
	Update
	Response R
	// Await holds the response until every effect of the Update has
	// succeeded and its follow-up is written; when an attempt fails the
	// operation answers Effect.Fail's error instead (the runtime keeps
	// retrying the effect).
	Await bool
}

// Op is an operation: it runs against the shard's state (s, at now) and
// returns what to write and answer. It must not block or do I/O; it may
// change state that is not persisted (the state records replay into
// changes only in Replay).
type Op[S any, R any] func(s S, now time.Time) (Result[R], error)

// Effect is a side effect to run once an operation's records are written.
type Effect struct {
	// Key is the key its follow-up writes under; an operation on the key
	// returning ErrEffectPending waits for it.
	Key string
	// Do describes the effect; the host's Config.Exec performs it.
	Do any
	// Then, when not nil, is the follow-up of a successful attempt: it
	// runs against the state, under Key, with what Exec returned, and its
	// Update is written and run as an operation's is.
	Then func(out any, now time.Time) (Update, error)
	// Fail, when not nil, is the error answered to the operations waiting
	// for an attempt that failed with err (else err itself).
	Fail func(err error) error
}

// Timer runs Op under Key at At (or at the first tick after). Arming a
// timer replaces the armed one of the same Key and Name: Name tells apart
// the timers of one key that are armed each for itself (a coordinator's
// periodic expiry and its groups' deadlines, all under the empty key).
type Timer struct {
	Key  string
	Name string
	At   time.Time
	Op   func(now time.Time) (Update, error)
}

// id is what the timer replaces an armed one of.
func (t Timer) id() string { return t.Key + "\x00" + t.Name }

// ErrEffectPending is what an Op returns (wrapped) when its key has an
// effect in flight whose end it must wait for: the runtime attempts the
// effect at once, waits for it without holding the key, and runs the Op
// again once the effect's follow-up is written (or answers the attempt's
// error). With no effect pending on the key, the Op's error is answered.
var ErrEffectPending = errors.New("an effect of this key is pending")

// ErrNotCoordinator is what the runtime's own refusals wrap, unless
// Config.Refusal makes them the shard's: the shard is not loaded, or its
// broker no longer leads the partition at its epoch. Retriable at the
// partition's current leader.
var ErrNotCoordinator = errors.New("not the coordinator")

// Config configures one Hosted shard.
type Config struct {
	// Name names the partition in errors and logs ("offsets partition 3").
	Name string
	// LeaderEpoch is the leader epoch the shard serves: it loads the log
	// led at it, and its writes are fenced at it.
	LeaderEpoch int32
	// Exec performs an effect's Do (nil: effects fail). It is called with
	// none of the runtime's locks held, with a context that ends when the
	// shard is closed.
	Exec func(ctx context.Context, do any) (any, error)
	// Fence refuses writes (and effects) up front once the broker no
	// longer leads the partition at LeaderEpoch; without it the
	// partition's append refuses them.
	Fence bool
	// Refusal makes the runtime's refusals the shard's own errors: it is
	// given why (not loaded, moved, a write failed after it moved); nil
	// wraps ErrNotCoordinator.
	Refusal func(err error) error
	// Now is the clock of operations and timers (time.Now when nil).
	Now func() time.Time
	// Tick is the longest Run waits before it looks for due timers and
	// effect retries (1 s when zero); it wakes earlier for those it knows
	// of.
	Tick time.Duration
	// RetryBackoff is the wait before an effect's second attempt, doubled
	// after each failure up to MaxRetryBackoff (100 ms and 1 s when zero).
	RetryBackoff, MaxRetryBackoff time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
	// WriteLatency observes each append (acks=all); nil observes nothing.
	WriteLatency prometheus.Observer
}

// Hosted is a shard hosted on one partition at one leader epoch. Call Load
// before anything else (and again after it failed).
type Hosted[S Shard] struct {
	p     Partition
	shard S
	cfg   Config

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wake   chan struct{}  // pokes Run
	wg     sync.WaitGroup // effect attempts and Run

	loadMu sync.Mutex // serialises Load
	mu     sync.Mutex
	loaded bool
	closed bool
	keys   map[lockID]*keyLock // the keys held or waited for
	// effects: per key, the effects not done yet.
	effects map[string][]*effectRun
	timers  timerHeap
	timerOf map[string]*timerEntry // the armed timer of each key and name (Timer.id)
}

// New returns shard hosted on p at cfg.LeaderEpoch, not loaded yet.
func New[S Shard](p Partition, shard S, cfg Config) *Hosted[S] {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.MaxRetryBackoff <= 0 {
		cfg.MaxRetryBackoff = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hosted[S]{p: p, shard: shard, cfg: cfg, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		keys: map[lockID]*keyLock{}, effects: map[string][]*effectRun{}, timerOf: map[string]*timerEntry{}}
}

// Epoch is the leader epoch the shard serves.
func (h *Hosted[S]) Epoch() int32 { return h.cfg.LeaderEpoch }

// Partition is the partition the shard is hosted on.
func (h *Hosted[S]) Partition() Partition { return h.p }

// Current reports whether the broker still leads the partition at the
// epoch the shard serves.
func (h *Hosted[S]) Current() bool { return h.p.Leads(h.cfg.LeaderEpoch) }

// Loaded reports whether Load has succeeded.
func (h *Hosted[S]) Loaded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loaded
}

func (h *Hosted[S]) refuse(err error) error {
	if h.cfg.Refusal != nil {
		return h.cfg.Refusal(err)
	}
	return fmt.Errorf("%w: %w", ErrNotCoordinator, err)
}

func (h *Hosted[S]) deposed() error {
	return h.refuse(fmt.Errorf("%s moved from leader epoch %d", h.cfg.Name, h.cfg.LeaderEpoch))
}

// Load rebuilds the shard's state from the partition, once: every record
// from the log start to the log end (a new leader's whole log is what it
// will commit), then the shard's Loaded effects and timers. It fails, to
// be called again, while the partition is not ready (CheckLeader's error)
// or when ctx ends. Reads of the state meanwhile see it unloaded.
func (h *Hosted[S]) Load(ctx context.Context) error {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	if h.Loaded() {
		return nil
	}
	if err := h.p.CheckLeader(); err != nil {
		return err // not the leader any more, or its HW is still catching up
	}
	start := time.Now()
	end := h.p.LEO()
	n := 0
	for off := h.p.LogStartOffset(); off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := h.p.Read(off, 1<<20)
		if err != nil {
			return fmt.Errorf("load %s at %d: %w", h.cfg.Name, off, err)
		}
		if len(data) == 0 {
			break
		}
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				return fmt.Errorf("load %s: %w", h.cfg.Name, err)
			}
			data = rest
			hd := b.Header()
			if hd.LastOffset() < off {
				continue
			}
			k, err := h.replayBatch(b)
			n += k
			if err != nil {
				return fmt.Errorf("load %s at %d: %w", h.cfg.Name, hd.BaseOffset, err)
			}
			off = hd.LastOffset() + 1
		}
	}
	h.mu.Lock()
	h.loaded = true
	var u Update
	if l, ok := any(h.shard).(Loader); ok {
		u = l.Loaded(h.cfg.Now())
	}
	h.mu.Unlock()
	h.schedule(u)
	lvl := slog.LevelInfo
	if n == 0 {
		lvl = slog.LevelDebug // nothing to load: routine at every start of a fresh cluster
	}
	h.cfg.Logger.Log(context.Background(), lvl, "loaded coordinator", "partition", h.cfg.Name, "leader_epoch", h.cfg.LeaderEpoch,
		"records", n, "effects", len(u.Effects), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// replayBatch replays the records of one batch read while loading (control
// batches have none of the shard's).
func (h *Hosted[S]) replayBatch(b record.Batch) (int, error) {
	hd := b.Header()
	if hd.Attributes.Control() {
		return 0, nil
	}
	it, err := b.Records()
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for it.Next() {
		r := it.Record()
		off := hd.BaseOffset + int64(r.OffsetDelta)
		if err := h.shard.Replay(off, Record{Key: r.Key, Value: r.Value}); err != nil {
			return n, fmt.Errorf("record at %d: %w", off, err)
		}
		n++
	}
	return n, it.Err()
}

// Read runs fn against the shard's state and returns what it returns;
// before the shard is loaded, the zero value and ErrNotCoordinator (or the
// shard's refusal).
func Read[S Shard, R any](h *Hosted[S], fn func(s S) R) (R, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.loaded {
		var zero R
		return zero, h.refuse(fmt.Errorf("%s not loaded", h.cfg.Name))
	}
	return fn(h.shard), nil
}

// Write runs op under key, writes its records, replays them and answers
// its response (see the package doc). It answers ErrNotCoordinator (or the
// shard's refusal) before the shard is loaded and, with Config.Fence, once
// the broker no longer leads the partition at the shard's epoch.
func Write[S Shard, R any](ctx context.Context, h *Hosted[S], key string, op Op[S, R]) (R, error) {
	return write(ctx, h, exclusive(key), op)
}

// WriteShared is Write for an operation that holds key shared and each of
// subs exclusively, from its run to its records' replay: it runs beside
// the key's other shared operations whose sub-keys are not its own (their
// appends in flight at once), and excludes the key's exclusive ones (Write,
// timers, effects' follow-ups) both ways. The shard chooses the sub-keys
// so that shared operations in flight at once (their sub-keys disjoint)
// read nothing the other's records change and change different state:
// their records commute (see the package doc). key must not be empty.
func WriteShared[S Shard, R any](ctx context.Context, h *Hosted[S], key string, subs []string, op Op[S, R]) (R, error) {
	if key == "" {
		var zero R
		return zero, errors.New("a shared write needs a key")
	}
	return write(ctx, h, sharedWith(key, subs), op)
}

func write[S Shard, R any](ctx context.Context, h *Hosted[S], l locks, op Op[S, R]) (R, error) {
	var zero R
	for {
		if h.cfg.Fence && !h.Current() {
			return zero, h.deposed()
		}
		if err := h.lockAll(ctx, l); err != nil {
			return zero, err
		}
		h.mu.Lock()
		if !h.loaded || h.closed {
			closed := h.closed
			h.mu.Unlock()
			h.unlockAll(l)
			if closed {
				return zero, h.deposed()
			}
			return zero, h.refuse(fmt.Errorf("%s not loaded", h.cfg.Name))
		}
		res, err := op(h.shard, h.cfg.Now())
		var wait []chan error
		if errors.Is(err, ErrEffectPending) {
			wait = h.joinLocked(l.key)
		}
		h.mu.Unlock()
		if len(wait) > 0 {
			h.unlockAll(l)
			if err := h.await(ctx, wait); err != nil {
				return zero, err
			}
			continue // the effect is done: run op again
		}
		if err != nil {
			h.unlockAll(l)
			return zero, err
		}
		var waiters []chan error
		if res.Await {
			waiters = make([]chan error, len(res.Effects))
			for i := range waiters {
				waiters[i] = make(chan error, 1)
			}
		}
		err = h.commit(ctx, l.key, res.Update, waiters)
		h.unlockAll(l)
		if err != nil {
			return zero, err
		}
		if err := h.await(ctx, waiters); err != nil {
			return zero, err
		}
		return res.Response, nil
	}
}

// commit writes u's records (the caller holds key's locks), replays them, and
// then starts u's effects (waiters[i], when given, hears the first attempt
// of effect i) and arms its timers.
func (h *Hosted[S]) commit(ctx context.Context, key string, u Update, waiters []chan error) error {
	if len(u.Records) > 0 {
		if key == "" {
			return errors.New("an operation under the empty key wrote records")
		}
		if h.cfg.Fence && !h.Current() {
			return h.deposed()
		}
		base, err := h.append(ctx, u.Records)
		if err != nil {
			return err
		}
		h.mu.Lock()
		for i, r := range u.Records {
			if err := h.shard.Replay(base+int64(i), r); err != nil {
				h.cfg.Logger.Error("replay a record written", "partition", h.cfg.Name, "offset", base+int64(i), "err", err)
			}
		}
		h.mu.Unlock()
	}
	if u.Written != nil {
		u.Written()
	}
	h.schedule(u, waiters...)
	return nil
}

// append writes records as one batch with acks=all at the shard's epoch.
func (h *Hosted[S]) append(ctx context.Context, recs []Record) (int64, error) {
	now := h.cfg.Now()
	lr := make([]record.Record, len(recs))
	for i, r := range recs {
		lr[i] = record.Record{OffsetDelta: int32(i), Key: r.Key, Value: r.Value}
	}
	batch, err := log.EncodeLeaderBatch(nil, record.BatchHeader{FirstTimestamp: now.UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, lr)
	if err != nil {
		return 0, fmt.Errorf("encode records for %s: %w", h.cfg.Name, err)
	}
	start := time.Now()
	base, err := h.p.AppendAcksAll(ctx, h.cfg.LeaderEpoch, batch)
	if h.cfg.WriteLatency != nil {
		h.cfg.WriteLatency.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		err = fmt.Errorf("write to %s: %w", h.cfg.Name, err)
		if h.cfg.Fence && !h.Current() {
			return 0, h.refuse(err)
		}
		return 0, err
	}
	return base, nil
}

// await waits for the first outcome of each of the effects the channels
// hear, answering the first failure (or ctx's end).
func (h *Hosted[S]) await(ctx context.Context, waiters []chan error) error {
	for _, w := range waiters {
		select {
		case err := <-w:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Done is closed once Close was called: a caller waiting for something
// only the shard's operations or timers would bring stops waiting.
func (h *Hosted[S]) Done() <-chan struct{} { return h.ctx.Done() }

// Close stops the shard's timers and effects (its partition moved, or
// the broker stops) and waits for the attempts running. Operations
// waiting for an effect are answered ErrNotCoordinator (or the shard's
// refusal). Idempotent.
func (h *Hosted[S]) Close() {
	h.mu.Lock()
	h.closed = true
	var waiting []chan error
	for _, runs := range h.effects {
		for _, r := range runs {
			waiting = append(waiting, r.waiters...)
			waiting = append(waiting, r.queued...)
			r.waiters, r.queued = nil, nil
		}
	}
	h.effects = map[string][]*effectRun{}
	h.timers, h.timerOf = nil, map[string]*timerEntry{}
	h.mu.Unlock()
	h.cancel()
	err := h.deposed()
	for _, w := range waiting {
		w <- err
	}
	h.wg.Wait()
}

// Run fires due timers and effect retries (RunDue) when the earliest is
// due, checking at least every Config.Tick, until ctx ends or the shard is
// closed.
func (h *Hosted[S]) Run(ctx context.Context) {
	t := time.NewTimer(h.cfg.Tick)
	defer t.Stop()
	for {
		t.Reset(h.untilDue())
		select {
		case <-ctx.Done():
			return
		case <-h.ctx.Done():
			return
		case <-h.wake:
		case <-t.C:
			h.RunDue(ctx)
		}
	}
}

// untilDue is how long until the earliest timer or effect retry is due,
// between 10 ms (a timer whose key is busy is due again at once) and
// Config.Tick.
func (h *Hosted[S]) untilDue() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Now()
	d := h.cfg.Tick
	if len(h.timers) > 0 {
		d = min(d, h.timers[0].t.At.Sub(now))
	}
	for _, runs := range h.effects {
		for _, r := range runs {
			if !r.running {
				d = min(d, r.next.Sub(now))
			}
		}
	}
	return max(d, 10*time.Millisecond)
}

// poke wakes Run to look at the timers and retries again.
func (h *Hosted[S]) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// RunDue fires the timers due at Config.Now (those whose key is free; the
// others at the next call) and starts the attempts of effects whose retry
// is due. Errors of timers are logged.
func (h *Hosted[S]) RunDue(ctx context.Context) {
	now := h.cfg.Now()
	h.mu.Lock()
	if !h.loaded || h.closed {
		h.mu.Unlock()
		return
	}
	var due []*timerEntry
	for len(h.timers) > 0 && !h.timers[0].t.At.After(now) {
		e := heap.Pop(&h.timers).(*timerEntry)
		delete(h.timerOf, e.t.id())
		due = append(due, e)
	}
	var retry []*effectRun
	for _, runs := range h.effects {
		for _, r := range runs {
			if !r.running && !r.next.After(now) {
				r.running = true
				retry = append(retry, r)
			}
		}
	}
	h.mu.Unlock()
	for _, r := range retry {
		h.start(r)
	}
	for _, e := range due {
		if !h.tryLock(e.t.Key) {
			h.rearm(e) // busy: the next call
			continue
		}
		h.mu.Lock()
		u, err := e.t.Op(now)
		h.mu.Unlock()
		if err == nil {
			err = h.commit(ctx, e.t.Key, u, nil)
		}
		h.unlock(e.t.Key)
		if err != nil && ctx.Err() == nil && h.Current() {
			h.cfg.Logger.Warn("coordinator timer", "partition", h.cfg.Name, "key", e.t.Key, "err", err)
		}
	}
}

// rearm puts a fired-but-skipped timer back unless another replaced it.
func (h *Hosted[S]) rearm(e *timerEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.timerOf[e.t.id()]; ok || h.closed {
		return
	}
	h.timerOf[e.t.id()] = e
	heap.Push(&h.timers, e)
}

// schedule arms u's timers and starts its effects' first attempts
// (waiters[i], when given, hears effect i's).
func (h *Hosted[S]) schedule(u Update, waiters ...chan error) {
	if len(u.Effects) == 0 && len(u.Timers) == 0 {
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		err := h.deposed()
		for _, w := range waiters {
			w <- err
		}
		return
	}
	for _, t := range u.Timers {
		if old := h.timerOf[t.id()]; old != nil {
			heap.Remove(&h.timers, old.index)
		}
		e := &timerEntry{t: t}
		h.timerOf[t.id()] = e
		heap.Push(&h.timers, e)
	}
	runs := make([]*effectRun, len(u.Effects))
	for i, ef := range u.Effects {
		r := &effectRun{e: ef, running: true, backoff: h.cfg.RetryBackoff}
		if i < len(waiters) {
			r.waiters = append(r.waiters, waiters[i])
		}
		h.effects[ef.Key] = append(h.effects[ef.Key], r)
		runs[i] = r
	}
	h.mu.Unlock()
	if len(u.Timers) > 0 {
		h.poke()
	}
	for _, r := range runs {
		h.start(r)
	}
}

// joinLocked registers a waiter on a fresh attempt of each effect pending
// on key: one starting now for those waiting for their retry, the one
// after the attempt running for the others (which starts as soon as that
// one fails). The caller holds mu.
func (h *Hosted[S]) joinLocked(key string) []chan error {
	var out []chan error
	for _, r := range h.effects[key] {
		w := make(chan error, 1)
		out = append(out, w)
		if r.running {
			r.queued = append(r.queued, w)
			continue
		}
		r.waiters = append(r.waiters, w)
		r.running = true
		h.start(r)
	}
	return out
}

// effectRun is one effect until it succeeds.
type effectRun struct {
	e       Effect
	running bool      // an attempt runs
	next    time.Time // when not running: the next attempt's time
	backoff time.Duration
	waiters []chan error // hear the running attempt's outcome
	queued  []chan error // hear the attempt after it
}

// start runs one attempt of r in a goroutine (r.running is set).
func (h *Hosted[S]) start(r *effectRun) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.attempt(r)
	}()
}

// attempt runs r once, then its follow-up, and settles it: done, or a
// retry after its backoff.
func (h *Hosted[S]) attempt(r *effectRun) {
	err := h.run(r.e)
	h.mu.Lock()
	waiters := r.waiters
	r.waiters = nil
	r.running = false
	again := false
	if err == nil || h.closed {
		waiters = append(waiters, r.queued...)
		r.queued = nil
		runs := h.effects[r.e.Key]
		for i, x := range runs {
			if x == r {
				h.effects[r.e.Key] = append(runs[:i:i], runs[i+1:]...)
				break
			}
		}
		if len(h.effects[r.e.Key]) == 0 {
			delete(h.effects, r.e.Key)
		}
	} else if len(r.queued) > 0 {
		// Operations joined while it ran: they get an attempt now.
		r.waiters, r.queued = r.queued, nil
		r.running, again = true, true
	} else {
		r.next = h.cfg.Now().Add(r.backoff)
		r.backoff = min(2*r.backoff, h.cfg.MaxRetryBackoff)
	}
	h.mu.Unlock()
	if again {
		h.start(r)
	} else if err != nil {
		h.poke() // its retry's time
	}
	if err != nil && h.ctx.Err() == nil && h.Current() {
		h.cfg.Logger.Debug("coordinator effect failed; retrying", "partition", h.cfg.Name, "key", r.e.Key, "err", err)
	}
	for _, w := range waiters {
		w <- err
	}
}

// run performs one attempt of e and, if it succeeded, its follow-up under
// its key. The error is what the operations waiting for it are answered.
func (h *Hosted[S]) run(e Effect) error {
	if h.cfg.Fence && !h.Current() {
		return h.deposed() // a deposed shard runs no effects: the new one does
	}
	if h.cfg.Exec == nil {
		return errors.New("no effect executor")
	}
	out, err := h.cfg.Exec(h.ctx, e.Do)
	if err != nil {
		if e.Fail != nil {
			return e.Fail(err)
		}
		return err
	}
	if e.Then == nil {
		return nil
	}
	if err := h.lock(h.ctx, e.Key); err != nil {
		return h.deposed()
	}
	defer h.unlock(e.Key)
	h.mu.Lock()
	u, err := e.Then(out, h.cfg.Now())
	h.mu.Unlock()
	if err != nil {
		return err
	}
	return h.commit(h.ctx, e.Key, u, nil)
}

// timerEntry is an armed Timer in the heap.
type timerEntry struct {
	t     Timer
	index int
}

type timerHeap []*timerEntry

func (q timerHeap) Len() int           { return len(q) }
func (q timerHeap) Less(i, j int) bool { return q[i].t.At.Before(q[j].t.At) }
func (q timerHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *timerHeap) Push(x any) {
	e := x.(*timerEntry)
	e.index = len(*q)
	*q = append(*q, e)
}
func (q *timerHeap) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
