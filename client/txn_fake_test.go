package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/record"
)

// fakeTxnBroker is one broker that is also every coordinator: enough of
// RecordService, TransactionService and GroupService to drive the
// TransactionalProducer's state machine, routing and error handling
// without a cluster. It records what it was sent and answers the errors
// a test scripts.
type fakeTxnBroker struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	sluicev1connect.UnimplementedTransactionServiceHandler
	sluicev1connect.UnimplementedGroupServiceHandler
	addr string

	mu      sync.Mutex
	pid     int64
	epoch   int32
	inits   []*sluicev1.InitProducerIdRequest
	ends    []*sluicev1.EndTransactionRequest
	offsets []*sluicev1.TxnCommitOffsetsRequest
	batches []fakeTxnBatch
	next    int64

	// movedTo, when set, is the coordinator's address: every
	// transactional call here is refused with NotLeader naming it.
	movedTo   string
	noForward []string // the Sluice-No-Forward header of each transactional call

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

func (f *fakeTxnBroker) GetMetadata(context.Context, *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	return connect.NewResponse(&sluicev1.GetMetadataResponse{
		Brokers: []*sluicev1.BrokerAddress{{Id: 1, Address: f.addr}},
		Topics: []*sluicev1.TopicMetadata{{Name: "t", Id: "t-id", Partitions: []*sluicev1.PartitionMetadata{
			{Partition: 0, Leader: 1}, {Partition: 1, Leader: 1},
		}}},
	}), nil
}

func (f *fakeTxnBroker) InitProducerId(_ context.Context, req *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.movedLocked(req.Header()); err != nil {
		return nil, err
	}
	f.inits = append(f.inits, req.Msg)
	if err := pop(&f.initErrs); err != nil {
		return nil, err
	}
	if f.pid == 0 {
		f.pid = 7
	} else {
		f.epoch++
	}
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: f.pid, ProducerEpoch: f.epoch}), nil
}

func (f *fakeTxnBroker) ProduceMany(_ context.Context, req *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := pop(&f.produceErrs); err != nil {
		return nil, err
	}
	var out []*sluicev1.ProducePartitionResult
	for _, p := range req.Msg.GetPartitions() {
		b, _, err := record.ReadBatch(p.GetBatches().GetData())
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, err)
		}
		h := b.Header()
		f.batches = append(f.batches, fakeTxnBatch{txnID: req.Msg.GetTransactionalId(), transactional: h.Attributes.Transactional(),
			pid: h.ProducerID, epoch: h.ProducerEpoch, seq: h.BaseSequence, records: int(h.LastOffsetDelta) + 1})
		out = append(out, &sluicev1.ProducePartitionResult{BaseOffset: f.next})
		f.next += int64(h.LastOffsetDelta) + 1
	}
	return connect.NewResponse(&sluicev1.ProduceManyResponse{Results: out}), nil
}

func (f *fakeTxnBroker) FindTransactionCoordinator(context.Context, *connect.Request[sluicev1.FindTransactionCoordinatorRequest]) (*connect.Response[sluicev1.FindTransactionCoordinatorResponse], error) {
	return connect.NewResponse(&sluicev1.FindTransactionCoordinatorResponse{BrokerId: 1, Address: f.addr}), nil
}

func (f *fakeTxnBroker) EndTransaction(_ context.Context, req *connect.Request[sluicev1.EndTransactionRequest]) (*connect.Response[sluicev1.EndTransactionResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.movedLocked(req.Header()); err != nil {
		return nil, err
	}
	f.ends = append(f.ends, req.Msg)
	if err := pop(&f.endErrs); err != nil {
		return nil, err
	}
	if req.Msg.GetProducerEpoch() == f.epoch {
		f.epoch++
	}
	return connect.NewResponse(&sluicev1.EndTransactionResponse{ProducerId: f.pid, ProducerEpoch: f.epoch}), nil
}

func (f *fakeTxnBroker) FindCoordinator(context.Context, *connect.Request[sluicev1.FindCoordinatorRequest]) (*connect.Response[sluicev1.FindCoordinatorResponse], error) {
	return connect.NewResponse(&sluicev1.FindCoordinatorResponse{BrokerId: 1, Address: f.addr}), nil
}

func (f *fakeTxnBroker) TxnCommitOffsets(_ context.Context, req *connect.Request[sluicev1.TxnCommitOffsetsRequest]) (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.offsets = append(f.offsets, req.Msg)
	if err := pop(&f.offsetErrs); err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.TxnCommitOffsetsResponse{}), nil
}

// movedLocked notes the call's No-Forward header and refuses it with
// NotLeader when the coordinator moved.
func (f *fakeTxnBroker) movedLocked(h http.Header) error {
	f.noForward = append(f.noForward, h.Get("Sluice-No-Forward"))
	if f.movedTo == "" {
		return nil
	}
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("not the transaction coordinator"))
	d, _ := connect.NewErrorDetail(&sluicev1.NotLeader{LeaderId: 2, LeaderAddress: f.movedTo})
	ce.AddDetail(d)
	return ce
}

func (f *fakeTxnBroker) sentBatches() []fakeTxnBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeTxnBatch(nil), f.batches...)
}

func (f *fakeTxnBroker) endCalls() []*sluicev1.EndTransactionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*sluicev1.EndTransactionRequest(nil), f.ends...)
}

func (f *fakeTxnBroker) script(fn func(f *fakeTxnBroker)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func startFakeTxn(t *testing.T, f *fakeTxnBroker) *client.Client {
	t.Helper()
	serveFakeTxn(t, f)
	c, err := client.New(t.Context(), "http://"+f.addr, client.Token("x"))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func serveFakeTxn(t *testing.T, f *fakeTxnBroker) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewRecordServiceHandler(f))
	mux.Handle(sluicev1connect.NewTransactionServiceHandler(f))
	mux.Handle(sluicev1connect.NewGroupServiceHandler(f))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// txnRefusal is a refusal with a TransactionError detail.
func txnRefusal(code connect.Code, reason sluicev1.TransactionError_Reason) error {
	ce := connect.NewError(code, errors.New(reason.String()))
	d, _ := connect.NewErrorDetail(&sluicev1.TransactionError{Reason: reason})
	ce.AddDetail(d)
	return ce
}

func rec(v string) *client.Record {
	return &client.Record{Topic: "t", Key: []byte(v), Value: []byte(v)}
}

// The transactional producer's calls in and out of order: each call that
// does not fit the state says so (ErrTransactionState) and does nothing.
func TestTxnFakeStateMachine(t *testing.T) {
	f := &fakeTxnBroker{}
	c := startFakeTxn(t, f)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, "job-1", client.WithTransactionTimeout(10*time.Second))
	require.NoError(t, err)
	require.Len(t, f.inits, 1)
	require.Equal(t, "job-1", f.inits[0].GetTransactionalId())
	require.Equal(t, int64(10000), f.inits[0].GetTransactionTimeoutMs())

	require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionState, "Commit without Begin")
	require.ErrorContains(t, tp.Commit(ctx), "no transaction is open: call Begin first")
	require.ErrorIs(t, tp.Abort(ctx), client.ErrTransactionState, "Abort without Begin")
	err = tp.ProduceSync(ctx, rec("outside"))
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
	f := &fakeTxnBroker{}
	c := startFakeTxn(t, f)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, "job-2", client.WithManualPartitioner(), client.WithMaxInFlight(1))
	require.NoError(t, err)
	pid, epoch := tp.ProducerID()
	require.Equal(t, int64(7), pid)
	require.Equal(t, int16(0), epoch)

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec("a"), rec("b")))
	require.NoError(t, tp.ProduceSync(ctx, rec("c")))
	require.NoError(t, tp.SendOffsets(ctx, client.GroupMember{Group: "g", MemberID: "m", MemberEpoch: 3}, []client.PartitionOffset{{Topic: "in", Partition: 2, Offset: 10}}))
	require.NoError(t, tp.Commit(ctx))
	ends := f.endCalls()
	require.Len(t, ends, 1)
	require.True(t, ends[0].GetCommit())
	require.Equal(t, int32(0), ends[0].GetProducerEpoch())
	require.Len(t, f.offsets, 1)
	require.Equal(t, "job-2", f.offsets[0].GetTransactionalId())
	require.Equal(t, int64(7), f.offsets[0].GetProducerId())
	require.Equal(t, "m", f.offsets[0].GetMemberId())
	require.Equal(t, int32(3), f.offsets[0].GetMemberEpoch())
	_, epoch = tp.ProducerID()
	require.Equal(t, int16(1), epoch)

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec("d")))
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
		require.Equal(t, "job-2", b.txnID)
		require.True(t, b.transactional)
		require.Equal(t, int64(7), b.pid)
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
	f := &fakeTxnBroker{}
	c := startFakeTxn(t, f)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, "job-3")
	require.NoError(t, err)
	require.NoError(t, tp.Begin())
	f.script(func(f *fakeTxnBroker) {
		f.produceErrs = []error{connect.NewError(connect.CodePermissionDenied, errors.New("no produce scope"))}
	})
	err = tp.ProduceSync(ctx, rec("x"))
	require.Error(t, err)
	err = tp.Commit(ctx)
	require.ErrorIs(t, err, client.ErrTransactionAbortable)
	require.ErrorContains(t, err, "no produce scope")
	require.Empty(t, f.endCalls(), "a failed transaction is not committed")
	require.ErrorIs(t, tp.ProduceSync(ctx, rec("y")), client.ErrTransactionAbortable)
	require.ErrorIs(t, tp.SendOffsets(ctx, client.GroupMember{Group: "g"}, []client.PartitionOffset{{Topic: "t", Offset: 1}}), client.ErrTransactionAbortable)
	require.ErrorIs(t, tp.Begin(), client.ErrTransactionState)
	require.NoError(t, tp.Abort(ctx))
	require.Len(t, f.endCalls(), 1)
	require.False(t, f.endCalls()[0].GetCommit())

	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec("z")))
	require.NoError(t, tp.Commit(ctx))
	require.NoError(t, tp.Close(ctx))
}

// Refusals are classified by their TransactionError reason: fenced is
// fatal (the producer closes, every call says so), abortable makes the
// transaction abort, concurrent transactions is retried.
func TestTxnFakeErrorClassification(t *testing.T) {
	ctx := t.Context()
	t.Run("fenced at commit", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-4")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec("a")))
		f.script(func(f *fakeTxnBroker) {
			f.endErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		err = tp.Commit(ctx)
		require.ErrorIs(t, err, client.ErrProducerFenced)
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Begin(), client.ErrProducerFenced, "fenced is for good")
		require.ErrorIs(t, tp.ProduceSync(ctx, rec("b")), client.ErrProducerFenced, "Produce after fenced")
		require.ErrorIs(t, tp.Abort(ctx), client.ErrProducerFenced)
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("fenced at a partition", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-5")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		f.script(func(f *fakeTxnBroker) {
			f.produceErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		// The partition's refusal makes the transaction abortable (it may
		// be the coordinator's abort at the timeout); the coordinator's
		// answer to Abort says fenced.
		err = tp.ProduceSync(ctx, rec("a"))
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		require.NotErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionAbortable)
		require.Empty(t, f.endCalls())
		f.script(func(f *fakeTxnBroker) {
			f.endErrs = []error{txnRefusal(connect.CodeFailedPrecondition, sluicev1.TransactionError_REASON_PRODUCER_FENCED)}
		})
		err = tp.Abort(ctx)
		require.ErrorIs(t, err, client.ErrProducerFenced)
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.ErrorIs(t, tp.Begin(), client.ErrProducerFenced)
	})
	t.Run("a partition's fenced epoch after a timeout: abort goes on", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-5b")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("fenced epoch"))
		d, _ := connect.NewErrorDetail(&sluicev1.ProducerError{Reason: sluicev1.ProducerError_REASON_PRODUCER_FENCED})
		ce.AddDetail(d)
		f.script(func(f *fakeTxnBroker) { f.produceErrs = []error{ce} })
		require.ErrorIs(t, tp.ProduceSync(ctx, rec("a")), client.ErrTransactionAbortable)
		require.NoError(t, tp.Abort(ctx), "the coordinator answers the abort of a timed-out transaction with the next epoch")
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec("b")))
		require.NoError(t, tp.Commit(ctx))
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("timed out: abortable, abort gives the epoch", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-6")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec("a")))
		f.script(func(f *fakeTxnBroker) {
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
		f := &fakeTxnBroker{}
		f.initErrs = []error{
			txnRefusal(connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS),
			connect.NewError(connect.CodeUnavailable, errors.New("coordinator loading")),
		}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-7")
		require.NoError(t, err)
		require.Len(t, f.inits, 3)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec("a")))
		f.script(func(f *fakeTxnBroker) {
			f.endErrs = []error{txnRefusal(connect.CodeUnavailable, sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS)}
		})
		require.NoError(t, tp.Commit(ctx))
		require.Len(t, f.endCalls(), 2)
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("fatal at init", func(t *testing.T) {
		f := &fakeTxnBroker{}
		f.initErrs = []error{txnRefusal(connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT)}
		c := startFakeTxn(t, f)
		_, err := c.NewTransactionalProducer(ctx, "job-8")
		require.ErrorIs(t, err, client.ErrTransactionFatal)
		require.Len(t, f.inits, 1, "not retried")
	})
	t.Run("group refusal of offsets is abortable", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-9")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("stale member epoch"))
		d, _ := connect.NewErrorDetail(&sluicev1.GroupError{Reason: sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH})
		ce.AddDetail(d)
		f.script(func(f *fakeTxnBroker) { f.offsetErrs = []error{ce} })
		err = tp.SendOffsets(ctx, client.GroupMember{Group: "g", MemberID: "m", MemberEpoch: 1}, []client.PartitionOffset{{Topic: "in", Offset: 5}})
		require.ErrorIs(t, err, client.ErrTransactionAbortable)
		require.Len(t, f.offsets, 1, "a group's refusal is not retried")
		require.ErrorIs(t, tp.Commit(ctx), client.ErrTransactionAbortable)
		require.NoError(t, tp.Abort(ctx))
		require.NoError(t, tp.Close(ctx))
	})
	t.Run("commit outcome unknown: only Commit again", func(t *testing.T) {
		f := &fakeTxnBroker{}
		c := startFakeTxn(t, f)
		tp, err := c.NewTransactionalProducer(ctx, "job-10")
		require.NoError(t, err)
		require.NoError(t, tp.Begin())
		require.NoError(t, tp.ProduceSync(ctx, rec("a")))
		f.script(func(f *fakeTxnBroker) {
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
	f := &fakeTxnBroker{}
	c := startFakeTxn(t, f)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, "job-11")
	require.NoError(t, err)
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec("a")))
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
	moved := &fakeTxnBroker{}
	serveFakeTxn(t, moved)
	first := &fakeTxnBroker{movedTo: moved.addr}
	c := startFakeTxn(t, first)
	ctx := t.Context()
	tp, err := c.NewTransactionalProducer(ctx, "job-12")
	require.NoError(t, err)
	require.Len(t, moved.inits, 1, "the init reached the coordinator after the NotLeader")
	require.Empty(t, first.inits)
	require.NoError(t, tp.Begin())
	require.NoError(t, tp.ProduceSync(ctx, rec("a")))
	require.NoError(t, tp.Commit(ctx))
	require.Len(t, moved.endCalls(), 1)
	first.mu.Lock()
	require.Equal(t, []string{"1"}, first.noForward, "one refused init, then nothing more here")
	first.mu.Unlock()
	moved.mu.Lock()
	require.Equal(t, []string{"1", "1"}, moved.noForward)
	moved.mu.Unlock()
	require.NoError(t, tp.Close(ctx))
}
