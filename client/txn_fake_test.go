package client_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/record"
)

// txnScript drives the TransactionalProducer's state machine, routing
// and error handling on the package's cluster: faults (a Hook per
// procedure) record what the producer sent and answer the refusals a
// test scripts; the rest the real coordinator answers. It sees the
// calls of transactional ids that start with its topic's name (the
// tests do not run in parallel: InitProducerId names no topic).
type txnScript struct {
	topic string // two partitions

	mu        sync.Mutex
	inits     []*sluicev1.InitProducerIdRequest
	ends      []*sluicev1.EndTransactionRequest
	offsets   []*sluicev1.TxnCommitOffsetsRequest
	batches   []fakeTxnBatch
	pids      []int64            // the producer ids the coordinator answered
	accepted  map[int32]int      // InitProducerId calls answered, per broker
	noForward map[int32][]string // the Sluice-No-Forward header of each InitProducerId and EndTransaction, per broker

	// Scripted refusals, each used once (nil: answer normally).
	initErrs    []error
	endErrs     []error
	produceErrs []error
	offsetErrs  []error
}

type fakeTxnBatch struct {
	txnID         string
	transactional bool
	pid           int64
	epoch         int16
	seq           int32
	records       int
}

func pop(errs *[]error) error {
	if len(*errs) == 0 {
		return nil
	}
	err := (*errs)[0]
	*errs = (*errs)[1:]
	return err
}

// newTxnScript creates topic (two partitions) and watches the
// transactional calls of ids starting with its name.
func newTxnScript(t *testing.T, topic string) *txnScript {
	t.Helper()
	createTopic(t, topic, 2, nil)
	f := &txnScript{topic: topic, accepted: map[int32]int{}, noForward: map[int32][]string{}}
	ours := func(id string) bool { return strings.HasPrefix(id, topic) }
	addFault(t, localcluster.Fault{Procedure: "InitProducerId", Hook: func(_ context.Context, c localcluster.Call) error {
		req := c.Request.(*sluicev1.InitProducerIdRequest)
		if !ours(req.GetTransactionalId()) {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.noForward[c.Broker] = append(f.noForward[c.Broker], c.Header.Get("Sluice-No-Forward"))
		f.inits = append(f.inits, req)
		return pop(&f.initErrs)
	}, Answer: func(c localcluster.Call, res proto.Message) {
		if !ours(c.Request.(*sluicev1.InitProducerIdRequest).GetTransactionalId()) {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.accepted[c.Broker]++
		f.pids = append(f.pids, res.(*sluicev1.InitProducerIdResponse).GetProducerId())
	}})
	addFault(t, localcluster.Fault{Procedure: "EndTransaction", Hook: func(_ context.Context, c localcluster.Call) error {
		req := c.Request.(*sluicev1.EndTransactionRequest)
		if !ours(req.GetTransactionalId()) {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.noForward[c.Broker] = append(f.noForward[c.Broker], c.Header.Get("Sluice-No-Forward"))
		f.ends = append(f.ends, req)
		return pop(&f.endErrs)
	}})
	addFault(t, localcluster.Fault{Procedure: "TxnCommitOffsets", Hook: func(_ context.Context, c localcluster.Call) error {
		req := c.Request.(*sluicev1.TxnCommitOffsetsRequest)
		if !ours(req.GetTransactionalId()) {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.offsets = append(f.offsets, req)
		return pop(&f.offsetErrs)
	}})
	addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Hook: func(_ context.Context, c localcluster.Call) error {
		req := c.Request.(*sluicev1.ProduceManyRequest)
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := pop(&f.produceErrs); err != nil {
			return err
		}
		for _, p := range req.GetPartitions() {
			b, _, err := record.ReadBatch(p.GetBatches().GetData())
			if err != nil {
				return connect.NewError(connect.CodeInvalidArgument, err)
			}
			h := b.Header()
			f.batches = append(f.batches, fakeTxnBatch{txnID: req.GetTransactionalId(), transactional: h.Attributes.Transactional(),
				pid: h.ProducerID, epoch: h.ProducerEpoch, seq: h.BaseSequence, records: int(h.LastOffsetDelta) + 1})
		}
		return nil
	}})
	return f
}

func (f *txnScript) sentBatches() []fakeTxnBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeTxnBatch(nil), f.batches...)
}

func (f *txnScript) endCalls() []*sluicev1.EndTransactionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sluicev1.EndTransactionRequest(nil), f.ends...)
}

func (f *txnScript) initCalls() []*sluicev1.InitProducerIdRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sluicev1.InitProducerIdRequest(nil), f.inits...)
}

func (f *txnScript) offsetCalls() []*sluicev1.TxnCommitOffsetsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sluicev1.TxnCommitOffsetsRequest(nil), f.offsets...)
}

func (f *txnScript) script(fn func(f *txnScript)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// txnRefusal is a refusal with a TransactionError detail.
func txnRefusal(code connect.Code, reason sluicev1.TransactionError_Reason) error {
	ce := connect.NewError(code, errors.New(reason.String()))
	d, _ := connect.NewErrorDetail(&sluicev1.TransactionError{Reason: reason})
	ce.AddDetail(d)
	return ce
}

// rec is a record of value v for topic.
func rec(topic, v string) *client.Record {
	return &client.Record{Topic: topic, Key: []byte(v), Value: []byte(v)}
}

// The transactional producer's calls in and out of order: each call that
// does not fit the state says so (ErrTransactionState) and does nothing.
func TestTxnFakeStateMachine(t *testing.T) {
	f := newTxnScript(t, fresh("txnfake-1"))
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-1", client.WithTransactionTimeout(10*time.Second))
	require.NoError(t, err)
	require.Len(t, f.initCalls(), 1)
	require.Equal(t, f.topic+"-job-1", f.initCalls()[0].GetTransactionalId())
	require.Equal(t, int64(10000), f.initCalls()[0].GetTransactionTimeoutMs())

	require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionState, "Commit without Begin")
	require.ErrorContains(t, tp.Commit(ctx), "no transaction is open: call Begin first")
	require.ErrorIs(t, tp.Abort(ctx), client.ErrTransactionState, "Abort without Begin")
	err = tp.ProduceSync(ctx, rec(f.topic, "outside"))
	require.ErrorIs(t, err, client.ErrTransactionState, "Produce outside a transaction")
	var de *client.DeliveryError
	require.ErrorAs(t, err, &de)
	require.ErrorIs(t, tp.SendOffsets(ctx, client.GroupMember{Group: "g"}, []client.PartitionOffset{{Topic: "t", Offset: 1}}), client.ErrTransactionState)

	require.NoError(t, tp.Begin())
	err = tp.Begin()
	require.ErrorIs(t, err, client.ErrTransactionState, "Begin twice")
	require.ErrorContains(t, err, "a transaction is open")

	// An empty transaction ends without a round trip (nothing to end).
	require.NoError(t, tp.Commit(ctx))
	require.Empty(t, f.endCalls())
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.Abort(ctx))
	require.Empty(t, f.endCalls())

	require.Empty(t, f.sentBatches(), "nothing was sent outside a transaction")
	require.NoError(t, tp.Close(ctx))
	require.ErrorIs(t, tp.Begin(), client.ErrProducerClosed)
}

// Batches of a transaction carry the transactional bit, the producer id
// and epoch, and the transactional id on the request; the commit ends
// with the producer's epoch, and the next transaction uses the epoch the
// coordinator answered, with sequences from 0 again.
func TestTxnFakeCommitBumpsEpochAndRestartsSequences(t *testing.T) {
	f := newTxnScript(t, fresh("txnfake-2"))
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-2", client.WithManualPartitioner(), client.WithMaxInFlight(1))
	require.NoError(t, err)
	pid, epoch := tp.ProducerID()
	require.Equal(t, f.pids, []int64{pid}, "the id the coordinator answered")
	require.Equal(t, int16(0), epoch)
	// A member of a real group, whose offsets the transaction commits.
	g, err := c.NewGroupConsumer(ctx, f.topic+"-g", []string{f.topic})
	require.NoError(t, err)
	defer g.Close(ctx)
	member := g.Member()

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a"), rec(f.topic, "b")))
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "c")))
	require.NoError(t, tp.SendOffsets(ctx, member, []client.PartitionOffset{{Topic: f.topic, Partition: 1, Offset: 0}}))
	require.NoError(t, tp.Commit(ctx))
	ends := f.endCalls()
	require.Len(t, ends, 1)
	require.True(t, ends[0].GetCommit())
	require.Equal(t, int32(0), ends[0].GetProducerEpoch())
	require.Len(t, f.offsetCalls(), 1)
	require.Equal(t, f.topic+"-job-2", f.offsetCalls()[0].GetTransactionalId())
	require.Equal(t, pid, f.offsetCalls()[0].GetProducerId())
	require.Equal(t, member.MemberID, f.offsetCalls()[0].GetMemberId())
	require.Equal(t, member.MemberEpoch, f.offsetCalls()[0].GetMemberEpoch())
	_, epoch = tp.ProducerID()
	require.Equal(t, int16(1), epoch)

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "d")))
	require.NoError(t, tp.Abort(ctx))
	ends = f.endCalls()
	require.Len(t, ends, 2)
	require.False(t, ends[1].GetCommit())
	require.Equal(t, int32(1), ends[1].GetProducerEpoch())

	// One request at a time: the batches arrive in order, numbered on
	// from 0 in each epoch.
	type numbered struct {
		epoch int16
		seq   int32
	}
	var got, want []numbered
	seq := map[int16]int32{}
	for _, b := range f.sentBatches() {
		require.Equal(t, f.topic+"-job-2", b.txnID)
		require.True(t, b.transactional)
		require.Equal(t, pid, b.pid)
		got = append(got, numbered{b.epoch, b.seq})
		want = append(want, numbered{b.epoch, seq[b.epoch]})
		seq[b.epoch] += int32(b.records)
	}
	require.Equal(t, want, got)
	require.Equal(t, map[int16]int32{0: 3, 1: 1}, seq, "epoch 0 had a, b, c; epoch 1, from sequence 0, d")
	require.NoError(t, tp.Close(ctx))
}

// A record that fails makes the transaction abortable: Commit does not
// end it, says ErrTransactionAbortable, and so does every call until
// Abort; after Abort the producer goes on.
func TestTxnFakeFailedRecordMakesCommitAbortable(t *testing.T) {
	f := newTxnScript(t, fresh("txnfake-3"))
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-3")
	require.NoError(t, err)
	require.NoError(t, tp.Begin())
	f.script(func(f *txnScript) {
		f.produceErrs = []error{connect.NewError(connect.CodePermissionDenied, errors.New("no produce scope"))}
	})
	err = tp.ProduceSync(ctx, rec(f.topic, "x"))
	require.Error(t, err)
	err = tp.Commit(ctx)
	require.ErrorIs(t, err, client.ErrTransactionAbortable)
	require.ErrorContains(t, err, "no produce scope")
	require.Empty(t, f.endCalls(), "a failed transaction is not committed")
	require.ErrorIs(t, tp.ProduceSync(ctx, rec(f.topic, "y")), client.ErrTransactionAbortable)
	require.ErrorIs(t, tp.SendOffsets(ctx, client.GroupMember{Group: "g"}, []client.PartitionOffset{{Topic: "t", Offset: 1}}), client.ErrTransactionAbortable)
	require.ErrorIs(t, tp.Begin(), client.ErrTransactionState)
	require.NoError(t, tp.Abort(ctx))
	require.Len(t, f.endCalls(), 1)
	require.False(t, f.endCalls()[0].GetCommit())

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "z")))
	require.NoError(t, tp.Commit(ctx))
	require.NoError(t, tp.Close(ctx))
}

// Refusals are classified by their TransactionError reason: fenced is
// fatal (the producer closes, every call says so), abortable makes the
// transaction abort, concurrent transactions is retried.
func TestTxnFakeErrorClassification(t *testing.T) {
	ctx := t.Context()
	t.Run("fenced at commit", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-4"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-4")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
		f.script(func(f *txnScript) {
			f.endErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		err = tp.Commit(ctx)
		require.ErrorIs(t, err, client.ErrProducerFenced)
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Begin(), client.ErrProducerFenced, "fenced is for good")
		require.ErrorIs(t, tp.ProduceSync(ctx, rec(f.topic, "b")), client.ErrProducerFenced, "Produce after fenced")
		require.ErrorIs(t, tp.Abort(ctx), client.ErrProducerFenced)
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("fenced at a partition", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-5"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-5")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		f.script(func(f *txnScript) {
			f.produceErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		// The partition's refusal makes the transaction abortable (it may
		// be the coordinator's abort at the timeout); the coordinator's
		// answer to Abort says fenced.
		err = tp.ProduceSync(ctx, rec(f.topic, "a"))
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		require.NotErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionAbortable)
		require.Empty(t, f.endCalls())
		f.script(func(f *txnScript) {
			f.endErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		err = tp.Abort(ctx)
		require.ErrorIs(t, err, client.ErrProducerFenced)
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Begin(), client.ErrProducerFenced)
	})
	t.Run("a partition's fenced epoch after a timeout: abort goes on", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-6"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-5b")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("fenced epoch"))
		d, _ := connect.NewErrorDetail(&sluicev1.ProducerError{Reason: sluicev1.ProducerError_REASON_PRODUCER_FENCED})
		ce.AddDetail(d)
		f.script(func(f *txnScript) { f.produceErrs = []error{ce} })
		require.ErrorIs(t, tp.ProduceSync(ctx, rec(f.topic, "a")), client.ErrTransactionAbortable)
		require.NoError(t, tp.Abort(ctx), "the coordinator answers the abort of a timed-out transaction with the next epoch")
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "b")))
		require.NoError(t, tp.Commit(ctx))
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("timed out: abortable, abort gives the epoch", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-7"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-6")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
		f.script(func(f *txnScript) {
			f.endErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE)}
		})
		err = tp.Commit(ctx)
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		require.NotErrorIs(t, err, client.ErrTransactionFatal)
		require.NoError(t, tp.Abort(ctx))
		_, epoch := tp.ProducerID()
		require.Equal(t, int16(1), epoch)
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("concurrent transactions and unavailable are retried", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-8"))
		f.script(func(f *txnScript) {
			f.initErrs = []error{
				txnRefusal(connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS),
				connect.NewError(connect.CodeUnavailable, errors.New("coordinator loading")),
			}
		})
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-7")
		require.NoError(t, err)
		require.Len(t, f.initCalls(), 3)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
		f.script(func(f *txnScript) {
			f.endErrs = []error{txnRefusal(connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS)}
		})
		require.NoError(t, tp.Commit(ctx))
		require.Len(t, f.endCalls(), 2)
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("fatal at init", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-9"))
		f.script(func(f *txnScript) {
			f.initErrs = []error{txnRefusal(connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT)}
		})
		c := newClient(t)
		_, err := c.NewTransactionalProducer(ctx, f.topic+"-job-8")
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.Len(t, f.initCalls(), 1, "not retried")
	})
	t.Run("group refusal of offsets is abortable", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-10"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-9")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("stale member epoch"))
		d, _ := connect.NewErrorDetail(&sluicev1.GroupError{Reason: sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH})
		ce.AddDetail(d)
		f.script(func(f *txnScript) { f.offsetErrs = []error{ce} })
		err = tp.SendOffsets(ctx, client.GroupMember{Group: "g", MemberID: "m", MemberEpoch: 1}, []client.PartitionOffset{{Topic: "in", Offset: 5}})
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		require.Len(t, f.offsetCalls(), 1, "a group's refusal is not retried")
		require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionAbortable)
		require.NoError(t, tp.Abort(ctx))
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("commit outcome unknown: only Commit again", func(t *testing.T) {
		f := newTxnScript(t, fresh("txnfake-11"))
		c := newClient(t)
		tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-10")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
		f.script(func(f *txnScript) {
			f.endErrs = []error{connect.NewError(connect.CodePermissionDenied, errors.New("key revoked mid-commit"))}
		})
		err = tp.Commit(ctx)
		require.ErrorContains(t, err, "outcome unknown, call Commit again")
		require.ErrorIs(t, tp.Abort(ctx), client.ErrTransactionState)
		require.ErrorIs(t, tp.Begin(), client.ErrTransactionState)
		require.NoError(t, tp.Commit(ctx))
		require.Len(t, f.endCalls(), 2)
		require.True(t, f.endCalls()[1].GetCommit())
		require.NoError(t, tp.Close(ctx))
	})
}

// Close aborts a transaction left open.
func TestTxnFakeCloseAbortsOpenTransaction(t *testing.T) {
	f := newTxnScript(t, fresh("txnfake-12"))
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-11")
	require.NoError(t, err)
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
	require.NoError(t, tp.Close(ctx))
	require.Len(t, f.endCalls(), 1)
	require.False(t, f.endCalls()[0].GetCommit())
}

func TestTxnNextOffsets(t *testing.T) {
	recs := []*client.Record{
		{Topic: "a", Partition: 0, Offset: 4, LeaderEpoch: 1},
		{Topic: "a", Partition: 1, Offset: 9},
		{Topic: "a", Partition: 0, Offset: 5, LeaderEpoch: 2},
		{Topic: "b", Partition: 0, Offset: 0},
	}
	require.Equal(t, []client.PartitionOffset{
		{Topic: "a", Partition: 0, Offset: 6, LeaderEpoch: 2},
		{Topic: "a", Partition: 1, Offset: 10},
		{Topic: "b", Partition: 0, Offset: 1},
	}, client.NextOffsets(recs))
	require.Empty(t, client.NextOffsets(nil))
}

// The producer calls the coordinator that FindTransactionCoordinator
// names with Sluice-No-Forward, and follows a NotLeader to where the
// coordinator moved; later calls go there directly.
func TestTxnFakeCoordinatorMoved(t *testing.T) {
	f := newTxnScript(t, fresh("txnfake-moved"))
	// FindTransactionCoordinator names a broker that is not the
	// coordinator (the coordinator moved since): that broker refuses with
	// NotLeader naming the coordinator.
	var mu sync.Mutex
	coordinator, first := int32(0), int32(0)
	addFault(t, localcluster.Fault{Procedure: "FindTransactionCoordinator", Answer: func(_ localcluster.Call, res proto.Message) {
		r := res.(*sluicev1.FindTransactionCoordinatorResponse)
		mu.Lock()
		defer mu.Unlock()
		coordinator = r.GetBrokerId()
		for _, b := range cluster.Brokers() {
			if b.ID != coordinator {
				first, r.BrokerId, r.Address = b.ID, b.ID, b.Addr
				return
			}
		}
	}})
	c := newClient(t)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, f.topic+"-job-12")
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.NotZero(t, first)
	f.mu.Lock()
	require.Equal(t, 1, f.accepted[coordinator], "the init reached the coordinator after the NotLeader")
	require.Zero(t, f.accepted[first])
	f.mu.Unlock()
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec(f.topic, "a")))
	require.NoError(t, tp.Commit(ctx))
	require.Len(t, f.endCalls(), 1)
	f.mu.Lock()
	require.Equal(t, []string{"1"}, f.noForward[first], "one refused init, then nothing more here")
	require.Equal(t, []string{"1", "1"}, f.noForward[coordinator])
	f.mu.Unlock()
	require.NoError(t, tp.Close(ctx))
}
