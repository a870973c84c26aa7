package producerstate_test

import (
	"cmp"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/record"
)

// txnDriver applies batches at consecutive offsets after the leader's
// checks, tracking each producer's next sequence and epoch as a client
// would (a marker bumps the epoch and restarts the sequence at 0).
type txnDriver struct {
	t      *testing.T
	s      *producerstate.State
	off    int64
	seqs   map[int64]int32
	epochs map[int64]int16
}

func newTxnDriver(t *testing.T) *txnDriver {
	return &txnDriver{t: t, s: producerstate.New(), seqs: map[int64]int32{}, epochs: map[int64]int16{}}
}

// data checks and applies a batch of n records of pid, transactional or
// not (transactional ones are verified).
func (d *txnDriver) data(pid int64, n int32, txn bool) {
	d.t.Helper()
	epoch, base := d.epochs[pid], d.seqs[pid]
	last := producerstate.LastSequence(base, n)
	var err error
	if txn {
		_, err = d.s.CheckTransactional(pid, epoch, base, last, true)
	} else {
		_, err = d.s.Check(pid, epoch, base, last)
	}
	require.NoError(d.t, err)
	b := batch(pid, epoch, base, n, d.off, d.off)
	b.Transactional = txn
	d.s.Apply(b)
	d.off += int64(n)
	d.seqs[pid] = producerstate.LastSequence(base, n+1)
}

// end checks and applies a marker of pid with the bumped epoch.
func (d *txnDriver) end(pid int64, typ record.ControlType) {
	d.t.Helper()
	d.epochs[pid]++
	d.seqs[pid] = 0
	require.NoError(d.t, d.s.CheckMarker(pid, d.epochs[pid], 3))
	d.s.Apply(marker(pid, d.epochs[pid], typ, d.off, d.off))
	d.off++
}

func fuo(s *producerstate.State) int64 {
	off, ok := s.FirstUnstableOffset()
	if !ok {
		return -1
	}
	return off
}

func TestProducerStateTransactions(t *testing.T) {
	t.Parallel()
	const txn, plain, commit, abort = "txn", "plain", "commit", "abort"
	steps := []struct {
		op      string
		pid     int64
		n       int32
		wantFUO int64   // -1: none
		ongoing []int64 // producers with ongoing transactions, oldest first
	}{
		{txn, 1, 2, 0, []int64{1}},         // 0..1
		{txn, 2, 3, 0, []int64{1, 2}},      // 2..4
		{txn, 3, 1, 0, []int64{1, 2, 3}},   // 5
		{txn, 1, 1, 0, []int64{1, 2, 3}},   // 6: p1's transaction goes on
		{plain, 4, 2, 0, []int64{1, 2, 3}}, // 7..8
		{commit, 2, 0, 0, []int64{1, 3}},   // 9: not the oldest: the FUO stays
		{abort, 1, 0, 5, []int64{3}},       // 10: the oldest ends: the FUO moves to p3's
		{txn, 1, 2, 5, []int64{3, 1}},      // 11..12: epoch 1, sequence 0
		{abort, 3, 0, 11, []int64{1}},      // 13
		{txn, 2, 1, 11, []int64{1, 2}},     // 14
		{commit, 1, 0, 14, []int64{2}},     // 15
		{commit, 2, 0, -1, nil},            // 16
		{commit, 2, 0, -1, nil},            // 17: a marker without a transaction ends nothing
		{plain, 3, 1, -1, nil},             // 18: after its abort p3 writes outside a transaction
		{txn, 4, 1, 19, []int64{4}},        // 19: p4 goes from plain to transactional
		{abort, 4, 0, -1, nil},             // 20
	}
	d := newTxnDriver(t)
	for i, st := range steps {
		switch st.op {
		case txn, plain:
			d.data(st.pid, st.n, st.op == txn)
		case commit:
			d.end(st.pid, record.ControlCommit)
		case abort:
			d.end(st.pid, record.ControlAbort)
		}
		require.Equal(t, st.wantFUO, fuo(d.s), "step %d", i)
		var pids []int64
		for _, o := range d.s.OngoingTransactions() {
			pids = append(pids, o.ProducerID)
			e, _ := d.s.Producer(o.ProducerID)
			require.Equal(t, e.TxnFirstOffset, o.FirstOffset)
			require.Equal(t, e.Epoch, o.Epoch)
		}
		require.Equal(t, st.ongoing, pids, "step %d", i)
	}
	want := []producerstate.AbortedTxn{
		{ProducerID: 1, FirstOffset: 0, LastOffset: 10, LastStableOffset: 5},
		{ProducerID: 3, FirstOffset: 5, LastOffset: 13, LastStableOffset: 11},
		{ProducerID: 4, FirstOffset: 19, LastOffset: 20, LastStableOffset: 21},
	}
	require.Equal(t, want, d.s.AbortedTransactions(0, d.off))
	e, _ := d.s.Producer(2)
	require.Equal(t, int16(3), e.Epoch, "every marker bumps the epoch, even one that ends nothing")
	require.Empty(t, e.Batches)
	require.Equal(t, int32(3), e.CoordinatorEpoch)

	// The read_committed view of a range: the aborted transactions that
	// overlap it.
	ranges := []struct {
		from, to int64
		want     []producerstate.AbortedTxn
	}{
		{0, 1, want[:1]},
		{0, 5, want[:1]},
		{0, 6, want[:2]},
		{10, 11, want[:2]},
		{11, 13, want[1:2]},
		{14, 19, nil},
		{14, 20, want[2:]},
		{20, 21, want[2:]},
		{21, 30, nil},
	}
	for _, r := range ranges {
		require.Equal(t, r.want, d.s.AbortedTransactions(r.from, r.to), "[%d, %d)", r.from, r.to)
	}
	d.s.DropAbortedBelow(11)
	require.Equal(t, want[1:], d.s.AbortedTransactions(0, d.off))
	d.s.DropAbortedBelow(13)
	require.Equal(t, want[1:], d.s.AbortedTransactions(0, d.off), "the marker at 13 is not below 13")
	d.s.DropAbortedBelow(100)
	require.Empty(t, d.s.AbortedTransactions(0, d.off))
}

// txnCheckState holds:
//   - producer 1, epoch 0: an ongoing transaction, sequences 0..4 at 0..4;
//   - producer 2: a committed transaction (epoch 0, sequences 0..1 at
//     5..6), its marker at 7 with epoch 1 and coordinator epoch 3;
//   - producer 3, epoch 0: a non-transactional batch, sequence 0 at 8.
func txnCheckState() *producerstate.State {
	s := producerstate.New()
	s.Apply(txnBatch(1, 0, 0, 5, 0, 1))
	s.Apply(txnBatch(2, 0, 0, 2, 5, 1))
	s.Apply(marker(2, 1, record.ControlCommit, 7, 1))
	s.Apply(batch(3, 0, 0, 1, 8, 1))
	return s
}

func TestProducerStateCheckTransactional(t *testing.T) {
	t.Parallel()
	const (
		plain = iota
		unverified
		verified
	)
	tests := []struct {
		name      string
		pid       int64
		epoch     int16
		base      int32
		last      int32
		kind      int
		want      producerstate.Result
		wantErr   error
		wantSeq   *producerstate.SequenceError
		errSubstr string
	}{
		{name: "plain batch during a transaction", pid: 1, base: 5, last: 5, kind: plain,
			wantErr: producerstate.ErrInvalidTxnState, errSubstr: "transaction from offset 0 is ongoing"},
		{name: "unverified in the transaction", pid: 1, base: 5, last: 5, kind: unverified,
			wantErr: producerstate.ErrTransactionNotVerified},
		{name: "verified in the transaction", pid: 1, base: 5, last: 5, kind: verified},
		{name: "verified retry", pid: 1, base: 0, last: 4, kind: verified,
			want: producerstate.Result{Duplicate: true, FirstOffset: 0, LastOffset: 4}},
		{name: "verified gap", pid: 1, base: 7, last: 7, kind: verified, wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 1, Expected: 5, Got: 7}},
		// KIP-890: the marker bumped producer 2's epoch; a late batch of the
		// ended transaction is fenced, verified or not.
		{name: "late batch, verified", pid: 2, epoch: 0, base: 2, last: 2, kind: verified,
			wantErr: producerstate.ErrProducerFenced, errSubstr: "epoch 0 is older than 1"},
		{name: "late batch, unverified", pid: 2, epoch: 0, base: 2, last: 2, kind: unverified,
			wantErr: producerstate.ErrProducerFenced},
		{name: "late plain batch", pid: 2, epoch: 0, base: 2, last: 2, kind: plain,
			wantErr: producerstate.ErrProducerFenced},
		{name: "next transaction at 0", pid: 2, epoch: 1, base: 0, last: 3, kind: verified},
		{name: "next transaction not at 0", pid: 2, epoch: 1, base: 2, last: 3, kind: verified,
			wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 2, Epoch: 1, Got: 2, NewEpoch: true}},
		{name: "plain after the transaction", pid: 2, epoch: 1, base: 0, last: 0, kind: plain},
		{name: "a higher epoch at 0", pid: 2, epoch: 5, base: 0, last: 0, kind: verified},
		{name: "plain producer begins a transaction", pid: 3, base: 1, last: 1, kind: verified},
		{name: "plain producer, unverified", pid: 3, base: 1, last: 1, kind: unverified,
			wantErr: producerstate.ErrTransactionNotVerified},
		{name: "unknown producer, verified", pid: 9, base: 0, last: 0, kind: verified},
		{name: "unknown producer, unverified", pid: 9, base: 0, last: 0, kind: unverified,
			wantErr: producerstate.ErrTransactionNotVerified},
		{name: "unknown producer not at 0", pid: 9, base: 3, last: 3, kind: verified,
			wantErr: producerstate.ErrOutOfOrderSequence,
			wantSeq: &producerstate.SequenceError{ProducerID: 9, Got: 3, Unknown: true}},
		{name: "negative producer", pid: -1, kind: verified, wantErr: producerstate.ErrInvalidProducer},
		{name: "negative sequence", pid: 1, base: -1, last: 0, kind: verified, wantErr: producerstate.ErrInvalidSequence},
	}
	s := txnCheckState()
	before := s.Clone()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got producerstate.Result
			var err error
			if tt.kind == plain {
				got, err = s.Check(tt.pid, tt.epoch, tt.base, tt.last)
			} else {
				got, err = s.CheckTransactional(tt.pid, tt.epoch, tt.base, tt.last, tt.kind == verified)
			}
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			if tt.wantSeq != nil {
				var se *producerstate.SequenceError
				require.ErrorAs(t, err, &se)
				require.Equal(t, tt.wantSeq, se)
			}
			if tt.errSubstr != "" {
				require.ErrorContains(t, err, tt.errSubstr)
			}
		})
	}
	require.Equal(t, before, s, "Check changes nothing")
}

func TestProducerStateCheckMarker(t *testing.T) {
	t.Parallel()
	s := txnCheckState()
	tests := []struct {
		name             string
		pid              int64
		epoch            int16
		coordinatorEpoch int32
		wantErr          error
	}{
		{"older producer epoch", 2, 0, 3, producerstate.ErrProducerFenced},
		{"older coordinator epoch", 2, 1, 2, producerstate.ErrCoordinatorFenced},
		{"same epochs (a retried marker)", 2, 1, 3, nil},
		{"bumped epochs", 2, 2, 4, nil},
		{"first marker of a producer", 1, 1, 0, nil},
		{"unknown producer", 9, 0, 0, nil},
		{"negative producer", -1, 0, 0, producerstate.ErrInvalidProducer},
		{"negative epoch", 1, -1, 0, producerstate.ErrInvalidProducer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := s.CheckMarker(tt.pid, tt.epoch, tt.coordinatorEpoch)
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
}

// The KIP-890 case: a batch of transaction T, delayed until after T's
// marker, must not land in the next transaction of the same producer.
// The marker's bumped epoch fences it; without the bump (KIP-98's
// markers keep the epoch) the sequence check alone would take it as the
// next batch of T+1 (the coordinator's verification is the other half of
// the defence, outside this package).
func TestProducerStateLateBatchAfterMarker(t *testing.T) {
	t.Parallel()
	for _, bump := range []bool{true, false} {
		s := producerstate.New()
		s.Apply(txnBatch(7, 0, 0, 1, 0, 1)) // T: sequence 0; sequence 1 is delayed
		markerEpoch := int16(0)
		if bump {
			markerEpoch = 1
		}
		s.Apply(marker(7, markerEpoch, record.ControlAbort, 1, 1)) // T aborted
		if !bump {
			// Without the bump, the delayed batch of T continues T's
			// sequence and would be appended as T+1's: KIP-98's hole.
			res, err := s.CheckTransactional(7, 0, 1, 1, true)
			require.NoError(t, err)
			require.False(t, res.Duplicate)
			continue
		}
		// T+1 begins in the new epoch at sequence 0.
		_, err := s.CheckTransactional(7, markerEpoch, 0, 0, true)
		require.NoError(t, err)
		s.Apply(txnBatch(7, 1, 0, 1, 2, 1))
		_, err = s.CheckTransactional(7, 0, 1, 1, true)
		require.ErrorIs(t, err, producerstate.ErrProducerFenced)
		require.Equal(t, int64(2), fuo(s), "T+1 is the ongoing transaction, T's batch did not join it")
	}
}

func TestProducerStateExpireKeepsOngoingTransactions(t *testing.T) {
	t.Parallel()
	s := txnCheckState()
	require.Equal(t, 2, s.Expire(1000), "producers 2 and 3 expire")
	require.Equal(t, []int64{1}, s.ProducerIDs(), "producer 1's transaction is ongoing")
	require.Equal(t, int64(0), fuo(s))
	s.Apply(marker(1, 1, record.ControlCommit, 9, 5))
	require.Equal(t, 1, s.Expire(1000))
	require.Zero(t, s.Len())
}

func TestProducerStateFromBatch(t *testing.T) {
	t.Parallel()
	c := record.ControlRecord{Type: record.ControlAbort, CoordinatorEpoch: 6}
	h, recs := record.MarkerBatch(11, 4, 1234, c)
	h.BaseOffset = 50
	buf, err := record.AppendBatch(nil, h, recs)
	require.NoError(t, err)
	b, ok, err := producerstate.FromBatch(record.Batch(buf))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, producerstate.Batch{ProducerID: 11, ProducerEpoch: 4, BaseSequence: -1, LastSequence: -1,
		FirstOffset: 50, LastOffset: 50, MaxTimestamp: 1234, Transactional: true, Control: true, Marker: c}, b)
	// FromHeader cannot read the marker's type: it keeps treating control
	// batches as non-idempotent.
	hb, ok := producerstate.FromHeader(record.Batch(buf).Header())
	require.False(t, ok)
	require.Equal(t, int64(-1), hb.ProducerID)

	// A data batch is FromHeader's, with its transactional bit.
	buf, err = record.AppendBatch(nil, record.BatchHeader{BaseOffset: 60, ProducerID: 11, ProducerEpoch: 5,
		Attributes: record.AttrTransactional}, []record.Record{{Value: []byte("x")}})
	require.NoError(t, err)
	b, ok, err = producerstate.FromBatch(record.Batch(buf))
	require.NoError(t, err)
	require.True(t, ok)
	require.True(t, b.Transactional)
	require.False(t, b.Control)
	hb, _ = producerstate.FromHeader(record.Batch(buf).Header())
	require.Equal(t, hb, b)

	// A control batch whose record is not a control record.
	h.Attributes = record.AttrControl
	buf, err = record.AppendBatch(nil, h, []record.Record{{Key: []byte("k"), Value: []byte("v")}})
	require.NoError(t, err)
	_, _, err = producerstate.FromBatch(record.Batch(buf))
	require.ErrorIs(t, err, record.ErrInvalidControlRecord)
}

// model is the obvious version of the transaction tracking: the first
// offset of each producer's ongoing transaction and the list of aborted
// ones.
type model struct {
	ongoing map[int64]int64
	aborted []producerstate.AbortedTxn
}

// TestProducerStateTransactionModel drives random transactional, plain and
// marker batches of a few producers through Check and Apply and compares
// the state with the model after every step, and checks that a snapshot
// and a Clone reproduce it.
func TestProducerStateTransactionModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 99))
		d := newTxnDriver(t)
		m := model{ongoing: map[int64]int64{}}
		for step := range 300 {
			pid := 1 + r.Int64N(4)
			_, inTxn := m.ongoing[pid]
			switch k := r.IntN(10); {
			case k < 4:
				if !inTxn {
					m.ongoing[pid] = d.off
				}
				d.data(pid, 1+r.Int32N(4), true)
			case k < 6:
				if inTxn {
					// A plain batch is refused while the transaction is ongoing.
					_, err := d.s.Check(pid, d.epochs[pid], d.seqs[pid], d.seqs[pid])
					require.ErrorIs(t, err, producerstate.ErrInvalidTxnState)
					continue
				}
				d.data(pid, 1+r.Int32N(4), false)
			case k < 9:
				typ := record.ControlType(r.IntN(2))
				oldEpoch := d.epochs[pid]
				if first, ok := m.ongoing[pid]; ok {
					delete(m.ongoing, pid)
					if typ == record.ControlAbort {
						lso := d.off + 1
						if len(m.ongoing) > 0 {
							lso = slices.Min(slices.Collect(maps.Values(m.ongoing)))
						}
						m.aborted = append(m.aborted, producerstate.AbortedTxn{ProducerID: pid, FirstOffset: first, LastOffset: d.off, LastStableOffset: lso})
					}
				}
				d.end(pid, typ)
				_, err := d.s.CheckTransactional(pid, oldEpoch, 0, 0, true)
				require.ErrorIs(t, err, producerstate.ErrProducerFenced, "the marker fences the old epoch")
			default:
				below := d.off - r.Int64N(40)
				d.s.DropAbortedBelow(below)
				m.aborted = slices.DeleteFunc(m.aborted, func(a producerstate.AbortedTxn) bool { return a.LastOffset < below })
			}
			// Compare with the model.
			var want []producerstate.OngoingTxn
			for p, first := range m.ongoing {
				want = append(want, producerstate.OngoingTxn{ProducerID: p, Epoch: d.epochs[p], FirstOffset: first})
			}
			slices.SortFunc(want, func(a, b producerstate.OngoingTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
			require.Equal(t, want, nilIfEmpty(d.s.OngoingTransactions()), "seed %d step %d", seed, step)
			wantFUO := int64(-1)
			if len(want) > 0 {
				wantFUO = want[0].FirstOffset
			}
			require.Equal(t, wantFUO, fuo(d.s))
			require.Equal(t, nilIfEmpty(m.aborted), d.s.AbortedTransactions(0, d.off))
			from, to := r.Int64N(d.off+1), r.Int64N(d.off+1)
			var overlap []producerstate.AbortedTxn
			for _, a := range m.aborted {
				if a.FirstOffset < to && a.LastOffset >= from {
					overlap = append(overlap, a)
				}
			}
			require.Equal(t, overlap, d.s.AbortedTransactions(from, to), "[%d, %d)", from, to)

			data, err := d.s.MarshalBinary()
			require.NoError(t, err)
			var got producerstate.State
			require.NoError(t, got.UnmarshalBinary(data))
			require.Equal(t, d.s, &got)
			require.Equal(t, d.s, d.s.Clone())
		}
	}
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
