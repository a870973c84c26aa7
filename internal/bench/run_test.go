package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock that only moves when told: SleepUntil jumps to its
// target, and a sender moves it to stand for time spent.
type fakeClock struct {
	mu  sync.Mutex
	now time.Duration
}

func (c *fakeClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = max(c.now, t)
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d
}

// requireNear checks a quantile against the exact value it stands for.
func requireNear(t *testing.T, want, got time.Duration, what string) {
	t.Helper()
	require.LessOrEqual(t, math.Abs(float64(got-want)), RelativeError*float64(want)+1, "%s: got %v, want %v", what, got, want)
}

// TestBenchOpenLoopStallCountsInLatency: at 1000 records/s, the producer
// stalls for 200 ms on record 100 (as Produce does on a full buffer).
// Latency is measured from each record's scheduled time, so the 199
// records scheduled during the stall, sent when it ends, carry the rest of
// the stall in their latency: p90 is 100 ms and p99 190 ms, where a tool
// timing from the actual send would report one slow record and p99 0. The
// consumer's end-to-end latency starts at the scheduled time too.
func TestBenchOpenLoopStallCountsInLatency(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{}
	var r *Runner
	var sendTimes []time.Duration
	send := func(_ context.Context, value []byte, done func(error)) {
		sendTimes = append(sendTimes, clk.Now())
		if len(sendTimes) == 101 {
			clk.advance(200 * time.Millisecond) // record 100 (from 0) blocks
		}
		done(nil)             // acknowledged at once, after the stall
		r.Consumed(value)     // and read back at once
		r.Consumed(value[:4]) // not a record of this run: ignored
	}
	r, err := New(Config{
		Steps: []Step{{Rate: Rate{Records: 1000}, Duration: time.Second}}, RecordSize: 64, EndToEnd: true, clock: clk,
	}, []SendFunc{send})
	require.NoError(t, err)
	res := r.Run(context.Background())

	require.True(t, res.Drained)
	require.False(t, res.Interrupted)
	require.Len(t, res.Steps, 1)
	s := res.Steps[0]
	require.EqualValues(t, 1000, s.Sent)
	require.Zero(t, s.Unsent)
	require.EqualValues(t, 1000, s.Acked)
	require.EqualValues(t, 1000, s.Consumed)
	require.Empty(t, res.Errors)

	// 800 records on time (latency 0), record 100 at 200 ms, records
	// 101…299 sent at 300 ms: 199 ms … 1 ms.
	for _, sum := range []Summary{s.Publish, s.EndToEnd} {
		require.EqualValues(t, 1000, sum.Count)
		require.Equal(t, 200*time.Millisecond, sum.Max)
		require.Zero(t, sum.P50)
		requireNear(t, 100*time.Millisecond, sum.P90, "p90")
		requireNear(t, 190*time.Millisecond, sum.P99, "p99")
		requireNear(t, 199*time.Millisecond, sum.P999, "p99.9")
	}
	// The generator sent the waiting records at once, then caught up.
	require.Equal(t, 300*time.Millisecond, sendTimes[101])
	require.Equal(t, 300*time.Millisecond, sendTimes[299])
	require.Equal(t, 300*time.Millisecond, sendTimes[300])
	require.Equal(t, 301*time.Millisecond, sendTimes[301])
}

// TestBenchOpenLoopBehindAtStepEnd: a stall that outlasts the step leaves
// the records due during it unsent, counted as such, and the step's
// numbers cover the records sent.
func TestBenchOpenLoopBehindAtStepEnd(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{}
	n := 0
	send := func(_ context.Context, _ []byte, done func(error)) {
		n++
		if n == 901 {
			clk.advance(2 * time.Second)
		}
		done(nil)
	}
	r, err := New(Config{Steps: []Step{{Rate: Rate{Records: 1000}, Duration: time.Second}}, RecordSize: HeaderSize, clock: clk}, []SendFunc{send})
	require.NoError(t, err)
	res := r.Run(context.Background())
	s := res.Steps[0]
	require.EqualValues(t, 901, s.Sent)
	require.EqualValues(t, 99, s.Unsent)
	require.EqualValues(t, 901, s.Acked)
	require.Equal(t, 2*time.Second, s.Publish.Max)
	require.InDelta(t, 901, s.RecordsPerSecond, 0.001, "acknowledged records over the step's duration")
	require.InDelta(t, 901*HeaderSize, s.BytesPerSecond, 0.001)
}

// TestBenchStepsWarmupAndProducers: two producers share each step's rate
// at even spacing (every scheduled time distinct, 1/rate apart, as the
// record values say); records of the warm-up are sent but not counted; a
// byte rate becomes records through the record size; failures are counted
// per step and by message.
func TestBenchStepsWarmupAndProducers(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{} // shared by two generators: the order they send in varies, not the schedule
	var mu sync.Mutex
	var times []time.Duration
	sender := func(fail bool) SendFunc {
		return func(_ context.Context, v []byte, done func(error)) {
			at := time.Duration(binary.LittleEndian.Uint64(v[8:]))
			mu.Lock()
			times = append(times, at)
			mu.Unlock()
			if fail && at >= 1500*time.Millisecond {
				done(errors.New("broker said no"))
				return
			}
			done(nil)
		}
	}
	r, err := New(Config{
		Steps: []Step{
			{Rate: Rate{Records: 100}, Duration: time.Second},
			{Rate: Rate{Bytes: 200 * 1024}, Duration: 2 * time.Second}, // 200 records/s of 1 KiB
		},
		Warmup: 500 * time.Millisecond, RecordSize: 1024, clock: clk,
	}, []SendFunc{sender(false), sender(true)})
	require.NoError(t, err)
	res := r.Run(context.Background())
	require.Len(t, res.Steps, 2)

	s1, s2 := res.Steps[0], res.Steps[1]
	require.EqualValues(t, 100, s1.Sent, "1 s at 100/s; the 50 of the warm-up are left out")
	require.EqualValues(t, 100, s1.Acked)
	require.InDelta(t, 100, s1.TargetRecordsPerSecond, 0)
	require.Equal(t, 500*time.Millisecond, s1.Warmup)
	require.Equal(t, time.Second, s1.Duration)
	require.InDelta(t, 200, s2.TargetRecordsPerSecond, 0)
	require.EqualValues(t, 400, s2.Sent)
	require.EqualValues(t, 200, s2.Acked, "the second producer's records fail in step 2")
	require.EqualValues(t, 200, s2.Failed)
	require.InDelta(t, 100, s2.RecordsPerSecond, 0.001)
	require.Equal(t, []ErrorCount{{Message: "broker said no", Count: 200 + 50}}, res.Errors, "warm-up failures are errors too")

	// Step 1 (150 records over 1.5 s) then step 2 (500 over 2.5 s): the
	// two producers' records interleave at 10 ms, then 5 ms.
	slices.Sort(times)
	require.Len(t, times, 150+500)
	require.Equal(t, time.Duration(0), times[0])
	for i := 1; i < 150; i++ {
		require.Equal(t, 10*time.Millisecond, times[i]-times[i-1], "record %d", i)
	}
	require.Equal(t, 1500*time.Millisecond, times[150])
	for i := 151; i < len(times); i++ {
		require.Equal(t, 5*time.Millisecond, times[i]-times[i-1], "record %d", i)
	}
}

// TestBenchSaturated: without a rate, records go out as fast as the
// producer takes them, each timed from when it was handed over, until
// the step's end.
func TestBenchSaturated(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{}
	send := func(_ context.Context, _ []byte, done func(error)) {
		clk.advance(time.Millisecond) // the producer takes 1 ms per record
		done(nil)
	}
	r, err := New(Config{Steps: []Step{{Duration: time.Second}}, RecordSize: 1024, clock: clk}, []SendFunc{send})
	require.NoError(t, err)
	s := r.Run(context.Background()).Steps[0]
	require.EqualValues(t, 1000, s.Sent)
	require.Zero(t, s.Unsent)
	require.Zero(t, s.TargetRecordsPerSecond)
	require.Equal(t, time.Millisecond, s.Publish.P50)
	require.Equal(t, time.Millisecond, s.Publish.Max)
}

// TestBenchInterrupted: when the context ends, sending stops; the run
// returns the steps that started, the current one measured up to the
// interruption.
func TestBenchInterrupted(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	send := func(_ context.Context, _ []byte, done func(error)) {
		n++
		if n == 1300 { // record 1299, at 1.299 s: step 1's warm-up is over
			cancel()
		}
		done(nil)
	}
	r, err := New(Config{
		Steps:  []Step{{Rate: Rate{Records: 1000}, Duration: time.Second}, {Rate: Rate{Records: 2000}, Duration: time.Second}},
		Warmup: time.Second, RecordSize: 100, clock: clk,
	}, []SendFunc{send})
	require.NoError(t, err)
	res := r.Run(ctx)
	require.True(t, res.Interrupted)
	require.True(t, res.Drained)
	require.Len(t, res.Steps, 1, "step 2 never started")
	s := res.Steps[0]
	require.EqualValues(t, 300, s.Sent)
	require.Zero(t, s.Unsent)
	require.Equal(t, 300*time.Millisecond, s.Duration, "the generator had moved on to the next record's time, 1.3 s")
}

func TestBenchConfigValidate(t *testing.T) {
	t.Parallel()
	ok := Config{Steps: []Step{{Duration: time.Second}}, RecordSize: 1024}
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no steps", func(c *Config) { c.Steps = nil }, "no steps"},
		{"small records", func(c *Config) { c.RecordSize = 8 }, "at least 16 bytes"},
		{"zero duration", func(c *Config) { c.Steps[0].Duration = 0 }, "step 1: duration 0s must be positive"},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "warm-up -1s"},
	} {
		c := ok
		c.Steps = append([]Step(nil), ok.Steps...)
		tc.edit(&c)
		require.ErrorContains(t, c.Validate(), tc.want, tc.name)
	}
	_, err := New(ok, nil)
	require.ErrorContains(t, err, "no producers")
}

func TestBenchParseRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		records float64
		bytes   float64
	}{
		{"0", 0, 0},
		{"100", 100, 0},
		{"2500/s", 2500, 0},
		{"10MiB/s", 0, 10 << 20},
		{"5MB/s", 0, 5e6},
		{"512KiB/s", 0, 512 << 10},
		{"1.5GiB/s", 0, 1.5 * (1 << 30)},
		{"0MiB/s", 0, 0},
		{" 20 mib/s ", 0, 20 << 20},
	} {
		r, err := ParseRate(tc.in)
		require.NoError(t, err, tc.in)
		require.InDelta(t, tc.records, r.Records, 0, tc.in)
		require.InDelta(t, tc.bytes, r.Bytes, 0, tc.in)
		require.Equal(t, tc.records == 0 && tc.bytes == 0, r.Saturated(), tc.in)
	}
	for _, in := range []string{"", "fast", "-5", "10k/s", "10MiB/h", "1e3", "NaN"} {
		_, err := ParseRate(in)
		require.Error(t, err, in)
	}
	rs, err := ParseRates("5MiB/s,10MiB/s,20MiB/s")
	require.NoError(t, err)
	require.Len(t, rs, 3)
	require.Equal(t, "10MiB/s", rs[1].String())
	require.InDelta(t, 10240, rs[1].RecordsPerSecond(1024), 0)
	require.Equal(t, "2MiB/s", Rate{Bytes: 2 << 20}.String())
	require.Equal(t, "100/s", Rate{Records: 100}.String())
	_, err = ParseRates("5MiB/s,,1")
	require.Error(t, err)

	for in, want := range map[string]int{"1024": 1024, "1KiB": 1024, "64KB": 64000, "1MiB": 1 << 20, "16B": 16} {
		n, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, n, in)
	}
	for _, in := range []string{"", "big", "1.5B", "1KiB/s", "-1", "10GiB"} {
		_, err := ParseSize(in)
		require.Error(t, err, in)
	}
}
