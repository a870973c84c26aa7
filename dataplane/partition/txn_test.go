package partition

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// txnBatch is one transactional batch of n records of producer pid at
// epoch, from sequence seq.
func txnBatch(t *testing.T, pid int64, epoch int16, seq int32, n int) []byte {
	t.Helper()
	recs := make([]record.Record, n)
	for i := range recs {
		recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte("txn")}
	}
	b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: time.Now().UnixMilli(),
		ProducerID: pid, ProducerEpoch: epoch, BaseSequence: seq}, recs)
	require.NoError(t, err)
	return b
}

// markerBatch is a marker of producer pid at epoch, stamped at offset off
// and leader epoch leaderEpoch, as a leader would have written it.
func markerBatch(t *testing.T, pid int64, epoch int16, commit bool, coordEpoch int32, off int64, leaderEpoch int32) []byte {
	t.Helper()
	typ := record.ControlAbort
	if commit {
		typ = record.ControlCommit
	}
	h, recs := record.MarkerBatch(pid, epoch, time.Now().UnixMilli(), record.ControlRecord{Type: typ, CoordinatorEpoch: coordEpoch})
	b, err := record.AppendBatch(nil, h, recs)
	require.NoError(t, err)
	record.Batch(b).SetLeader(off, leaderEpoch)
	return b
}

// verifier is a fake transaction coordinator's verification: it counts
// calls and answers err.
type verifier struct {
	calls atomic.Int32
	err   atomic.Pointer[error]
}

func (v *verifier) verify(context.Context, int64, int16) error {
	v.calls.Add(1)
	if e := v.err.Load(); e != nil {
		return *e
	}
	return nil
}

func (v *verifier) refuse(err error) { v.err.Store(&err) }

// produceTxn produces producer pid's transactional batch of n records at
// epoch and seq to p with acks=all, verified by v.
func produceTxn(p *Replica, v *verifier, pid int64, epoch int16, seq int32, n int, t *testing.T) (ProduceResult, error) {
	t.Helper()
	return p.ProduceTransactional(context.Background(), []log.ValidBatch{validBatch(t, txnBatch(t, pid, epoch, seq, n))}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, v.verify)
}

func transactionReason(t *testing.T, err error) sluicev1.TransactionError_Reason {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(connecterr.ToConnect(err), &ce), "a Connect error: %v", err)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if te, ok := v.(*sluicev1.TransactionError); ok {
				return te.GetReason()
			}
		}
	}
	t.Fatalf("no TransactionError detail in %v", err)
	return 0
}

func producerOf(t *testing.T, p *Replica, pid int64) producerstate.Entry {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.pstate.Producer(pid)
	require.True(t, ok)
	return e
}

func txnState(p *Replica) ([]producerstate.OngoingTxn, []producerstate.AbortedTxn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pstate.OngoingTransactions(), p.pstate.AbortedTransactions(0, p.log.LEO())
}

// TestPartitionWriteMarker: a leader appends a commit marker with acks=all
// at its offset; the producer's transaction ends, its epoch is the
// marker's, its verification is forgotten (the next transaction verifies
// again) and a late batch of the ended epoch is fenced.
func TestPartitionWriteMarker(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	res, err := produceTxn(p, v, 9, 0, 0, 3, t)
	require.NoError(t, err)
	require.EqualValues(t, 0, res.Base)
	_, err = produceTxn(p, v, 9, 0, 3, 2, t)
	require.NoError(t, err)
	require.EqualValues(t, 1, v.calls.Load(), "verified once per epoch")
	ongoing, _ := txnState(p)
	require.Equal(t, []producerstate.OngoingTxn{{ProducerID: 9, Epoch: 0, FirstOffset: 0}}, ongoing)

	off, err := p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1, CoordinatorEpoch: 2, Commit: true}, 10*time.Second)
	require.NoError(t, err)
	require.EqualValues(t, 5, off)
	require.EqualValues(t, 6, p.log.LEO())
	require.EqualValues(t, 6, p.HighWatermark(), "acks=all: the ISR (the leader alone) has it")
	ongoing, aborted := txnState(p)
	require.Empty(t, ongoing)
	require.Empty(t, aborted)
	e := producerOf(t, p, 9)
	require.EqualValues(t, 1, e.Epoch)
	require.EqualValues(t, 2, e.CoordinatorEpoch)

	// A delayed batch of the ended transaction is refused even though
	// the coordinator (wrongly) vouches for it.
	_, err = produceTxn(p, v, 9, 0, 5, 1, t)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, transactionReason(t, err))
	require.EqualValues(t, 1, v.calls.Load(), "a fenced epoch is refused without asking")

	// The next transaction (the marker's epoch) verifies again.
	res, err = produceTxn(p, v, 9, 1, 0, 1, t)
	require.NoError(t, err)
	require.EqualValues(t, 6, res.Base)
	require.EqualValues(t, 2, v.calls.Load())
}

// TestPartitionWriteMarkerFencing: a marker with an older producer epoch,
// or from an older coordinator epoch than the producer's last marker, is
// refused (FailedPrecondition, TransactionError PRODUCER_FENCED) and
// nothing is appended; writing the same marker twice is harmless.
func TestPartitionWriteMarkerFencing(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	_, err := produceTxn(p, v, 9, 3, 0, 2, t)
	require.NoError(t, err)

	leo := p.log.LEO()
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 2, CoordinatorEpoch: 1}, 10*time.Second)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, transactionReason(t, err))
	require.ErrorContains(t, err, "producer epoch 2 is older than 3")
	require.Equal(t, leo, p.log.LEO(), "nothing appended")

	abort := Marker{ProducerID: 9, ProducerEpoch: 4, CoordinatorEpoch: 5}
	off, err := p.WriteMarker(context.Background(), abort, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, leo, off)
	want := []producerstate.AbortedTxn{{ProducerID: 9, FirstOffset: 0, LastOffset: 2, LastStableOffset: 3}}
	_, aborted := txnState(p)
	require.Equal(t, want, aborted)

	// The coordinator's retry: appended again, ends nothing.
	off2, err := p.WriteMarker(context.Background(), abort, 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, off+1, off2)
	ongoing, aborted := txnState(p)
	require.Empty(t, ongoing)
	require.Equal(t, want, aborted)
	require.EqualValues(t, 4, producerOf(t, p, 9).Epoch)

	// A replaced coordinator (epoch 4 < 5) is fenced.
	leo = p.log.LEO()
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 4, CoordinatorEpoch: 4}, 10*time.Second)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, transactionReason(t, err))
	require.ErrorIs(t, err, producerstate.ErrCoordinatorFenced)
	require.Equal(t, leo, p.log.LEO())

	// A follower does not write markers.
	f := newFollower(t, newTestHost(t), false)
	_, err = f.WriteMarker(context.Background(), abort, time.Second)
	_, ok := notLeaderDetail(err)
	require.True(t, ok, "NotLeader: %v", err)
}

// TestPartitionMarkerOnFollower: a follower applies the markers it
// replicates to its producer state (an abort recorded, the transaction
// ended, the epoch bumped), as the leader did.
func TestPartitionMarkerOnFollower(t *testing.T) {
	t.Parallel()
	p := newFollower(t, newTestHost(t), false) // [0, 10) at epoch 3
	data := txnBatch(t, 9, 0, 0, 2)
	record.Batch(data).SetLeader(10, 3)
	other := txnBatch(t, 11, 0, 0, 1)
	record.Batch(other).SetLeader(12, 3)
	data = append(append(data, other...), markerBatch(t, 9, 1, false, 0, 13, 3)...)
	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{Batches: data, HighWatermark: 10}))
	require.EqualValues(t, 14, p.log.LEO())
	ongoing, aborted := txnState(p)
	require.Equal(t, []producerstate.OngoingTxn{{ProducerID: 11, Epoch: 0, FirstOffset: 12}}, ongoing)
	require.Equal(t, []producerstate.AbortedTxn{{ProducerID: 9, FirstOffset: 10, LastOffset: 13, LastStableOffset: 12}}, aborted)
	require.EqualValues(t, 1, producerOf(t, p, 9).Epoch)

	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{Batches: markerBatch(t, 11, 1, true, 0, 14, 3), HighWatermark: 14}))
	ongoing, aborted = txnState(p)
	require.Empty(t, ongoing)
	require.Len(t, aborted, 1)
}

// TestPartitionMarkersSurviveRestart: a replica reopened after a crash
// rebuilds its transactions from the log: the aborted one and the one
// still open, and the producers' epochs.
func TestPartitionMarkersSurviveRestart(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	_, err := produceTxn(p, v, 9, 0, 0, 2, t)
	require.NoError(t, err)
	_, err = produceTxn(p, v, 11, 0, 0, 1, t)
	require.NoError(t, err)
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1, CoordinatorEpoch: 0}, 10*time.Second)
	require.NoError(t, err)
	_, err = produceTxn(p, v, 9, 1, 0, 1, t)
	require.NoError(t, err)
	wantOngoing, wantAborted := txnState(p)
	require.Len(t, wantOngoing, 2)
	require.Len(t, wantAborted, 1)

	crashed := t.TempDir()
	copyDir(t, p.Dir(), crashed)
	p2 := soleLeader(t, crashed, 1<<20)
	ongoing, aborted := txnState(p2)
	require.Equal(t, wantOngoing, ongoing)
	require.Equal(t, wantAborted, aborted)
	require.EqualValues(t, 1, producerOf(t, p2, 9).Epoch)

	// And from a snapshot (a clean close) with the log after it.
	require.NoError(t, p2.SnapshotProducers(time.Now(), true))
	_, err = p2.WriteMarker(context.Background(), Marker{ProducerID: 11, ProducerEpoch: 1, CoordinatorEpoch: 0}, 10*time.Second)
	require.NoError(t, err)
	wantOngoing, wantAborted = txnState(p2)
	require.Len(t, wantAborted, 2)
	again := t.TempDir()
	copyDir(t, p2.Dir(), again)
	p3 := soleLeader(t, again, 1<<20)
	ongoing, aborted = txnState(p3)
	require.Equal(t, wantOngoing, ongoing)
	require.Equal(t, wantAborted, aborted)
}

// TestPartitionTransactionalVerification: a transactional batch is
// appended only once the verifier vouches for its producer and epoch: a
// refusal is the produce's answer as it is (nothing appended, nothing
// cached), Produce without a verifier refuses transactional batches, and
// a batch whose verification raced the marker that ended its transaction
// is fenced (KIP-890: the marker bumped the epoch).
func TestPartitionTransactionalVerification(t *testing.T) {
	t.Parallel()
	p := soleLeader(t, t.TempDir(), 1<<20)
	v := &verifier{}
	refusal := transactionError(derr.TransactionAbortable, derr.TxnReasonTransactionAbortable, errors.New("the transaction timed out"))
	v.refuse(refusal)
	_, err := produceTxn(p, v, 9, 0, 0, 1, t)
	require.Equal(t, refusal, err)
	_, err = produceTxn(p, v, 9, 0, 0, 1, t)
	require.Equal(t, refusal, err)
	require.EqualValues(t, 2, v.calls.Load(), "a refusal is not cached")
	require.EqualValues(t, 0, p.log.LEO())

	_, err = p.Produce(context.Background(), []log.ValidBatch{validBatch(t, txnBatch(t, 9, 0, 0, 1))}, sluicev1.Acks_ACKS_ALL, time.Second, nil)
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.ErrorIs(t, err, producerstate.ErrTransactionNotVerified)
	require.EqualValues(t, 0, p.log.LEO())

	// The verification is in flight when the coordinator ends the
	// transaction (its marker bumps the epoch to 1).
	inVerify, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, pid int64, epoch int16) error {
		close(inVerify)
		<-release
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.ProduceTransactional(context.Background(), []log.ValidBatch{validBatch(t, txnBatch(t, 9, 0, 0, 1))}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil, slow)
		done <- err
	}()
	<-inVerify
	_, err = p.WriteMarker(context.Background(), Marker{ProducerID: 9, ProducerEpoch: 1}, 10*time.Second)
	require.NoError(t, err)
	close(release)
	err = <-done
	require.Equal(t, connect.CodeFailedPrecondition, codeOf(err))
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, transactionReason(t, err))
	require.EqualValues(t, 1, p.log.LEO(), "only the marker")

	// Concurrent first batches of one epoch share one verification.
	v = &verifier{}
	errs := make(chan error, 2)
	for seq := range int32(2) {
		go func() {
			_, err := produceTxn(p, v, 12, 0, seq, 1, t)
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.EqualValues(t, 1, v.calls.Load())
}

// TestPartitionUndecodableMarkerStopsTheBroker: a control batch whose
// control record does not decode (replicated from a leader that wrote it
// so) cannot be applied to the producer state, which would then differ
// from what a rebuild makes of the log: the replica reports it through
// FailStop, as a failed rebuild does.
func TestPartitionUndecodableMarkerStopsTheBroker(t *testing.T) {
	t.Parallel()
	h := newTestHost(t)
	stopped := make(chan error, 1)
	h.FailStop = func(_ string, _ int32, err error) {
		select {
		case stopped <- err:
		default:
		}
	}
	p := newFollower(t, h, false) // [0, 10) at epoch 3
	hdr, _ := record.MarkerBatch(9, 1, time.Now().UnixMilli(), record.ControlRecord{Type: record.ControlCommit})
	bad, err := record.AppendBatch(nil, hdr, []record.Record{{Key: []byte{0}, Value: []byte{0}}})
	require.NoError(t, err)
	record.Batch(bad).SetLeader(10, 3)
	require.NoError(t, applyNext(p, &sluicev1.FetchReplicaResponse{Batches: bad, HighWatermark: 10}))
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, errMarkerUndecodable)
	case <-time.After(10 * time.Second):
		t.Fatal("an undecodable marker did not stop the broker")
	}
}
