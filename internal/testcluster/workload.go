package testcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Outcome is what a produce request did to its records.
type Outcome int

const (
	// Acked: acknowledged at an offset; the records must be in the log there.
	Acked Outcome = iota
	// Failed: refused before any append; the records must not be in the log.
	Failed
	// Indefinite: timed out, lost its connection or its leader; the records
	// may or may not be in the log, but at most once.
	Indefinite
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	case Indefinite:
		return "indefinite"
	}
	return "unknown"
}

// MarshalText writes the outcome's name in histories.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Op is one produce request in a history.
type Op struct {
	Partition int32     `json:"partition"`
	Values    []string  `json:"values"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Broker    int32     `json:"broker"`
	Outcome   Outcome   `json:"outcome"`
	// Offset is the base offset of an acknowledged request: Values[i] is at
	// Offset+i.
	Offset int64  `json:"offset"`
	Code   string `json:"code,omitempty"`
	Err    string `json:"err,omitempty"`
}

// Poll is one record a consumer read, in the order it read them.
type Poll struct {
	Consumer  int    `json:"consumer"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
	// HW is the high watermark the fetch that returned it reported.
	HW int64 `json:"hw"`
}

// WorkloadConfig sizes a workload.
type WorkloadConfig struct {
	// Partitions to write and read.
	Partitions []int32
	// ProducersPerPartition concurrent closed-loop producers (default 2).
	ProducersPerPartition int
	// RecordsPerRequest records in each produce (default 10).
	RecordsPerRequest int
	// Records stops the producers once this many records were acknowledged
	// in all (0: run until Stop).
	Records int64
	// ProduceTimeout is each request's timeout_ms (default 3s).
	ProduceTimeout time.Duration
	// Consumers reads every partition with one consumer during the run.
	Consumers bool
}

// Workload runs acks=all producers (and optionally consumers) against a
// topic and records the history for Check.
type Workload struct {
	cl     *Client
	cfg    WorkloadConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when the record target is reached

	acked   atomic.Int64
	mu      sync.Mutex
	ops     []Op
	polls   []Poll
	anomaly []string // consumer-side anomalies seen live
}

// StartWorkload starts producers (and consumers) until Stop.
func StartWorkload(cl *Client, cfg WorkloadConfig) *Workload {
	if cfg.ProducersPerPartition == 0 {
		cfg.ProducersPerPartition = 2
	}
	if cfg.RecordsPerRequest == 0 {
		cfg.RecordsPerRequest = 10
	}
	if cfg.ProduceTimeout == 0 {
		cfg.ProduceTimeout = 3 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Workload{cl: cl, cfg: cfg, cancel: cancel, done: make(chan struct{})}
	var doneOnce sync.Once
	for _, p := range cfg.Partitions {
		for i := range cfg.ProducersPerPartition {
			w.wg.Go(func() { w.produce(ctx, p, i, func() { doneOnce.Do(func() { close(w.done) }) }) })
		}
		if cfg.Consumers {
			w.wg.Go(func() { w.consume(ctx, int(p), p) })
		}
	}
	return w
}

// Done is closed when the record target has been acknowledged.
func (w *Workload) Done() <-chan struct{} { return w.done }

// Acked is how many records were acknowledged so far.
func (w *Workload) Acked() int64 { return w.acked.Load() }

// Stop ends the producers and consumers and waits for them.
func (w *Workload) Stop() {
	w.cancel()
	w.wg.Wait()
}

// Ops returns a copy of the produce history.
func (w *Workload) Ops() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Op(nil), w.ops...)
}

// Polls returns a copy of the consumers' history.
func (w *Workload) Polls() []Poll {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Poll(nil), w.polls...)
}

func (w *Workload) produce(ctx context.Context, partition int32, worker int, reached func()) {
	for seq := 0; ctx.Err() == nil; seq++ {
		if w.cfg.Records > 0 && w.acked.Load() >= w.cfg.Records {
			reached()
			return
		}
		values := make([]string, w.cfg.RecordsPerRequest)
		for i := range values {
			values[i] = fmt.Sprintf("p%d-w%d-%d-%d", partition, worker, seq, i)
		}
		op := Op{Partition: partition, Values: values, Start: time.Now()}
		res := w.cl.Produce(ctx, partition, values, sluicev1.Acks_ACKS_ALL, w.cfg.ProduceTimeout)
		op.End, op.Broker, op.Outcome = time.Now(), res.Broker, Classify(res.Err)
		if res.Err != nil {
			op.Code, op.Err = connect.CodeOf(res.Err).String(), res.Err.Error()
			if ctx.Err() != nil {
				op.Outcome = Indefinite // cancelled by Stop: unknown
			}
		} else {
			op.Offset = res.Base
			w.acked.Add(int64(len(values)))
		}
		w.mu.Lock()
		w.ops = append(w.ops, op)
		w.mu.Unlock()
		if res.Err != nil {
			pause(ctx, 50*time.Millisecond) // do not spin while the partition is unavailable
		}
	}
}

// consume reads a partition from offset 0 for the whole run, recording
// every record; after an error it refetches from the same offset.
func (w *Workload) consume(ctx context.Context, id int, partition int32) {
	var next int64
	for ctx.Err() == nil {
		res, err := w.cl.Fetch(ctx, partition, next, 500*time.Millisecond)
		if err != nil {
			if ctx.Err() == nil && connect.CodeOf(err) == connect.CodeOutOfRange {
				w.noteAnomaly("consumer %d: partition %d: fetch at %d out of range: %v", id, partition, next, err)
			}
			pause(ctx, 50*time.Millisecond)
			continue
		}
		w.mu.Lock()
		for _, r := range res.Records {
			w.polls = append(w.polls, Poll{Consumer: id, Partition: partition, Offset: r.Offset, Value: r.Value, HW: res.HW})
		}
		w.mu.Unlock()
		if len(res.Records) > 0 {
			next = res.Records[len(res.Records)-1].Offset + 1
		}
	}
}

func (w *Workload) noteAnomaly(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.anomaly) < 100 {
		w.anomaly = append(w.anomaly, fmt.Sprintf(format, args...))
	}
}

// Anomalies seen live by consumers (out-of-range fetches below what they
// had already read).
func (w *Workload) Anomalies() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.anomaly...)
}

// Dump writes the history as JSON lines (ops, then polls) to path.
func (w *Workload) Dump(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, op := range w.Ops() {
		if err := enc.Encode(map[string]any{"op": op}); err != nil {
			f.Close()
			return err
		}
	}
	for _, p := range w.Polls() {
		if err := enc.Encode(map[string]any{"poll": p}); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// FirstAckAfter is the first time an acknowledged request to partition,
// sent at or after t, completed; ok is false when none did.
func FirstAckAfter(ops []Op, partition int32, t time.Time) (time.Time, bool) {
	var first time.Time
	for _, op := range ops {
		if op.Partition == partition && op.Outcome == Acked && !op.Start.Before(t) {
			if first.IsZero() || op.End.Before(first) {
				first = op.End
			}
		}
	}
	return first, !first.IsZero()
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
