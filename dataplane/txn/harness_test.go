package txn

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

// errNotLeader is what logPartition answers when it does not lead at the
// epoch asked.
var errNotLeader = errors.New("not the leader")

// logPartition is a transaction-state partition of one replica: a real log
// in a temp dir that leads at one epoch (acks=all is then the leader's own
// append), as the broker's partition replica will serve a Coordinator.
type logPartition struct {
	*log.Log

	mu    sync.Mutex
	epoch int32 // the epoch it leads at; -1 while it does not lead
	// onAppend, when set, runs at the start of every AppendAcksAll.
	onAppend func()
}

func openLog(t *testing.T) *log.Log {
	t.Helper()
	l, err := log.Open(t.TempDir(), log.Config{SegmentBytes: 4096, Flush: log.FlushOS})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func openPartition(t *testing.T, epoch int32) *logPartition {
	t.Helper()
	return &logPartition{Log: openLog(t), epoch: epoch}
}

func (p *logPartition) CheckLeader() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch < 0 {
		return errNotLeader
	}
	return nil
}

func (p *logPartition) AppendAcksAll(_ context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	if p.onAppend != nil {
		p.onAppend()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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

func (p *logPartition) resign() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = -1
}

// replicate copies every batch of from to p as a follower's fetches do,
// then makes p the leader at epoch: a takeover.
func (p *logPartition) replicate(t *testing.T, from *logPartition, epoch int32) {
	t.Helper()
	for off := p.LEO(); off < from.LEO(); off = p.LEO() {
		data, err := from.Read(off, 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, data)
		_, err = p.AppendFollower(data)
		require.NoError(t, err)
	}
	require.Equal(t, from.LEO(), p.LEO())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = epoch
}

// markerLogs writes markers as control batches (Kafka's control record:
// key version 0, type 0 abort / 1 commit) to real logs, one per data
// partition and one per group's offsets partition. While fail is set it
// writes nothing and fails.
type markerLogs struct {
	t  *testing.T
	mu sync.Mutex
	// logs: a data partition's log, or a group's offsets log
	// (TopicPartition{TopicID: "offsets:" + tenant + "/" + group}).
	logs  map[TopicPartition]*log.Log
	fail  error
	calls int
	// onWrite, when set, runs at the start of every WriteMarkers, without mu.
	onWrite func([]Marker)
}

func newMarkerLogs(t *testing.T) *markerLogs {
	return &markerLogs{t: t, logs: map[TopicPartition]*log.Log{}}
}

func markerTarget(m Marker) TopicPartition {
	if m.Group != "" {
		return TopicPartition{TopicID: "offsets:" + m.Tenant + "/" + m.Group}
	}
	return m.Partition
}

func (w *markerLogs) setFail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = err
}

func (w *markerLogs) WriteMarkers(_ context.Context, markers []Marker) error {
	if w.onWrite != nil {
		w.onWrite(markers)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.fail != nil {
		return w.fail
	}
	for _, m := range markers {
		tp := markerTarget(m)
		l := w.logs[tp]
		if l == nil {
			l = openLog(w.t)
			w.logs[tp] = l
		}
		typ := record.ControlAbort
		if m.Commit {
			typ = record.ControlCommit
		}
		h, recs := record.MarkerBatch(m.ProducerID, m.ProducerEpoch, time.Now().UnixMilli(), record.ControlRecord{Type: typ, CoordinatorEpoch: m.CoordinatorEpoch})
		b, err := log.EncodeLeaderBatch(nil, h, recs)
		if err != nil {
			return err
		}
		if _, _, err := l.AppendValidated(b, 0); err != nil {
			return err
		}
	}
	return nil
}

// writtenMarker is a marker as read back from a log.
type writtenMarker struct {
	Commit           bool
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
}

// written reads back the markers in every log.
func (w *markerLogs) written(t *testing.T) map[TopicPartition][]writtenMarker {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[TopicPartition][]writtenMarker{}
	for tp, l := range w.logs {
		for off := l.LogStartOffset(); off < l.LEO(); {
			data, err := l.Read(off, 1<<20)
			require.NoError(t, err)
			for len(data) > 0 {
				b, rest, err := record.ReadBatch(data)
				require.NoError(t, err)
				data = rest
				h := b.Header()
				require.True(t, h.Attributes.Control() && h.Attributes.Transactional())
				cr, err := record.ReadControlRecord(b)
				require.NoError(t, err)
				out[tp] = append(out[tp], writtenMarker{Commit: cr.Type == record.ControlCommit, ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, CoordinatorEpoch: cr.CoordinatorEpoch})
				off = h.LastOffset() + 1
			}
		}
	}
	return out
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

// fixture is a coordinator at leader epoch 1 on a fresh partition, with
// real marker logs, a producer id allocator and a clock.
type fixture struct {
	ctx     context.Context
	p       *logPartition
	c       *Coordinator
	markers *markerLogs
	clock   *clock
	nextPID *atomic.Int64
}

func (f *fixture) config(epoch int32) Config {
	return Config{
		Partition: 3, LeaderEpoch: epoch, Markers: f.markers, Now: f.clock.Now, IdleTimeout: 24 * time.Hour,
		AllocateProducerID: func(context.Context) (int64, error) { return f.nextPID.Add(1), nil },
	}
}

func setup(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{ctx: t.Context(), p: openPartition(t, 1), markers: newMarkerLogs(t),
		clock: &clock{now: time.UnixMilli(1_800_000_000_000)}, nextPID: &atomic.Int64{}}
	f.nextPID.Store(1000)
	f.c = New(f.p, f.config(1))
	t.Cleanup(func() { f.c.Close() })
	require.NoError(t, f.c.Load(f.ctx))
	return f
}

// takeover replicates the partition to a new replica and loads a new
// coordinator there at leader epoch 2 (the old replica resigns): a crash of
// the coordinator's broker.
func (f *fixture) takeover(t *testing.T) *Coordinator {
	t.Helper()
	p2 := openPartition(t, -1)
	p2.replicate(t, f.p, 2)
	f.p.resign()
	c := New(p2, f.config(2))
	t.Cleanup(c.Close)
	require.NoError(t, c.Load(f.ctx))
	return c
}

// producer is a producer id and epoch as a producer holds them.
type producer struct {
	id    int64
	epoch int16
}

const tenant = "tenant-a"

func (f *fixture) init(t *testing.T, id string) producer {
	t.Helper()
	pid, epoch, err := f.c.InitProducer(f.ctx, tenant, id, 0, nil)
	require.NoError(t, err)
	return producer{pid, epoch}
}

func (f *fixture) add(p producer, id string, tps ...TopicPartition) error {
	return f.c.AddPartitions(f.ctx, tenant, id, p.id, p.epoch, tps)
}

func (f *fixture) end(p producer, id string, commit bool) (producer, error) {
	pid, epoch, err := f.c.EndTransaction(f.ctx, tenant, id, p.id, p.epoch, commit, BumpEpoch)
	return producer{pid, epoch}, err
}

// expire runs the coordinator's due timers at the clock's time (the
// timeouts' aborts, the idle ids' tombstones) and waits for the aborts'
// markers (FinishPending): what the runtime's Run does at a tick. It
// returns the ids whose transaction the timeouts aborted (Complete*
// written), and the errors of those whose markers failed.
func (f *fixture) expire() ([]Key, error) {
	before := f.c.Transactions()
	f.c.RunDue(f.ctx)
	err := f.c.FinishPending(f.ctx)
	var aborted []Key
	for k, t := range f.c.Transactions() {
		if t.EndedBy == EndedByTimeout && t.State.complete() && before[k].State == StateOngoing {
			aborted = append(aborted, k)
		}
	}
	slices.SortFunc(aborted, func(a, b Key) int { return strings.Compare(a.TransactionalID, b.TransactionalID) })
	return aborted, err
}

// recordBatch is the batch of one record of k's state t, as the runtime
// writes it.
func recordBatch(t *testing.T, k Key, tx *Transaction, now time.Time) log.ValidBatch {
	t.Helper()
	r, err := encodeRecord(k, tx)
	require.NoError(t, err)
	b, err := log.EncodeLeaderBatch(nil, record.BatchHeader{FirstTimestamp: now.UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Key: r.Key, Value: r.Value}})
	require.NoError(t, err)
	return b
}

func (f *fixture) state(t *testing.T, id string) Transaction {
	t.Helper()
	tx, ok := f.c.Describe(tenant, id)
	require.True(t, ok, "transactional id %q known", id)
	return tx
}

var (
	tp0 = TopicPartition{"topic-1", 0}
	tp1 = TopicPartition{"topic-1", 1}
	tp2 = TopicPartition{"topic-2", 0}
)
