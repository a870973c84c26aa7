package broker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/records"
	"github.com/sluicemq/sluice/dataplane/txn"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// movedCoordinator is a peer broker's TransactionService that answers
// AddPartitionsToTransaction with err, as a broker does while the
// transaction-state partition moves.
type movedCoordinator struct {
	sluicev1connect.UnimplementedTransactionServiceHandler
	err error
}

func (m movedCoordinator) AddPartitionsToTransaction(context.Context, *connect.Request[sluicev1.AddPartitionsToTransactionRequest]) (*connect.Response[sluicev1.AddPartitionsToTransactionResponse], error) {
	return nil, m.err
}

// servePeer serves h on loopback (h2c, as brokers speak gRPC to each
// other) and returns its address.
func servePeer(t *testing.T, h sluicev1connect.TransactionServiceHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewTransactionServiceHandler(h))
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestBrokerTxnVerificationHidesTheCoordinatorsNotLeader: a partition
// leader verifying a transactional produce with the transaction
// coordinator answers, while the coordinator cannot be reached where its
// view says (the transaction-state partition offline, not taken over yet
// here, or a peer that names another leader), Unavailable without the
// transaction-state partition's NotLeader, neither as a detail nor
// wrapped: the produce was to another partition, and a client that took
// that NotLeader for its partition's routed there and trusted its leader
// epoch over the real leader's (issue 29: 155 refusals over 90 s, "broker
// 1 leads at epoch 4" for a partition broker 3 led at epoch 2).
func TestBrokerTxnVerificationHidesTheCoordinatorsNotLeader(t *testing.T) {
	t.Parallel()
	const (
		tenantID = "t1"
		txnID    = "txn-1"
		txnTopic = "txn-state-id"
		dataID   = "orders-id"
	)
	nlErr := func(leader, epoch int32, self bool, addr string) error {
		return toConnect(&partition.NotLeaderError{TopicID: txnTopic, Partition: 0, Leader: leader, Epoch: epoch, Self: self, Address: addr})
	}
	// Broker 3 names broker 2 at epoch 4; broker 2 says it is taking over.
	peer2 := servePeer(t, movedCoordinator{err: nlErr(2, 4, true, "")})
	var peer3 movedCoordinator
	peer3Addr := servePeer(t, &peer3)
	peer3.err = nlErr(2, 4, false, peer2)

	for _, tc := range []struct {
		name   string
		leader int32 // of the transaction-state partition, in broker 1's view
	}{
		{"offline", -1},
		{"named here, not taken over yet", 1},
		{"the peer says it is taking over", 2},
		{"the peer names another broker, who is taking over", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newTestBroker(t)
			meta := cluster.EmptyView()
			meta.Brokers[2] = cluster.Node{ID: 2, Address: peer2}
			meta.Brokers[3] = cluster.Node{ID: 3, Address: peer3Addr}
			ts := &cluster.Topic{TenantID: systemTenantID, ID: txnTopic, Name: txnStateTopic}
			for i := range int32(4) {
				ts.Partitions = append(ts.Partitions, cluster.Partition{TopicID: txnTopic, Partition: i, Replicas: []int32{1, 2, 3}, Leader: tc.leader, LeaderEpoch: 4})
			}
			meta.AddTopic(ts)
			meta.AddTopic(&cluster.Topic{TenantID: tenantID, ID: dataID, Name: "orders",
				Partitions: []cluster.Partition{{TopicID: dataID, Partition: 0, Replicas: []int32{1, 2, 3}, Leader: 1, LeaderEpoch: 2}}})
			b.meta.Store(meta)
			require.Less(t, txn.PartitionOf(tenantID, txnID, 4), int32(4))

			ctx := tenants.WithPrincipal(t.Context(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: tenantID})
			err := toConnect(b.verifyTransaction(ctx, http.Header{"Authorization": []string{"Bearer x"}}, records.Verification{TenantID: tenantID, TransactionalID: txnID, TopicID: dataID, ProducerID: 7})) // as the produce's handler answers it
			require.Error(t, err)
			require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
			_, detail := notLeaderOf(err)
			require.False(t, detail, "the transaction-state partition's NotLeader answers a produce to another partition: %v", err)
			var nl *partition.NotLeaderError
			require.False(t, errors.As(err, &nl), "a wrapped NotLeader would make the produce forwardable to the coordinator: %v", err)
			require.False(t, connectapi.Forwardable(http.Header{}, err))
			require.ErrorContains(t, err, "transaction coordinator")
		})
	}
}
