package producerstate_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

// leader appends batches to a real log as a partition leader would: Check,
// Append, Apply. It remembers the state at every LEO it reached.
type leader struct {
	t      *testing.T
	dir    string
	l      *log.Log
	s      *producerstate.State
	seqs   map[int64]int32
	epochs map[int64]int16
	states map[int64]*producerstate.State // by LEO
	ts     int64
}

func newLeader(t *testing.T, cfg log.Config) *leader {
	dir := t.TempDir()
	ld := &leader{t: t, dir: dir, s: producerstate.New(), seqs: map[int64]int32{}, epochs: map[int64]int16{},
		states: map[int64]*producerstate.State{0: producerstate.New()}, ts: 1_000_000}
	ld.open(cfg)
	return ld
}

func (ld *leader) open(cfg log.Config) {
	l, err := log.Open(ld.dir, cfg)
	require.NoError(ld.t, err)
	ld.l = l
	ld.t.Cleanup(func() { _ = l.Close() })
}

// restart closes and reopens the log, as a broker restart does.
func (ld *leader) restart(cfg log.Config) {
	require.NoError(ld.t, ld.l.Close())
	ld.open(cfg)
}

// produce appends a batch of n records from pid (-1: not idempotent).
func (ld *leader) produce(pid int64, n int) { ld.produceBatch(pid, n, false) }

// produceBatch appends a batch of n records from pid, transactional (and
// verified) or not.
func (ld *leader) produceBatch(pid int64, n int, txn bool) {
	t := ld.t
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), TimestampDelta: int64(i), Value: make([]byte, 50)}
	}
	h := record.BatchHeader{FirstTimestamp: ld.ts, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}
	ld.ts += 10
	if pid >= 0 {
		h.ProducerID, h.ProducerEpoch, h.BaseSequence = pid, ld.epochs[pid], ld.seqs[pid]
		last := producerstate.LastSequence(h.BaseSequence, int32(n))
		var res producerstate.Result
		var err error
		if txn {
			h.Attributes = record.AttrTransactional
			res, err = ld.s.CheckTransactional(pid, h.ProducerEpoch, h.BaseSequence, last, true)
		} else {
			res, err = ld.s.Check(pid, h.ProducerEpoch, h.BaseSequence, last)
		}
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		ld.seqs[pid] = producerstate.LastSequence(h.BaseSequence, int32(n)+1)
	}
	buf, err := record.AppendBatch(nil, h, recs)
	require.NoError(t, err)
	ld.append(buf, pid >= 0)
}

// end appends a marker of pid's transaction with its bumped epoch, as the
// coordinator's WriteTxnMarkers will, through log.EncodeLeaderBatch.
func (ld *leader) end(pid int64, typ record.ControlType) {
	t := ld.t
	t.Helper()
	ld.bump(pid)
	require.NoError(t, ld.s.CheckMarker(pid, ld.epochs[pid], 1))
	h, recs := record.MarkerBatch(pid, ld.epochs[pid], ld.ts, record.ControlRecord{Type: typ, CoordinatorEpoch: 1})
	ld.ts += 10
	v, err := log.EncodeLeaderBatch(nil, h, recs)
	require.NoError(t, err)
	ld.append(v.Batch(), true)
}

func (ld *leader) append(buf []byte, idempotent bool) {
	t := ld.t
	t.Helper()
	_, leo, err := ld.l.Append(buf, 1)
	require.NoError(t, err)
	b, ok, err := producerstate.FromBatch(record.Batch(buf))
	require.NoError(t, err)
	require.Equal(t, idempotent, ok)
	ld.s.Apply(b)
	require.Equal(t, leo, ld.s.Offset())
	ld.states[leo] = ld.s.Clone()
}

// bump starts a new epoch of pid.
func (ld *leader) bump(pid int64) {
	ld.epochs[pid]++
	ld.seqs[pid] = 0
}

// run appends n batches from producers 1..5 and non-idempotent ones.
func (ld *leader) run(r *rand.Rand, n int) {
	ld.t.Helper()
	for range n {
		pid := r.Int64N(6)
		if pid == 0 {
			pid = -1
		}
		ld.produce(pid, 1+r.IntN(6))
	}
}

// runTxn appends n batches from producers 1..5 and non-idempotent ones,
// mixing transactional batches, commits and aborts; a producer in a
// transaction writes only transactional batches.
func (ld *leader) runTxn(r *rand.Rand, n int, inTxn map[int64]bool) {
	ld.t.Helper()
	for range n {
		pid := r.Int64N(6)
		switch {
		case pid == 0:
			ld.produce(-1, 1+r.IntN(6))
		case inTxn[pid] && r.IntN(3) == 0:
			ld.end(pid, record.ControlType(r.IntN(2)))
			inTxn[pid] = false
		case inTxn[pid] || r.IntN(2) == 0:
			ld.produceBatch(pid, 1+r.IntN(6), true)
			inTxn[pid] = true
		default:
			ld.produce(pid, 1+r.IntN(6))
		}
	}
}

// replayPrefixes replays the log batch by batch into a fresh state and
// requires it to equal the live state at every batch boundary.
func (ld *leader) replayPrefixes() {
	t := ld.t
	t.Helper()
	s := producerstate.New()
	n := 0
	for s.Offset() < ld.l.LEO() {
		data, err := ld.l.Read(s.Offset(), 1<<20)
		require.NoError(t, err)
		for rest := data; len(rest) > 0; n++ {
			b, next, err := record.ReadBatch(rest)
			require.NoError(t, err)
			rest = next
			pb, _, err := producerstate.FromBatch(b)
			require.NoError(t, err)
			s.Apply(pb)
			require.Equal(t, ld.states[s.Offset()], s, "replayed to %d", s.Offset())
		}
	}
	require.Equal(t, ld.l.LEO(), s.Offset())
	require.Equal(t, len(ld.states)-1, n, "every batch boundary compared")
}

func (ld *leader) snapshot() int64 {
	ld.t.Helper()
	leo := ld.l.LEO()
	require.NoError(ld.t, producerstate.WriteSnapshot(ld.dir, ld.s.Clone(), leo))
	return leo
}

func (ld *leader) rebuild() *producerstate.State {
	ld.t.Helper()
	s, _ := ld.rebuildFrom()
	return s
}

// rebuildFrom rebuilds the state, and says from which snapshot.
func (ld *leader) rebuildFrom() (*producerstate.State, int64) {
	ld.t.Helper()
	s, snap, err := producerstate.Rebuild(ld.dir, ld.l)
	require.NoError(ld.t, err)
	return s, snap
}

func (ld *leader) snapshots() []int64 {
	ld.t.Helper()
	offs, err := producerstate.Snapshots(ld.dir)
	require.NoError(ld.t, err)
	return offs
}

func TestProducerStateRebuild(t *testing.T) {
	t.Parallel()
	cfg := log.Config{SegmentBytes: 2048}
	ld := newLeader(t, cfg)
	r := rand.New(rand.NewPCG(5, 6))
	ld.run(r, 20)
	snap1 := ld.snapshot()
	ld.run(r, 10)
	ld.bump(2)
	ld.run(r, 10)
	snap2 := ld.snapshot()
	ld.bump(4)
	ld.run(r, 25)
	require.GreaterOrEqual(t, len(ld.l.ClosedSegments()), 5, "the batches span several segments")
	require.Equal(t, 5, ld.s.Len())

	// A restart rebuilds the state from the newest snapshot and the log.
	ld.restart(cfg)
	s, from := ld.rebuildFrom()
	require.Equal(t, ld.s, s)
	require.Equal(t, snap2, from)
	require.Equal(t, []int64{snap1, snap2}, ld.snapshots(), "a rebuild keeps the snapshots at or below the LEO")

	// From the older snapshot, and from the log alone.
	require.NoError(t, producerstate.DeleteAbove(ld.dir, snap1))
	s, from = ld.rebuildFrom()
	require.Equal(t, ld.s, s)
	require.Equal(t, snap1, from)
	require.NoError(t, producerstate.DeleteAbove(ld.dir, -1))
	s, from = ld.rebuildFrom()
	require.Equal(t, ld.s, s)
	require.Zero(t, from)
}

func TestProducerStateRebuildAfterTruncation(t *testing.T) {
	t.Parallel()
	cfg := log.Config{SegmentBytes: 2048}
	ld := newLeader(t, cfg)
	r := rand.New(rand.NewPCG(7, 8))
	ld.run(r, 20)
	snap1 := ld.snapshot()
	ld.run(r, 15)
	cut := ld.l.LEO() // a batch boundary between the snapshots
	ld.run(r, 15)
	snap2 := ld.snapshot()
	ld.run(r, 10)

	// A follower truncating to the leader's end of its epoch. The offset
	// falls inside the batch at cut, which is removed whole.
	require.NoError(t, ld.l.TruncateTo(cut+1))
	require.Equal(t, cut, ld.l.LEO())
	require.NoError(t, producerstate.DeleteAbove(ld.dir, ld.l.LEO()))
	require.Equal(t, []int64{snap1}, ld.snapshots())
	got := ld.rebuild()
	require.Equal(t, ld.states[cut], got)

	// The log grows past the deleted snapshot's offset with a different
	// history (another leader's); the state follows it, not the old one.
	ld.s = got
	for pid := range int64(6) {
		ld.bump(pid)
	}
	ld.run(r, 40)
	require.Greater(t, ld.l.LEO(), snap2)
	require.Equal(t, ld.s, ld.rebuild())

	// Rebuild itself removes snapshots above the LEO, such as one taken
	// before a crash that lost the unflushed tail of the log.
	snap3 := ld.snapshot()
	ld.run(r, 1)
	snap4 := ld.snapshot()
	require.NoError(t, ld.l.TruncateTo(snap3))
	require.Equal(t, ld.states[snap3], ld.rebuild())
	require.Equal(t, []int64{snap1, snap3}, ld.snapshots())
	require.NotContains(t, ld.snapshots(), snap4)
}

// retentionRace runs retention before the first Read, as a concurrent
// retention pass would.
type retentionRace struct {
	*log.Log
	t    *testing.T
	done bool
}

func (r *retentionRace) Read(offset int64, maxBytes int) ([]byte, error) {
	if !r.done {
		r.done = true
		n, err := r.ApplyRetention()
		require.NoError(r.t, err)
		require.Positive(r.t, n)
	}
	return r.Log.Read(offset, maxBytes)
}

func TestProducerStateRebuildAfterRetention(t *testing.T) {
	t.Parallel()
	cfg := log.Config{RetentionBytes: 1}
	ld := newLeader(t, cfg)
	ld.produce(1, 3) // producer 1 writes only in the first segment
	ld.produce(2, 3)
	ld.produce(-1, 2)
	require.NoError(t, ld.l.Roll())
	snap := ld.snapshot() // at the roll, as the broker does
	ld.produce(2, 1)
	ld.produce(3, 4)
	ld.produce(2, 2)

	// Retention deletes the first segment; the snapshot at the new log start
	// still knows producer 1.
	n, err := ld.l.ApplyRetention()
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, snap, ld.l.LogStartOffset())
	require.NoError(t, producerstate.DeleteBelow(ld.dir, ld.l.LogStartOffset()))
	require.Equal(t, []int64{snap}, ld.snapshots())
	require.Equal(t, ld.s, ld.rebuild())

	// Without the snapshot, only the batches still in the log are known.
	require.NoError(t, producerstate.DeleteAbove(ld.dir, -1))
	got := ld.rebuild()
	require.Equal(t, ld.l.LEO(), got.Offset())
	require.Equal(t, []int64{2, 3}, got.ProducerIDs())
	for _, pid := range got.ProducerIDs() {
		want, _ := ld.s.Producer(pid)
		want.Batches = slices.DeleteFunc(want.Batches, func(b producerstate.Batch) bool { return b.FirstOffset < snap })
		e, _ := got.Producer(pid)
		require.Equal(t, want, e)
	}

	// Retention running during a rebuild: the reads skip to the new start.
	require.NoError(t, ld.l.Roll())
	ld.produce(3, 1)
	got, _, err = producerstate.Rebuild(ld.dir, &retentionRace{Log: ld.l, t: t})
	require.NoError(t, err)
	require.Equal(t, []int64{3}, got.ProducerIDs())
	e, _ := got.Producer(3)
	require.Len(t, e.Batches, 1)
	require.Equal(t, ld.l.LEO(), got.Offset())
}

// Rebuild from the log equals applying as the batches were appended, with
// transactions: at every prefix of a log of mixed batches and markers,
// from every snapshot, after a restart and after truncations.
func TestProducerStateRebuildTransactions(t *testing.T) {
	t.Parallel()
	cfg := log.Config{SegmentBytes: 2048}
	ld := newLeader(t, cfg)
	r := rand.New(rand.NewPCG(11, 12))
	inTxn := map[int64]bool{}
	var snaps []int64
	for range 6 {
		ld.runTxn(r, 15, inTxn)
		snaps = append(snaps, ld.snapshot())
	}
	ld.runTxn(r, 15, inTxn)
	require.GreaterOrEqual(t, len(ld.l.ClosedSegments()), 5, "the batches span several segments")
	require.NotEmpty(t, ld.s.AbortedTransactions(0, ld.l.LEO()), "the log has aborted transactions")
	_, ok := ld.s.FirstUnstableOffset()
	require.True(t, ok, "and an ongoing one at the end")
	ld.replayPrefixes()

	// A restart rebuilds from each snapshot in turn, and from the log alone.
	ld.restart(cfg)
	for i := len(snaps) - 1; i >= 0; i-- {
		require.NoError(t, producerstate.DeleteAbove(ld.dir, snaps[i]))
		s, from := ld.rebuildFrom()
		require.Equal(t, snaps[i], from)
		require.Equal(t, ld.s, s, "from the snapshot at %d", snaps[i])
	}
	require.NoError(t, producerstate.DeleteAbove(ld.dir, -1))
	s, from := ld.rebuildFrom()
	require.Zero(t, from)
	require.Equal(t, ld.s, s)

	// Truncations to batch boundaries (largest first) rebuild the state of
	// that prefix, snapshots above it removed.
	ld.snapshot()
	leos := slices.Sorted(maps.Keys(ld.states))
	var cuts []int64
	for _, leo := range slices.Backward(leos) {
		if leo > 0 && r.IntN(8) == 0 {
			cuts = append(cuts, leo)
		}
	}
	for _, cut := range cuts {
		require.NoError(t, ld.l.TruncateTo(cut))
		require.Equal(t, ld.states[cut], ld.rebuild(), "truncated to %d", cut)
	}
}
