package connectapi

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/dataplane/txn"
	"github.com/sluicemq/sluice/dataplane/txns"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
	"github.com/sluicemq/sluice/tenants/system"
)

// coordinatorPeer is broker 2's TransactionService: it answers
// DescribeTransaction and keeps the headers it was called with.
type coordinatorPeer struct {
	sluicev1connect.TransactionServiceClient
	header http.Header
}

func (p *coordinatorPeer) DescribeTransaction(_ context.Context, req *connect.Request[sluicev1.DescribeTransactionRequest]) (*connect.Response[sluicev1.DescribeTransactionResponse], error) {
	p.header = req.Header()
	return connect.NewResponse(&sluicev1.DescribeTransactionResponse{Transaction: &sluicev1.TransactionDescription{TransactionalId: req.Msg.GetTransactionalId(), CoordinatorId: 2}}), nil
}

// txnsOnBroker1 is the adapter of broker 1's transaction service in a
// view where broker 2 leads every transaction-state partition and the
// tenant's topic "orders".
func txnsOnBroker1(t *testing.T, peer *coordinatorPeer) *Transactions {
	t.Helper()
	v := cluster.EmptyView()
	v.Loaded = true
	v.Brokers[2] = cluster.Node{ID: 2, Address: "b2"}
	v.AddTopic(&cluster.Topic{TenantID: system.TenantID, ID: "ts", Name: system.TransactionStateTopic, Partitions: []cluster.Partition{{TopicID: "ts", Leader: 2, LeaderEpoch: 5}}})
	v.AddTopic(&cluster.Topic{TenantID: "t1", ID: "orders-id", Name: "orders", Partitions: []cluster.Partition{{TopicID: "orders-id", Leader: 2, LeaderEpoch: 1}}})
	svc := txns.New(txns.Config{BrokerID: 1}, txns.Deps{
		View:    func() *cluster.View { return v },
		Replica: func(string, int32) *partition.Replica { return nil },
		Host: func(_ context.Context, _ *cluster.Topic, pm cluster.Partition, _ func(runtime.Partition, int32) *txn.Coordinator) (*txn.Coordinator, error) {
			return nil, v.NotLeader(1, pm)
		},
	})
	return NewTransactions(svc, TransactionsDeps{Peer: func(id int32) sluicev1connect.TransactionServiceClient {
		require.Equal(t, int32(2), id)
		return peer
	}})
}

// TestConnectapiTxnsForwardsToTheCoordinator: a call about an id another
// broker coordinates is sent there once, with the caller's credential and
// marked not to be forwarded again; a caller that routes itself is told
// where the coordinator is (NotLeader).
func TestConnectapiTxnsForwardsToTheCoordinator(t *testing.T) {
	t.Parallel()
	peer := &coordinatorPeer{}
	a := txnsOnBroker1(t, peer)
	ctx := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: "t1"})
	req := connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job"})
	req.Header().Set("Authorization", "Bearer client")
	res, err := a.DescribeTransaction(ctx, req)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Msg.GetTransaction().GetCoordinatorId())
	require.Equal(t, "Bearer client", peer.header.Get("Authorization"))
	require.Equal(t, "1", peer.header.Get(NoForwardHeader))

	req.Header().Set(NoForwardHeader, "1")
	_, err = a.DescribeTransaction(ctx, req)
	ce := AsConnect(err)
	require.Equal(t, connect.CodeFailedPrecondition, ce.Code(), "%v", err)
	require.Len(t, ce.Details(), 1, "the NotLeader naming the coordinator")

	_, err = a.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(connecterr.ToConnect(err)), "checked before the lookup: %v", err)
}

// TestConnectapiTxnsWriteTxnMarkers: WriteTxnMarkers answers each marker
// with its own result: a bad marker, a partition this broker does not
// lead (with the NotLeader detail), a topic it does not know.
func TestConnectapiTxnsWriteTxnMarkers(t *testing.T) {
	t.Parallel()
	a := txnsOnBroker1(t, &coordinatorPeer{})
	res, err := a.WriteTxnMarkers(context.Background(), connect.NewRequest(&sluicev1.WriteTxnMarkersRequest{Markers: []*sluicev1.TxnMarker{
		{TenantId: "t1", TopicId: "orders-id", Partition: 0, Group: "g", ProducerId: 1},
		{TenantId: "t1", TopicId: "orders-id", Partition: 0, ProducerId: 1, ProducerEpoch: 1},
		{TenantId: "t1", TopicId: "no-such-topic", ProducerId: 1},
		{TenantId: "t1", TopicId: "orders-id", ProducerId: 1, ProducerEpoch: 1 << 16},
	}}))
	require.NoError(t, err)
	rs := res.Msg.GetResults()
	require.Len(t, rs, 4)
	require.EqualValues(t, connect.CodeInvalidArgument, rs[0].GetError().GetCode(), "%v", rs[0])
	require.Equal(t, "topic_id or group: exactly one must be set", rs[0].GetError().GetMessage())
	require.EqualValues(t, connect.CodeFailedPrecondition, rs[1].GetError().GetCode(), "%v", rs[1])
	require.NotEmpty(t, rs[1].GetError().GetDetails(), "with the NotLeader detail")
	require.EqualValues(t, connect.CodeNotFound, rs[2].GetError().GetCode(), "%v", rs[2])
	require.Equal(t, "producer_epoch: must be between 0 and 32767; got 65536", rs[3].GetError().GetMessage())

	_, err = a.WriteTxnMarkers(context.Background(), connect.NewRequest(&sluicev1.WriteTxnMarkersRequest{Markers: make([]*sluicev1.TxnMarker, txns.MaxMarkersPerRequest+1)}))
	require.Equal(t, connect.CodeInvalidArgument, AsConnect(err).Code())
}
