package runtime

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/internal/testenv"
)

var errNotLeader = errors.New("not the leader")

// logPartition is a partition of one replica over a real log that leads at
// one epoch (acks=all is the leader's own append). appendGate, when set,
// is waited on by every append (a slow ISR); failAppend fails them.
type logPartition struct {
	*log.Log

	mu         sync.Mutex
	epoch      int32 // -1: not the leader
	failAppend error
	appendGate chan struct{}
	appends    int
}

func openPartition(t *testing.T, epoch int32) *logPartition {
	t.Helper()
	l, err := log.Open(t.TempDir(), log.Config{SegmentBytes: 1024, Flush: log.FlushOS})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return &logPartition{Log: l, epoch: epoch}
}

func (p *logPartition) CheckLeader() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch < 0 {
		return errNotLeader
	}
	return nil
}

func (p *logPartition) AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	p.mu.Lock()
	gate, fail := p.appendGate, p.failAppend
	p.appends++
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if fail != nil {
		return 0, fail
	}
	if p.epoch < 0 || epoch != p.epoch {
		return 0, errNotLeader
	}
	base, _, err := p.AppendValidated(batch, epoch)
	return base, err
}

func (p *logPartition) Leads(epoch int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch >= 0 && p.epoch == epoch
}

func (p *logPartition) set(f func(p *logPartition)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// kv is a test shard: a map of keys to values, each record "key=value",
// the offset of each key's last record, and the offsets it replayed in
// order.
type kv struct {
	vals     map[string]string
	offsets  map[string]int64 // of each key's last record
	replayed []int64
	loaded   Update // what Loaded returns
}

func newKV() *kv { return &kv{vals: map[string]string{}, offsets: map[string]int64{}} }

func (s *kv) Replay(offset int64, r Record) error {
	s.vals[string(r.Key)] = string(r.Value)
	s.offsets[string(r.Key)] = offset
	s.replayed = append(s.replayed, offset)
	return nil
}

func (s *kv) Loaded(time.Time) Update { return s.loaded }

// set is an operation writing k=v and answering the value it replaced.
func set(k, v string) Op[*kv, string] {
	return func(s *kv, _ time.Time) (Result[string], error) {
		return Result[string]{Update: Update{Records: []Record{{Key: []byte(k), Value: []byte(v)}}}, Response: s.vals[k]}, nil
	}
}

func get(h *Hosted[*kv], k string) string {
	v, _ := Read(h, func(s *kv) string { return s.vals[k] })
	return v
}

// waitFor polls cond until it holds (testenv.Wait), failing the test
// after 10 s with what (formatted with args).
func waitFor(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	testenv.Wait(t, 10*time.Second, fmt.Sprintf(what, args...), func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type fixture struct {
	ctx   context.Context
	p     *logPartition
	h     *Hosted[*kv]
	clock *clock
}

func setup(t *testing.T, cfg Config) *fixture {
	t.Helper()
	f := &fixture{ctx: t.Context(), p: openPartition(t, 1), clock: &clock{now: time.UnixMilli(1_800_000_000_000)}}
	cfg.Name, cfg.LeaderEpoch, cfg.Now = "test partition 0", 1, f.clock.Now
	f.h = New(f.p, newKV(), cfg)
	t.Cleanup(f.h.Close)
	require.NoError(t, f.h.Load(f.ctx))
	return f
}

// TestRuntimeWriteAppliesOnceCommitted: an operation's records are
// appended at the shard's epoch and replayed only once the append
// succeeded; until then reads see the state before them, and the response
// comes after.
func TestRuntimeWriteAppliesOnceCommitted(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gate := make(chan struct{})
	f.p.set(func(p *logPartition) { p.appendGate = gate })
	done := make(chan string, 1)
	go func() {
		prev, err := Write(f.ctx, f.h, "a", set("a", "1"))
		assert.NoError(t, err)
		done <- prev
	}()
	waitFor(t, func() bool {
		var n int
		f.p.set(func(p *logPartition) { n = p.appends })
		return n == 1
	}, "the append to start")
	require.Empty(t, get(f.h, "a"), "not applied while the append waits")
	select {
	case <-done:
		t.Fatal("answered before its records were written")
	default:
	}
	close(gate)
	require.Equal(t, "", <-done)
	require.Equal(t, "1", get(f.h, "a"))
	require.EqualValues(t, 1, f.p.LEO())
}

// TestRuntimeFailedAppendAppliesNothing: a failed append answers its
// error, replays nothing and starts none of the operation's effects or
// timers.
func TestRuntimeFailedAppendAppliesNothing(t *testing.T) {
	t.Parallel()
	ran := 0
	f := setup(t, Config{Exec: func(context.Context, any) (any, error) { ran++; return nil, nil }})
	errISR := errors.New("not enough replicas")
	f.p.set(func(p *logPartition) { p.failAppend = errISR })
	_, err := Write(f.ctx, f.h, "a", func(s *kv, now time.Time) (Result[string], error) {
		return Result[string]{Update: Update{
			Records: []Record{{Key: []byte("a"), Value: []byte("1")}},
			Effects: []Effect{{Key: "a", Do: "x"}},
			Timers:  []Timer{{Key: "a", At: now, Op: func(time.Time) (Update, error) { ran++; return Update{}, nil }}},
		}}, nil
	})
	require.ErrorIs(t, err, errISR)
	require.ErrorContains(t, err, "write to test partition 0")
	require.Empty(t, get(f.h, "a"))
	f.h.RunDue(f.ctx)
	require.Zero(t, ran, "no effect, no timer")
}

// TestRuntimeSameKeySerialised: operations on one key run one at a time in
// the order they took it, each against the state its predecessor's
// records made; a key's records replay in log order.
func TestRuntimeSameKeySerialised(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	incr := func(s *kv, _ time.Time) (Result[int], error) {
		n, _ := strconv.Atoi(s.vals["n"])
		return Result[int]{Update: Update{Records: []Record{{Key: []byte("n"), Value: []byte(strconv.Itoa(n + 1))}}}, Response: n + 1}, nil
	}
	var wg sync.WaitGroup
	got := make([]int, 20)
	for i := range got {
		wg.Go(func() {
			n, err := Write(f.ctx, f.h, "n", incr)
			assert.NoError(t, err)
			got[i] = n
		})
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, n := range got {
		seen[n] = true
	}
	require.Len(t, seen, 20, "each saw its predecessor's record: %v", got)
	require.Equal(t, "20", get(f.h, "n"))
	offs, _ := Read(f.h, func(s *kv) []int64 { return s.replayed })
	for i, off := range offs {
		require.EqualValues(t, i, off)
	}
}

// TestRuntimeDifferentKeysConcurrent: an operation whose append waits
// holds only its key: one on another key is written and answered
// meanwhile, and one on the same key waits for it.
func TestRuntimeDifferentKeysConcurrent(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	gate := make(chan struct{})
	f.p.set(func(p *logPartition) { p.appendGate = gate })
	slow := make(chan error, 1)
	go func() {
		_, err := Write(f.ctx, f.h, "a", set("a", "1"))
		slow <- err
	}()
	waitFor(t, func() bool {
		var n int
		f.p.set(func(p *logPartition) { n = p.appends })
		return n == 1
	}, "the first append to start")
	f.p.set(func(p *logPartition) { p.appendGate = nil })
	_, err := Write(f.ctx, f.h, "b", set("b", "2"))
	require.NoError(t, err)
	require.Equal(t, "2", get(f.h, "b"))
	sameKey := make(chan string, 1)
	go func() {
		prev, err := Write(f.ctx, f.h, "a", set("a", "3"))
		assert.NoError(t, err)
		sameKey <- prev
	}()
	close(gate)
	require.NoError(t, <-slow)
	require.Equal(t, "1", <-sameKey, "ran after the first, against its record")
	require.Equal(t, "3", get(f.h, "a"))
}

// TestRuntimeLoadReplaysTheLog: a shard hosted on the partition later (a
// new leader) replays every record in log order, then arms the timers and
// runs the effects its Loaded returns. Writes and reads before the load
// are refused.
func TestRuntimeLoadReplaysTheLog(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	for i := range 30 {
		_, err := Write(f.ctx, f.h, fmt.Sprint("k", i%7), set(fmt.Sprint("k", i%7), fmt.Sprint(i)))
		require.NoError(t, err)
	}
	shard := newKV()
	var execd []any
	shard.loaded = Update{Effects: []Effect{{Key: "k1", Do: "resume"}}}
	h := New(f.p, shard, Config{Name: "test partition 0", LeaderEpoch: 1, Now: f.clock.Now,
		Exec: func(_ context.Context, do any) (any, error) { execd = append(execd, do); return nil, nil }})
	t.Cleanup(h.Close)
	_, err := Write(f.ctx, h, "k1", set("k1", "x"))
	require.ErrorIs(t, err, ErrNotCoordinator)
	_, err = Read(h, func(s *kv) int { return len(s.vals) })
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.NoError(t, h.Load(f.ctx))
	for k := range 7 {
		require.Equal(t, get(f.h, fmt.Sprint("k", k)), get(h, fmt.Sprint("k", k)))
	}
	offs, _ := Read(h, func(s *kv) []int64 { return s.replayed })
	require.Len(t, offs, 30)
	for i, off := range offs {
		require.EqualValues(t, i, off)
	}
	waitFor(t, func() bool {
		_, _ = Read(h, func(*kv) int { return 0 }) // synchronise with the effect's goroutine
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.effects) == 0
	}, "the loaded effect to run")
	require.Equal(t, []any{"resume"}, execd)
}

// TestRuntimeEpochChangeDropsShard: the runtime keeps one shard per
// partition and leader epoch: a new epoch makes a new shard loaded from
// the log, and Current drops (closes) the shard whose leadership moved.
// A fenced shard refuses writes once deposed, without appending.
func TestRuntimeEpochChangeDropsShard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rt := NewRuntime()
	t.Cleanup(rt.Close)
	p := openPartition(t, 1)
	key := PartitionKey{"__test", 0}
	made := 0
	mk := func(epoch int32) func() *Hosted[*kv] {
		return func() *Hosted[*kv] {
			made++
			return New(p, newKV(), Config{Name: "test partition 0", LeaderEpoch: epoch, Fence: true})
		}
	}
	h1, err := Host(ctx, rt, key, 1, Partition(p), mk(1))
	require.NoError(t, err)
	again, err := Host(ctx, rt, key, 1, Partition(p), mk(1))
	require.NoError(t, err)
	require.Same(t, h1, again)
	_, err = Write(ctx, h1, "a", set("a", "1"))
	require.NoError(t, err)
	require.Len(t, rt.Current(), 1)

	p.set(func(p *logPartition) { p.epoch = 2 }) // re-elected at a new epoch
	require.Empty(t, rt.Current(), "the epoch-1 shard is dropped")
	_, err = Write(ctx, h1, "a", set("a", "2"))
	require.ErrorIs(t, err, ErrNotCoordinator)
	require.ErrorContains(t, err, "test partition 0 moved from leader epoch 1")
	require.EqualValues(t, 1, p.LEO(), "nothing appended")
	h2, err := Host(ctx, rt, key, 2, Partition(p), mk(2))
	require.NoError(t, err)
	require.NotSame(t, h1, h2)
	require.Equal(t, "1", get(h2, "a"), "loaded from the log")
	require.Equal(t, 2, made)

	p.set(func(p *logPartition) { p.epoch = -1 }) // moved to another broker
	_, err = Host(ctx, rt, key, 3, Partition(p), mk(3))
	require.ErrorIs(t, err, errNotLeader, "cannot load where it does not lead")
}

// effects is an Exec that fails while fail is set and records what it ran.
type effects struct {
	mu    sync.Mutex
	fail  error
	ran   []any
	block chan struct{} // when set, attempts wait for it
}

func (e *effects) exec(ctx context.Context, do any) (any, error) {
	e.mu.Lock()
	block := e.block
	e.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ran = append(e.ran, do)
	if e.fail != nil {
		return nil, e.fail
	}
	return strings.ToUpper(fmt.Sprint(do)), nil
}

func (e *effects) set(f func(e *effects)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e)
}

// end is an operation like a transaction's end: it writes "k=ending",
// asks for an effect whose follow-up writes "k=" + its output, and
// answers once that is written (Await).
func end(k string) Op[*kv, string] {
	return func(s *kv, _ time.Time) (Result[string], error) {
		if s.vals[k] == "ending" {
			return Result[string]{}, fmt.Errorf("%s busy: %w", k, ErrEffectPending)
		}
		return Result[string]{Await: true, Response: "ended", Update: Update{
			Records: []Record{{Key: []byte(k), Value: []byte("ending")}},
			Effects: []Effect{{Key: k, Do: k + "-markers",
				Then: func(out any, _ time.Time) (Update, error) {
					return Update{Records: []Record{{Key: []byte(k), Value: []byte(out.(string))}}}, nil
				},
				Fail: func(err error) error { return fmt.Errorf("still ending: %w", err) },
			}},
		}}, nil
	}
}

// TestRuntimeEffectsRetried: an effect runs once its operation's records
// are written; a failed attempt answers the awaiting operation with
// Effect.Fail's error and is retried after a growing backoff (RunDue)
// until it succeeds, its follow-up then written under its key.
func TestRuntimeEffectsRetried(t *testing.T) {
	t.Parallel()
	ex := &effects{fail: errors.New("leader unreachable")}
	f := setup(t, Config{Exec: ex.exec, RetryBackoff: time.Second, MaxRetryBackoff: 4 * time.Second})
	_, err := Write(f.ctx, f.h, "t", end("t"))
	require.EqualError(t, err, "still ending: leader unreachable")
	require.Equal(t, "ending", get(f.h, "t"), "the first record is written, not the follow-up")
	retries := func() int {
		ex.mu.Lock()
		defer ex.mu.Unlock()
		return len(ex.ran)
	}
	f.h.RunDue(f.ctx)
	require.Equal(t, 1, retries(), "not before its backoff")
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
		f.clock.advance(wait - time.Millisecond)
		f.h.RunDue(f.ctx)
		require.Equal(t, i+1, retries(), "backoff %v not passed", wait)
		f.clock.advance(time.Millisecond)
		f.h.RunDue(f.ctx)
		waitFor(t, func() bool { return retries() == i+2 }, "retry %d", i+1)
		waitFor(t, func() bool {
			f.h.mu.Lock()
			defer f.h.mu.Unlock()
			return len(f.h.effects["t"]) == 1 && !f.h.effects["t"][0].running
		}, "retry %d to settle", i+1)
	}
	ex.set(func(e *effects) { e.fail = nil })
	f.clock.advance(4 * time.Second)
	f.h.RunDue(f.ctx)
	waitFor(t, func() bool { return get(f.h, "t") == "T-MARKERS" }, "the follow-up written")
	require.Equal(t, 6, retries())
}

// TestRuntimeNoLockAcrossEffects: while an effect's attempt is blocked
// (a marker write that does not return), operations on other keys run and
// reads answer; an operation on the effect's key that must wait for it
// (ErrEffectPending) gets the attempt's outcome: it runs again once the
// follow-up is written, or answers the attempt's error.
func TestRuntimeNoLockAcrossEffects(t *testing.T) {
	t.Parallel()
	ex := &effects{block: make(chan struct{})}
	f := setup(t, Config{Exec: ex.exec})
	ended := make(chan error, 1)
	go func() {
		_, err := Write(f.ctx, f.h, "t", end("t"))
		ended <- err
	}()
	waitFor(t, func() bool { return get(f.h, "t") == "ending" }, "the end's first record")
	for i := range 5 {
		_, err := Write(f.ctx, f.h, fmt.Sprint("other-", i), set(fmt.Sprint("other-", i), "v"))
		require.NoError(t, err, "another key progresses while the effect is blocked")
	}
	retry := make(chan string, 1)
	go func() {
		r, err := Write(f.ctx, f.h, "t", func(s *kv, _ time.Time) (Result[string], error) {
			if s.vals["t"] == "ending" {
				return Result[string]{}, fmt.Errorf("t: %w", ErrEffectPending)
			}
			return Result[string]{Response: "after " + s.vals["t"]}, nil
		})
		assert.NoError(t, err)
		retry <- r
	}()
	waitFor(t, func() bool {
		f.h.mu.Lock()
		defer f.h.mu.Unlock()
		r := f.h.effects["t"]
		return len(r) == 1 && len(r[0].waiters)+len(r[0].queued) == 2
	}, "the retry to wait for the effect, as the end does")
	select {
	case r := <-retry:
		t.Fatalf("answered %q while the effect is blocked", r)
	default:
	}
	close(ex.block)
	require.NoError(t, <-ended)
	require.Equal(t, "after T-MARKERS", <-retry, "ran again after the follow-up")

	// A waiter on a failing attempt gets its error.
	ex.set(func(e *effects) { e.fail = errors.New("unreachable") })
	_, err := Write(f.ctx, f.h, "u", end("u"))
	require.EqualError(t, err, "still ending: unreachable")
	_, err = Write(f.ctx, f.h, "u", end("u"))
	require.EqualError(t, err, "still ending: unreachable", "joined a new attempt at once, not the backoff")
}

// TestRuntimeTimers: a timer fires its operation under its key at its
// time (RunDue), writing its records; a new timer for a key replaces the
// old; a timer whose key is busy fires at the next call.
func TestRuntimeTimers(t *testing.T) {
	t.Parallel()
	f := setup(t, Config{})
	arm := func(k, v string, in time.Duration) {
		_, err := Write(f.ctx, f.h, k, func(s *kv, now time.Time) (Result[string], error) {
			return Result[string]{Update: Update{Timers: []Timer{{Key: k, At: now.Add(in), Op: func(time.Time) (Update, error) {
				return Update{Records: []Record{{Key: []byte(k), Value: []byte(v)}}}, nil
			}}}}}, nil
		})
		require.NoError(t, err)
	}
	arm("a", "first", time.Minute)
	arm("a", "second", 2*time.Minute) // replaces
	arm("b", "b", time.Minute)
	f.clock.advance(time.Minute)
	f.h.RunDue(f.ctx)
	require.Equal(t, "", get(f.h, "a"), "replaced")
	require.Equal(t, "b", get(f.h, "b"))
	f.clock.advance(time.Minute)
	require.True(t, f.h.tryLock("a")) // busy
	f.h.RunDue(f.ctx)
	require.Equal(t, "", get(f.h, "a"))
	f.h.unlock("a")
	f.h.RunDue(f.ctx)
	require.Equal(t, "second", get(f.h, "a"))
	f.h.RunDue(f.ctx)
	require.EqualValues(t, 2, f.p.LEO(), "each fired once")

	// Named timers of one key are armed each for itself: one does not
	// replace the other (a coordinator's periodic expiry and a group's
	// deadline under the empty key), a timer of the same name does.
	named := func(name, v string, in time.Duration) {
		_, err := Write(f.ctx, f.h, "c", func(s *kv, now time.Time) (Result[string], error) {
			return Result[string]{Update: Update{Timers: []Timer{{Key: "c", Name: name, At: now.Add(in), Op: func(time.Time) (Update, error) {
				return Update{Records: []Record{{Key: []byte(name), Value: []byte(v)}}}, nil
			}}}}}, nil
		})
		require.NoError(t, err)
	}
	named("x", "x1", time.Minute)
	named("y", "y1", time.Minute)
	named("x", "x2", time.Minute) // replaces x1 only
	f.clock.advance(time.Minute)
	f.h.RunDue(f.ctx)
	require.Equal(t, "x2", get(f.h, "x"))
	require.Equal(t, "y1", get(f.h, "y"))
	require.EqualValues(t, 4, f.p.LEO())
}
