package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

func TestTxnStateTopicNameMatchesTheControlPlane(t *testing.T) {
	require.Equal(t, system.TransactionStateTopic, txnStateTopic)
}

// Every TransactionService procedure has an authorization rule.
func TestEveryTransactionProcedureHasARule(t *testing.T) {
	svcs := sluicev1.File_sluice_v1_transaction_proto.Services()
	for i := range svcs.Len() {
		methods := svcs.Get(i).Methods()
		for j := range methods.Len() {
			proc := "/" + string(svcs.Get(i).FullName()) + "/" + string(methods.Get(j).Name())
			_, ok := rules[proc]
			require.True(t, ok, "no rule for %s", proc)
		}
	}
}

// txnReason is err's TransactionError reason (0: none).
func txnReason(err error) sluicev1.TransactionError_Reason {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if te, ok := v.(*sluicev1.TransactionError); ok {
				return te.GetReason()
			}
		}
	}
	return 0
}

// notLeaderOf returns the NotLeader detail of a Connect error.
func notLeaderOf(err error) (*sluicev1.NotLeader, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if nl, ok := v.(*sluicev1.NotLeader); ok {
				return nl, true
			}
		}
	}
	return nil, false
}

// txnClients are a tenant's clients of one broker.
type txnClients struct {
	records sluicev1connect.RecordServiceClient
	txns    sluicev1connect.TransactionServiceClient
}

func (c *lagCluster) clientsOf(i int) txnClients {
	hc := h2c.Client()
	bearer := connect.WithInterceptors(tenants.Bearer(c.token))
	base := "http://" + c.brokerCfgs[i].Advertised()
	return txnClients{
		records: sluicev1connect.NewRecordServiceClient(hc, base, bearer),
		txns:    sluicev1connect.NewTransactionServiceClient(hc, base, bearer),
	}
}

// stopBroker stops broker i (its Run returns; its lease lapses later).
func (c *lagCluster) stopBroker(i int) {
	c.brokerMu.Lock()
	stop, done := c.brokerStop[i], c.brokerDone[i]
	c.brokerMu.Unlock()
	stop()
	<-done
}

// restartBroker starts broker i again on its data dir and address.
func (c *lagCluster) restartBroker(t *testing.T, i int) {
	t.Helper()
	bc := c.brokerCfgs[i]
	var ln net.Listener
	testenv.Wait(t, 10*time.Second, "the broker's port free again", func() error {
		var err error
		ln, err = net.Listen("tcp", bc.ListenAddr)
		return err
	})
	b, err := New(bc, c.brokerDeps)
	require.NoError(t, err)
	bctx, stop := context.WithCancel(c.runCtx)
	done := make(chan struct{})
	go func() { _ = b.Run(bctx, ln, nil); close(done) }()
	c.brokerMu.Lock()
	c.brokers[i], c.brokerStop[i], c.brokerDone[i] = b, stop, done
	c.brokerMu.Unlock()
}

// waitTopicLed waits until every broker but those in skip knows a leader
// of every partition of the topic, and each leader's replica leads.
func (c *lagCluster) waitTopicLed(t testing.TB, tenantID, topic string, skip ...int32) {
	t.Helper()
	testenv.Wait(t, 60*time.Second, "topic "+topic+" led", func() error {
		for _, b := range c.brokers {
			if contains(skip, b.cfg.ID) {
				continue
			}
			tm, ok := b.metadata().Topic(tenantID, topic)
			if !ok {
				return fmt.Errorf("broker %d does not know topic %s", b.cfg.ID, topic)
			}
			for _, pm := range tm.Partitions {
				if pm.Leader < 0 || contains(skip, pm.Leader) {
					return fmt.Errorf("broker %d: topic %s partition %d has leader %d", b.cfg.ID, topic, pm.Partition, pm.Leader)
				}
				if p := b.partition(tm.ID, pm.Partition); pm.Leader == b.cfg.ID && (p == nil || !p.LeadsAt(pm.LeaderEpoch)) {
					return fmt.Errorf("broker %d: topic %s partition %d: its replica does not lead yet", b.cfg.ID, topic, pm.Partition)
				}
			}
		}
		return nil
	})
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// txnCoordinatorIndex is the index of the broker coordinating id, in
// broker i's view.
func (c *lagCluster) txnCoordinatorIndex(t testing.TB, i int, id string) int {
	t.Helper()
	return c.txnCoordinatorIndexAt(t, i, c.tenantID, id)
}

// txnCoordinatorIndexAt is the index of the broker that broker i's view
// names the leader of tenantID's id's transaction-state partition,
// waiting while it names none (its leader's lease lapsed on a loaded
// machine, say, and the controller has not elected the next yet).
func (c *lagCluster) txnCoordinatorIndexAt(t testing.TB, i int, tenantID, id string) int {
	t.Helper()
	leader := int32(-1)
	testenv.Wait(t, 30*time.Second, "a leader of the transaction-state partition of "+id, func() error {
		tm, ok := c.brokers[i].metadata().Topic(systemTenantID, txnStateTopic)
		if !ok {
			return fmt.Errorf("broker %d does not know %s", i+1, txnStateTopic)
		}
		leader = tm.Partitions[txn.PartitionOf(tenantID, id, len(tm.Partitions))].Leader
		if leader < 1 {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return int(leader) - 1
}

// markers returns the control batches on the leader of a partition of
// the tenant's topic: producer id, epoch and commit.
func (c *lagCluster) markers(t *testing.T, topic string, partition int32) []string {
	t.Helper()
	tm, ok := c.brokers[0].metadata().Topic(c.tenantID, topic)
	require.True(t, ok)
	var out []string
	for _, b := range c.brokers {
		pm := b.metadata().ByID[tm.ID].Partitions[partition]
		if pm.Leader != b.cfg.ID {
			continue
		}
		l := b.partition(tm.ID, partition).Log()
		for off := l.LogStartOffset(); off < l.LEO(); {
			data, err := l.Read(off, 1<<20)
			require.NoError(t, err)
			if len(data) == 0 {
				break
			}
			for len(data) > 0 {
				batch, rest, err := record.ReadBatch(data)
				require.NoError(t, err)
				data = rest
				h := batch.Header()
				off = h.LastOffset() + 1
				if h.Attributes.Control() {
					cr, err := record.ReadControlRecord(batch)
					require.NoError(t, err)
					out = append(out, fmt.Sprintf("pid %d epoch %d commit %v", h.ProducerID, h.ProducerEpoch, cr.Type == record.ControlCommit))
				}
			}
		}
	}
	return out
}

// retry calls fn until it answers anything but Unavailable (a coordinator
// taking over, a topic not known everywhere yet) or NotEnoughReplicas.
func retry[T any](t *testing.T, what string, fn func() (T, error)) (T, error) {
	t.Helper()
	var res T
	var err error
	testenv.Wait(t, 60*time.Second, what, func() error {
		res, err = fn()
		if connect.CodeOf(err) == connect.CodeUnavailable || notEnoughReplicas(err) {
			return err
		}
		return nil
	})
	return res, err
}

// notEnoughReplicas reports whether err is an acks=all refusal for want of
// in-sync replicas (nothing written): a coordinator's write to its
// internal partition refused so while a follower catches up (the SDK,
// like Kafka's clients, sends the request again).
func notEnoughReplicas(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	for _, d := range ce.Details() {
		if v, verr := d.Value(); verr == nil {
			if _, ok := v.(*sluicev1.NotEnoughReplicas); ok {
				return true
			}
		}
	}
	return false
}

func initProducer(t *testing.T, tc txnClients, id string, timeoutMs int64) (*sluicev1.InitProducerIdResponse, error) {
	t.Helper()
	res, err := retry(t, "InitProducerId", func() (*connect.Response[sluicev1.InitProducerIdResponse], error) {
		return tc.records.InitProducerId(context.Background(), connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionalId: id, TransactionTimeoutMs: timeoutMs}))
	})
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func endTxn(t *testing.T, tc txnClients, id string, pid int64, epoch int32, commit bool) (*sluicev1.EndTransactionResponse, error) {
	t.Helper()
	res, err := retry(t, "EndTransaction", func() (*connect.Response[sluicev1.EndTransactionResponse], error) {
		return tc.txns.EndTransaction(context.Background(), connect.NewRequest(&sluicev1.EndTransactionRequest{TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, Commit: commit}))
	})
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func addPartitions(t *testing.T, tc txnClients, id string, pid int64, epoch int32, topic string, partitions ...int32) error {
	t.Helper()
	_, err := retry(t, "AddPartitionsToTransaction", func() (*connect.Response[sluicev1.AddPartitionsToTransactionResponse], error) {
		return tc.txns.AddPartitionsToTransaction(context.Background(), connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{
			TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch,
			Topics: []*sluicev1.TransactionPartitions{{Topic: topic, Partitions: partitions}},
		}))
	})
	return err
}

// TestBrokerTransactions drives the TransactionService of a real cluster
// (control plane and three brokers) through broker 1, which forwards to
// the coordinators: InitProducerId fences the previous incarnation, ends
// answer the bumped epoch and write their markers to the partitions'
// leaders, Describe and List show the state, partition leaders verify
// through the coordinator (here or remote), and bad input is refused.
func TestBrokerTransactions(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(0)
	ctx := context.Background()

	// A first incarnation, then a second: the first is fenced.
	first, err := initProducer(t, tc, "job-1", 0)
	require.NoError(t, err)
	require.EqualValues(t, 0, first.GetProducerEpoch())
	second, err := initProducer(t, tc, "job-1", 0)
	require.NoError(t, err)
	require.Equal(t, first.GetProducerId(), second.GetProducerId())
	require.EqualValues(t, 1, second.GetProducerEpoch())
	_, err = endTxn(t, tc, "job-1", first.GetProducerId(), first.GetProducerEpoch(), true)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(err))
	err = addPartitions(t, tc, "job-1", first.GetProducerId(), first.GetProducerEpoch(), "orders", 0)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(err), "%v", err)

	// A commit over both partitions answers the bumped epoch once each
	// partition's leader has its commit marker.
	pid, epoch := second.GetProducerId(), second.GetProducerEpoch()
	require.NoError(t, addPartitions(t, tc, "job-1", pid, epoch, "orders", 0, 1))
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job-1"}))
	require.NoError(t, err)
	require.Equal(t, sluicev1.TxnState_TXN_STATE_ONGOING, d.Msg.GetTransaction().GetState())
	require.Len(t, d.Msg.GetTransaction().GetTopics(), 1)
	require.Equal(t, "orders", d.Msg.GetTransaction().GetTopics()[0].GetTopic())
	require.Equal(t, []int32{0, 1}, d.Msg.GetTransaction().GetTopics()[0].GetPartitions())
	require.EqualValues(t, c.txnCoordinatorIndex(t, 0, "job-1")+1, d.Msg.GetTransaction().GetCoordinatorId())
	require.Positive(t, d.Msg.GetTransaction().GetStartTimeMs())
	end, err := endTxn(t, tc, "job-1", pid, epoch, true)
	require.NoError(t, err)
	require.Equal(t, pid, end.GetProducerId())
	require.EqualValues(t, 2, end.GetProducerEpoch())
	for _, p := range []int32{0, 1} {
		require.Equal(t, []string{fmt.Sprintf("pid %d epoch 2 commit true", pid)}, c.markers(t, "orders", p), "partition %d", p)
	}
	// A retry of the same end answers the same; the other decision is fenced.
	again, err := endTxn(t, tc, "job-1", pid, epoch, true)
	require.NoError(t, err)
	require.EqualValues(t, 2, again.GetProducerEpoch())
	_, err = endTxn(t, tc, "job-1", pid, epoch, false)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(err), "%v", err)

	// The next transaction, verified by partition leaders on every
	// broker (the coordinator's own and remote ones), then aborted.
	epoch = end.GetProducerEpoch()
	tm, _ := c.brokers[0].metadata().Topic(c.tenantID, "orders")
	h := http.Header{"Authorization": []string{"Bearer " + c.token}}
	verification := func(partition int32, epoch int32, verifyOnly bool) records.Verification {
		return records.Verification{TenantID: c.tenantID, TransactionalID: "job-1", TopicID: tm.ID, Partition: partition, ProducerID: pid, Epoch: int16(epoch), VerifyOnly: verifyOnly}
	}
	for _, b := range c.brokers {
		// Verify-only (a Kafka client that adds partitions itself):
		// partition 1 is not in the transaction yet, at the
		// coordinator's broker or any other.
		err := toConnect(b.verifyTransaction(ctx, h, verification(1, epoch, true)))
		require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "broker %d: %v", b.cfg.ID, err)
		require.Equal(t, sluicev1.TransactionError_REASON_INVALID_TXN_STATE, txnReason(err), "broker %d: %v", b.cfg.ID, err)
	}
	for _, b := range c.brokers {
		require.NoError(t, b.verifyTransaction(ctx, h, verification(1, epoch, false)), "broker %d", b.cfg.ID)
		require.NoError(t, b.verifyTransaction(ctx, h, verification(1, epoch, true)), "broker %d: verify-only, once added", b.cfg.ID)
	}
	coord := c.txnCoordinatorIndex(t, 0, "job-1")
	other := c.brokers[(coord+1)%3]
	err = toConnect(other.verifyTransaction(ctx, h, verification(1, epoch-1, false))) // as the produce's handler answers it
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(err), "a remote coordinator's refusal keeps its detail")
	err = toConnect(other.verifyTransaction(ctx, http.Header{}, verification(1, epoch, false)))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "the remote coordinator is called with the client's credential: %v", err)
	// Groups join over the wire too (what TxnCommitOffsets does).
	_, err = tc.txns.AddPartitionsToTransaction(ctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{TransactionalId: "job-1", ProducerId: pid, ProducerEpoch: epoch, Groups: []string{"billing"}}))
	require.NoError(t, err)
	_, err = tc.txns.AddPartitionsToTransaction(ctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{TransactionalId: "job-1", ProducerId: pid, ProducerEpoch: epoch, Groups: []string{""}}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "groups[0]: group: must not be empty")
	d, err = tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job-1"}))
	require.NoError(t, err)
	require.Equal(t, []string{"billing"}, d.Msg.GetTransaction().GetGroups())
	end, err = endTxn(t, tc, "job-1", pid, epoch, false)
	require.NoError(t, err)
	require.EqualValues(t, 3, end.GetProducerEpoch())
	require.Equal(t, []string{fmt.Sprintf("pid %d epoch 2 commit true", pid), fmt.Sprintf("pid %d epoch 3 commit false", pid)}, c.markers(t, "orders", 1))
	require.Len(t, c.markers(t, "orders", 0), 1, "partition 0 was not in the aborted transaction")

	d, err = tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job-1"}))
	require.NoError(t, err)
	require.Equal(t, sluicev1.TxnState_TXN_STATE_COMPLETE_ABORT, d.Msg.GetTransaction().GetState())
	require.EqualValues(t, 3, d.Msg.GetTransaction().GetProducerEpoch())
	_, err = initProducer(t, tc, "job-2", 5000)
	require.NoError(t, err)
	l, err := tc.txns.ListTransactions(ctx, connect.NewRequest(&sluicev1.ListTransactionsRequest{}))
	require.NoError(t, err)
	var ids []string
	for _, d := range l.Msg.GetTransactions() {
		ids = append(ids, fmt.Sprintf("%s %v %d", d.GetTransactionalId(), d.GetState(), d.GetTimeoutMs()))
	}
	require.Equal(t, []string{"job-1 TXN_STATE_COMPLETE_ABORT 60000", "job-2 TXN_STATE_EMPTY 5000"}, ids)

	// A topic deleted during a transaction: its markers are dropped, the
	// commit goes through.
	p2, err := initProducer(t, tc, "job-4", 0)
	require.NoError(t, err)
	_, err = c.topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "temp", PartitionCount: 1, ReplicationFactor: 3}))
	require.NoError(t, err)
	c.waitTopicLed(t, c.tenantID, "temp")
	require.NoError(t, addPartitions(t, tc, "job-4", p2.GetProducerId(), p2.GetProducerEpoch(), "temp", 0))
	require.NoError(t, addPartitions(t, tc, "job-4", p2.GetProducerId(), p2.GetProducerEpoch(), "orders", 0))
	_, err = c.topics.DeleteTopic(ctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: "temp"}))
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "the deletion known to the coordinator", func() error {
		if _, ok := c.brokers[c.txnCoordinatorIndex(t, 0, "job-4")].metadata().Topic(c.tenantID, "temp"); ok {
			return errors.New("still there")
		}
		return nil
	})
	endCtx, endCancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = tc.txns.EndTransaction(endCtx, connect.NewRequest(&sluicev1.EndTransactionRequest{TransactionalId: "job-4", ProducerId: p2.GetProducerId(), ProducerEpoch: p2.GetProducerEpoch(), Commit: true}))
	endCancel()
	require.NoError(t, err)
	require.Len(t, c.markers(t, "orders", 0), 2, "the other partition has its marker")

	// Without forwarding, a broker that does not coordinate names the one
	// that does.
	hc := h2c.Client()
	raw := sluicev1connect.NewTransactionServiceClient(hc, "http://"+other.cfg.Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
	req := connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job-1"})
	req.Header().Set(NoForwardHeader, "1")
	_, err = raw.DescribeTransaction(ctx, req)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	nl, ok := notLeaderOf(err)
	require.True(t, ok)
	require.EqualValues(t, coord+1, nl.GetLeaderId())
	fc, err := raw.FindTransactionCoordinator(ctx, connect.NewRequest(&sluicev1.FindTransactionCoordinatorRequest{TransactionalId: "job-1"}))
	require.NoError(t, err)
	require.EqualValues(t, coord+1, fc.Msg.GetBrokerId())
	require.Equal(t, c.brokerCfgs[coord].Advertised(), fc.Msg.GetAddress())

	// Bad input.
	long := strings.Repeat("x", 256)
	for _, bad := range []struct {
		name   string
		call   func() error
		code   connect.Code
		reason sluicev1.TransactionError_Reason
		msg    string
	}{
		{"empty id", func() error { _, err := endTxn(t, tc, "", pid, 3, true); return err }, connect.CodeInvalidArgument, 0, "transactional_id: must not be empty"},
		{"long id", func() error { _, err := initProducer(t, tc, long, 0); return err }, connect.CodeInvalidArgument, 0, "at most 255 bytes"},
		{"unprintable id", func() error { _, err := initProducer(t, tc, "a\x00b", 0); return err }, connect.CodeInvalidArgument, 0, "not printable"},
		{"negative timeout", func() error { _, err := initProducer(t, tc, "job-3", -1); return err }, connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT, "transaction_timeout_ms"},
		{"timeout over the cap", func() error { _, err := initProducer(t, tc, "job-3", (16 * time.Minute).Milliseconds()); return err }, connect.CodeInvalidArgument, sluicev1.TransactionError_REASON_INVALID_TIMEOUT, "--max-transaction-timeout 15m0s"},
		{"timeout without id", func() error {
			_, err := tc.records.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionTimeoutMs: 1000}))
			return err
		}, connect.CodeInvalidArgument, 0, "only with a transactional_id"},
		{"unknown id", func() error { _, err := endTxn(t, tc, "never-seen", 1, 0, true); return err }, connect.CodeNotFound, sluicev1.TransactionError_REASON_UNKNOWN_TRANSACTIONAL_ID, "unknown transactional id"},
		{"negative epoch", func() error { _, err := endTxn(t, tc, "job-1", pid, -1, true); return err }, connect.CodeInvalidArgument, 0, "producer_epoch"},
		{"unknown topic", func() error { return addPartitions(t, tc, "job-1", pid, 3, "nope", 0) }, connect.CodeNotFound, 0, `topic "nope" not found`},
		{"unknown partition", func() error { return addPartitions(t, tc, "job-1", pid, 3, "orders", 2) }, connect.CodeNotFound, 0, "partition 2 not found"},
		{"nothing to add", func() error {
			_, err := tc.txns.AddPartitionsToTransaction(ctx, connect.NewRequest(&sluicev1.AddPartitionsToTransactionRequest{TransactionalId: "job-1", ProducerId: pid, ProducerEpoch: 3}))
			return err
		}, connect.CodeInvalidArgument, 0, "at least one"},
		{"unknown describe", func() error {
			_, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "never-seen"}))
			return err
		}, connect.CodeNotFound, 0, "not found"},
	} {
		err := bad.call()
		require.Equal(t, bad.code, connect.CodeOf(err), "%s: %v", bad.name, err)
		require.Equal(t, bad.reason, txnReason(err), "%s: %v", bad.name, err)
		require.ErrorContains(t, err, bad.msg, bad.name)
	}
}

// TestBrokerTransactionTimeout: InitProducerId's default timeout is
// capped by --max-transaction-timeout; a transaction open past its timeout is
// aborted by its coordinator's periodic pass (abort markers written, the
// epoch bumped); its producer's commit is told the transaction is
// abortable, its abort answers the epoch to go on with.
func TestBrokerTransactionTimeout(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{broker: func(bc *Config) { bc.MaxTransactionTimeout = 30 * time.Second }})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(1)
	ctx := context.Background()
	// The default timeout is the maximum when that is below 60 s.
	_, err := initProducer(t, tc, "default", 0)
	require.NoError(t, err)
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "default"}))
	require.NoError(t, err)
	require.EqualValues(t, 30000, d.Msg.GetTransaction().GetTimeoutMs())

	p, err := initProducer(t, tc, "slow", 1000)
	require.NoError(t, err)
	require.NoError(t, addPartitions(t, tc, "slow", p.GetProducerId(), p.GetProducerEpoch(), "orders", 0))
	testenv.Wait(t, 30*time.Second, "the transaction aborted by its timeout", func() error {
		d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "slow"}))
		if err != nil {
			return err
		}
		if s := d.Msg.GetTransaction().GetState(); s != sluicev1.TxnState_TXN_STATE_COMPLETE_ABORT {
			return fmt.Errorf("state %v", s)
		}
		return nil
	})
	require.Equal(t, []string{fmt.Sprintf("pid %d epoch 1 commit false", p.GetProducerId())}, c.markers(t, "orders", 0))
	_, err = endTxn(t, tc, "slow", p.GetProducerId(), p.GetProducerEpoch(), true)
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE, txnReason(err))
	err = addPartitions(t, tc, "slow", p.GetProducerId(), p.GetProducerEpoch(), "orders", 0)
	require.Equal(t, sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE, txnReason(err), "%v", err)
	end, err := endTxn(t, tc, "slow", p.GetProducerId(), p.GetProducerEpoch(), false)
	require.NoError(t, err)
	require.EqualValues(t, 1, end.GetProducerEpoch())
	require.NoError(t, addPartitions(t, tc, "slow", end.GetProducerId(), end.GetProducerEpoch(), "orders", 0), "the next transaction begins")

	var timedOut float64
	for _, b := range c.brokers {
		mfs, err := b.Registry().Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() == "sluice_broker_txn_timed_out_total" {
				timedOut += mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
	}
	require.InDelta(t, 1, timedOut, 0)
}

// TestBrokerTransactionCoordinatorFailover: an end whose markers cannot
// all be written (a partition of the transaction is offline) stays
// PrepareCommit; when its coordinator's broker stops, the new leader of
// the transaction-state partition loads the state and, once the partition
// is back, finishes the end: markers, CompleteCommit.
func TestBrokerTransactionCoordinatorFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = 2 * time.Second },
		broker:       func(bc *Config) { bc.ReplicaLagTimeMax = time.Second },
	})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	// A single-replica topic, and a transactional id coordinated on
	// another broker; the client talks to the third.
	_, err := c.topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "solo", PartitionCount: 1, ReplicationFactor: 1}))
	require.NoError(t, err)
	c.waitTopicLed(t, c.tenantID, "solo")
	tm, _ := c.brokers[0].metadata().Topic(c.tenantID, "solo")
	solo := int(tm.Partitions[0].Leader) - 1
	var id string
	for i := 0; ; i++ {
		id = fmt.Sprintf("fails-over-%d", i)
		if c.txnCoordinatorIndex(t, 0, id) != solo {
			break
		}
	}
	coord := c.txnCoordinatorIndex(t, 0, id)
	client := 3 - solo - coord
	tc := c.clientsOf(client)

	p, err := initProducer(t, tc, id, 0)
	require.NoError(t, err)
	require.NoError(t, addPartitions(t, tc, id, p.GetProducerId(), p.GetProducerEpoch(), "orders", 0))
	require.NoError(t, addPartitions(t, tc, id, p.GetProducerId(), p.GetProducerEpoch(), "solo", 0))

	// The solo broker stops: the commit cannot write its marker there.
	c.stopBroker(solo)
	endCtx, endCancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = tc.txns.EndTransaction(endCtx, connect.NewRequest(&sluicev1.EndTransactionRequest{TransactionalId: id, ProducerId: p.GetProducerId(), ProducerEpoch: p.GetProducerEpoch(), Commit: true}))
	endCancel()
	require.Error(t, err)
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: id}))
	require.NoError(t, err)
	require.Equal(t, sluicev1.TxnState_TXN_STATE_PREPARE_COMMIT, d.Msg.GetTransaction().GetState())

	// The coordinator's broker stops too, the solo broker comes back: the
	// new coordinator finishes the commit on its own.
	c.stopBroker(coord)
	c.restartBroker(t, solo)
	testenv.Wait(t, 60*time.Second, "the commit finished by the new coordinator", func() error {
		d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: id}))
		if err != nil {
			return err
		}
		if s := d.Msg.GetTransaction().GetState(); s != sluicev1.TxnState_TXN_STATE_COMPLETE_COMMIT {
			return fmt.Errorf("state %v at broker %d", s, d.Msg.GetTransaction().GetCoordinatorId())
		}
		if got := d.Msg.GetTransaction().GetCoordinatorId(); int(got)-1 == coord {
			return fmt.Errorf("still the old coordinator %d", got)
		}
		return nil
	})
	// The old coordinator may have written orders' marker before it
	// stopped: the new one writes it again (a second control batch,
	// harmless).
	want := fmt.Sprintf("pid %d epoch 1 commit true", p.GetProducerId())
	testenv.Wait(t, 30*time.Second, "the markers on the partitions' leaders", func() error {
		for _, topic := range []string{"orders", "solo"} {
			got := c.markersLive(t, topic, 0, coord)
			if len(got) == 0 {
				return fmt.Errorf("%s: no marker", topic)
			}
			for _, m := range got {
				if m != want {
					return fmt.Errorf("%s: %v", topic, got)
				}
			}
		}
		return nil
	})
	// A retry of the commit answers the bumped epoch.
	end, err := endTxn(t, tc, id, p.GetProducerId(), p.GetProducerEpoch(), true)
	require.NoError(t, err)
	require.EqualValues(t, 1, end.GetProducerEpoch())
}

// markersLive is markers on the live brokers (skip stopped).
func (c *lagCluster) markersLive(t *testing.T, topic string, partition int32, stopped int) (out []string) {
	t.Helper()
	saved := c.brokers
	c.brokers = append(append([]*Broker{}, saved[:stopped]...), saved[stopped+1:]...)
	defer func() { c.brokers = saved }()
	return c.markers(t, topic, partition)
}

// TestBrokerTransactionalProduceEndToEnd: transactional batches produced
// through a broker that forwards are verified with the coordinator on
// their first batch, held back from read_committed readers until the
// commit's markers reach the partition, never shown to them when aborted;
// a late batch of an ended transaction is refused, not appended into the
// next one.
func TestBrokerTransactionalProduceEndToEnd(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(0)
	ctx := context.Background()
	p, err := initProducer(t, tc, "e2e", 0)
	require.NoError(t, err)
	pid := p.GetProducerId()
	produce := func(epoch int32, seq int32, values ...string) error {
		recs := make([]record.Record, len(values))
		for i, v := range values {
			recs[i] = record.Record{OffsetDelta: int32(i), Value: []byte(v)}
		}
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: time.Now().UnixMilli(), ProducerID: pid, ProducerEpoch: int16(epoch), BaseSequence: seq}, recs)
		require.NoError(t, err)
		_, err = retry(t, "Produce", func() (*connect.Response[sluicev1.ProduceResponse], error) {
			return tc.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Acks: sluicev1.Acks_ACKS_ALL, TransactionalId: "e2e",
				Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}}))
		})
		return err
	}
	read := func(iso sluicev1.IsolationLevel) []string {
		res, err := tc.records.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", IsolationLevel: iso}))
		require.NoError(t, err)
		var out []string
		for _, r := range res.Msg.GetRecords() {
			out = append(out, string(r.GetValue()))
		}
		return out
	}
	committed, uncommitted := sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED, sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED

	require.NoError(t, produce(0, 0, "a", "b"))
	require.Empty(t, read(committed), "open: nothing below the LSO")
	require.Equal(t, []string{"a", "b"}, read(uncommitted))
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "e2e"}))
	require.NoError(t, err)
	require.Equal(t, sluicev1.TxnState_TXN_STATE_ONGOING, d.Msg.GetTransaction().GetState(), "the produce registered the partition")
	end, err := endTxn(t, tc, "e2e", pid, 0, true)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, read(committed), "committed: visible when EndTransaction returns")

	epoch := end.GetProducerEpoch()
	require.NoError(t, produce(epoch, 0, "c"))
	_, err = endTxn(t, tc, "e2e", pid, epoch, false)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, read(committed), "aborted: never shown")
	require.Equal(t, []string{"a", "b", "c"}, read(uncommitted))

	err = produce(epoch, 1, "late")
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, txnReason(err), "%v", err)
	require.Equal(t, []string{"a", "b", "c"}, read(uncommitted), "the late batch is not appended")
}

// TestBrokerTransactionWithOffsets: the consume-transform-produce step,
// atomic: a transaction's output records and its group offsets (through
// TxnCommitOffsets, which adds the group at the transaction coordinator)
// become visible together at the commit, once EndTransaction returns
// (the markers reached the data partition and the group's offsets
// partition); an aborted one leaves neither. The coordinators' metrics
// count it.
func TestBrokerTransactionWithOffsets(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	c.produce(t, 0, 10, time.Now()) // the input
	tc := c.clientsOf(0)
	ctx := context.Background()
	p, err := initProducer(t, tc, "etl", 0)
	require.NoError(t, err)
	pid, epoch := p.GetProducerId(), p.GetProducerEpoch()
	step := func(epoch, seq int32, offset int64, out string) {
		t.Helper()
		b, err := record.AppendBatch(nil, record.BatchHeader{Attributes: record.AttrTransactional, FirstTimestamp: time.Now().UnixMilli(), ProducerID: pid, ProducerEpoch: int16(epoch), BaseSequence: seq},
			[]record.Record{{Value: []byte(out)}})
		require.NoError(t, err)
		_, err = retry(t, "Produce", func() (*connect.Response[sluicev1.ProduceResponse], error) {
			return tc.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Partition: 1, Acks: sluicev1.Acks_ACKS_ALL, TransactionalId: "etl",
				Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}}))
		})
		require.NoError(t, err)
		_, err = retry(t, "TxnCommitOffsets", func() (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
			return c.groups.TxnCommitOffsets(ctx, connect.NewRequest(&sluicev1.TxnCommitOffsetsRequest{Group: "etl", TransactionalId: "etl", ProducerId: pid, ProducerEpoch: epoch,
				Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: offset, LeaderEpoch: -1}}}))
		})
		require.NoError(t, err)
	}
	state := func() (committed int64, outputs []string) {
		t.Helper()
		res, err := retry(t, "FetchOffsets", func() (*connect.Response[sluicev1.FetchOffsetsResponse], error) {
			return c.groups.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: "etl", Partitions: []*sluicev1.TopicPartitions{{Topic: "orders", Partitions: []int32{0}}}}))
		})
		require.NoError(t, err)
		f, err := tc.records.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 1, IsolationLevel: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED}))
		require.NoError(t, err)
		for _, r := range f.Msg.GetRecords() {
			outputs = append(outputs, string(r.GetValue()))
		}
		return res.Msg.GetOffsets()[0].GetOffset(), outputs
	}

	step(epoch, 0, 3, "out-0..2")
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "etl"}))
	require.NoError(t, err)
	require.Equal(t, []string{"etl"}, d.Msg.GetTransaction().GetGroups())
	require.Equal(t, "orders", d.Msg.GetTransaction().GetTopics()[0].GetTopic())
	end, err := endTxn(t, tc, "etl", pid, epoch, true)
	require.NoError(t, err)
	off, outs := state()
	require.EqualValues(t, 3, off)
	require.Equal(t, []string{"out-0..2"}, outs)

	epoch = end.GetProducerEpoch()
	step(epoch, 0, 7, "out-3..6")
	_, err = endTxn(t, tc, "etl", pid, epoch, false)
	require.NoError(t, err)
	off, outs = state()
	require.EqualValues(t, 3, off, "the aborted transaction's offsets are dropped")
	require.Equal(t, []string{"out-0..2"}, outs, "and its output never read")

	// The coordinator's metrics: one commit, one abort, none open.
	coord := c.brokers[c.txnCoordinatorIndex(t, 0, "etl")]
	got := map[string]float64{}
	mfs, err := coord.Registry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "sluice_broker_txn_") {
			continue
		}
		m := mf.GetMetric()[0]
		switch {
		case m.GetCounter() != nil:
			got[mf.GetName()] = m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			got[mf.GetName()] = m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			got[mf.GetName()] = float64(m.GetHistogram().GetSampleCount())
		}
	}
	require.InDelta(t, 1, got["sluice_broker_txn_commits_total"], 0)
	require.InDelta(t, 1, got["sluice_broker_txn_aborts_total"], 0)
	require.InDelta(t, 0, got["sluice_broker_txn_timed_out_total"], 0)
	require.InDelta(t, 0, got["sluice_broker_txn_open"], 0)
	require.InDelta(t, 2, got["sluice_broker_txn_end_duration_seconds"], 0, "each end observed")
	require.GreaterOrEqual(t, got["sluice_broker_txn_state_write_duration_seconds"], 7.0, "init, two adds (partition, group) and two writes per end, per transaction")
}

// TestBrokerWriteTxnMarkersHandler: WriteTxnMarkers answers each marker
// with its own result (a bad marker, a partition this broker does not
// lead, a topic it does not know), and takes only the broker credential.
func TestBrokerWriteTxnMarkersHandler(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	ctx := context.Background()
	tm, ok := c.brokers[0].metadata().Topic(c.tenantID, "orders")
	require.True(t, ok)
	var notLeader *Broker
	for _, b := range c.brokers {
		if b.metadata().ByID[tm.ID].Partitions[0].Leader != b.cfg.ID {
			notLeader = b
			break
		}
	}
	base := "http://" + notLeader.cfg.Advertised()
	rc := sluicev1connect.NewReplicaServiceClient(h2c.Client(), base, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(notLeader.cfg.BrokerToken)))
	res, err := rc.WriteTxnMarkers(ctx, connect.NewRequest(&sluicev1.WriteTxnMarkersRequest{Markers: []*sluicev1.TxnMarker{
		{TenantId: c.tenantID, TopicId: tm.ID, Partition: 0, Group: "g", ProducerId: 1},
		{TenantId: c.tenantID, TopicId: tm.ID, Partition: 0, ProducerId: 1, ProducerEpoch: 1},
		{TenantId: c.tenantID, TopicId: "no-such-topic", ProducerId: 1},
	}}))
	require.NoError(t, err)
	rs := res.Msg.GetResults()
	require.Len(t, rs, 3)
	require.EqualValues(t, connect.CodeInvalidArgument, rs[0].GetError().GetCode(), "%v", rs[0])
	require.EqualValues(t, connect.CodeFailedPrecondition, rs[1].GetError().GetCode(), "%v", rs[1])
	require.NotEmpty(t, rs[1].GetError().GetDetails(), "with the NotLeader detail")
	require.EqualValues(t, connect.CodeNotFound, rs[2].GetError().GetCode(), "%v", rs[2])

	tenant := sluicev1connect.NewReplicaServiceClient(h2c.Client(), base, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(c.token)))
	_, err = tenant.WriteTxnMarkers(ctx, connect.NewRequest(&sluicev1.WriteTxnMarkersRequest{}))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
}
