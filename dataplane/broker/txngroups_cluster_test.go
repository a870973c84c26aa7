package broker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// groupsOf is a GroupService client of broker i with the tenant's token.
func (c *lagCluster) groupsOf(i int) sluicev1connect.GroupServiceClient {
	return sluicev1connect.NewGroupServiceClient(h2c.Client(), "http://"+c.brokerCfgs[i].Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
}

// txnOffsets commits offsets of "orders" for group g in the producer's
// transaction through gs, retrying while a coordinator takes over.
func txnOffsets(t *testing.T, gs sluicev1connect.GroupServiceClient, g, id string, pid int64, epoch int32, memberID string, memberEpoch int32, offsets map[int32]int64) error {
	t.Helper()
	req := &sluicev1.TxnCommitOffsetsRequest{Group: g, TransactionalId: id, ProducerId: pid, ProducerEpoch: epoch, MemberId: memberID, MemberEpoch: memberEpoch}
	for p, off := range offsets {
		req.Offsets = append(req.Offsets, &sluicev1.PartitionOffset{Topic: "orders", Partition: p, Offset: off, LeaderEpoch: -1})
	}
	_, err := retry(t, "TxnCommitOffsets", func() (*connect.Response[sluicev1.TxnCommitOffsetsResponse], error) {
		return gs.TxnCommitOffsets(context.Background(), connect.NewRequest(req))
	})
	return err
}

// fetchOrders is the group's committed offsets of "orders" (every one of
// the group's when ps is empty) through gs, or FetchOffsets's error.
func fetchOrders(gs sluicev1connect.GroupServiceClient, g string, ps ...int32) (map[int32]int64, error) {
	req := &sluicev1.FetchOffsetsRequest{Group: g}
	if len(ps) > 0 {
		req.Partitions = []*sluicev1.TopicPartitions{{Topic: "orders", Partitions: ps}}
	}
	res, err := gs.FetchOffsets(context.Background(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, o := range res.Msg.GetOffsets() {
		out[o.GetPartition()] = o.GetOffset()
	}
	return out, nil
}

// TestBrokerTxnCommitOffsets: offsets committed inside a transaction, on a
// real cluster (the group's and the transaction's coordinators wherever
// they are; the client talks to broker 1, which forwards): the group joins
// the transaction at its coordinator, the offsets stay pending (the
// partitions unavailable to FetchOffsets) until the end; a commit makes
// them the group's, an abort drops them. A commit with the epoch of an
// ended transaction is fenced; a zombie group member (a stale member
// epoch) is refused by the group.
func TestBrokerTxnCommitOffsets(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	tc := c.clientsOf(0)
	ctx := context.Background()
	c.produce(t, 0, 10, time.Now())
	c.produce(t, 1, 10, time.Now())

	p, err := initProducer(t, tc, "job", 0)
	require.NoError(t, err)
	pid, epoch := p.GetProducerId(), p.GetProducerEpoch()
	require.NoError(t, txnOffsets(t, c.groups, "g", "job", pid, epoch, "", 0, map[int32]int64{0: 4, 1: 6}))
	d, err := tc.txns.DescribeTransaction(ctx, connect.NewRequest(&sluicev1.DescribeTransactionRequest{TransactionalId: "job"}))
	require.NoError(t, err)
	require.Equal(t, []string{"g"}, d.Msg.GetTransaction().GetGroups(), "the group is in the transaction")
	require.Equal(t, sluicev1.TxnState_TXN_STATE_ONGOING, d.Msg.GetTransaction().GetState())
	_, err = fetchOrders(c.groups, "g", 0)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "pending: %v", err)
	_, err = fetchOrders(c.groups, "g")
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "pending: %v", err)

	end, err := endTxn(t, tc, "job", pid, epoch, true)
	require.NoError(t, err)
	got, err := fetchOrders(c.groups, "g", 0, 1)
	require.NoError(t, err, "the commit answered once the group had its marker")
	require.Equal(t, map[int32]int64{0: 4, 1: 6}, got)

	// A late commit of the ended transaction is fenced.
	err = txnOffsets(t, c.groups, "g", "job", pid, epoch, "", 0, map[int32]int64{0: 9})
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.Equal(t, sluicev1.TransactionError_REASON_PRODUCER_FENCED, offsetsTxnReason(t, err))

	// The next transaction aborts: its offsets are dropped.
	pid, epoch = end.GetProducerId(), end.GetProducerEpoch()
	require.NoError(t, txnOffsets(t, c.groups, "g", "job", pid, epoch, "", 0, map[int32]int64{0: 8}))
	end, err = endTxn(t, tc, "job", pid, epoch, false)
	require.NoError(t, err)
	got, err = fetchOrders(c.groups, "g")
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 4, 1: 6}, got)

	// A member of the group commits in a transaction; with a stale member
	// epoch (a zombie) it is refused by the group.
	var m *sluicev1.GroupHeartbeatResponse
	testenv.Wait(t, 30*time.Second, "the member owns orders 0", func() error {
		req := &sluicev1.GroupHeartbeatRequest{Group: "g"}
		if m == nil {
			req.SubscribedTopics, req.SubscriptionSet = []string{"orders"}, true
		} else {
			req.MemberId, req.MemberEpoch = m.GetMemberId(), m.GetMemberEpoch()
			req.Owned, req.OwnedSet = m.GetAssignment(), true
		}
		res, err := c.groups.GroupHeartbeat(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		m = res.Msg
		for _, tp := range m.GetAssignment() {
			if tp.GetTopic() == "orders" && len(tp.GetPartitions()) == 2 {
				return nil
			}
		}
		return fmt.Errorf("assignment %v", m.GetAssignment())
	})
	pid, epoch = end.GetProducerId(), end.GetProducerEpoch()
	err = txnOffsets(t, c.groups, "g", "job", pid, epoch, m.GetMemberId(), m.GetMemberEpoch()-1, map[int32]int64{0: 7})
	require.Equal(t, sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH, groupReason(t, err), "%v", err)
	err = txnOffsets(t, c.groups, "g", "job", pid, epoch, "", 0, map[int32]int64{0: 7})
	require.Equal(t, sluicev1.GroupError_REASON_GROUP_ACTIVE, groupReason(t, err), "%v", err)
	require.NoError(t, txnOffsets(t, c.groups, "g", "job", pid, epoch, m.GetMemberId(), m.GetMemberEpoch(), map[int32]int64{0: 7}))
	_, err = endTxn(t, tc, "job", pid, epoch, true)
	require.NoError(t, err)
	got, err = fetchOrders(c.groups, "g", 0)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 7}, got)
}

// TestBrokerTxnOffsetsGroupCoordinatorFailover: the group's coordinator
// stops between a transaction's offsets and its end; the new leader of the
// offsets partition rebuilds them pending (FetchOffsets still unavailable),
// and the transaction's commit, its marker written to the new coordinator,
// makes them the group's.
func TestBrokerTxnOffsetsGroupCoordinatorFailover(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = 2 * time.Second },
		broker:       func(bc *Config) { bc.ReplicaLagTimeMax = time.Second },
	})
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	c.produce(t, 0, 10, time.Now())
	// A group coordinated on another broker than the transactional id; the
	// client talks to the third.
	gi := int(c.coordinatorOf(t, "g")) - 1
	var id string
	for i := 0; ; i++ {
		id = fmt.Sprintf("job-%d", i)
		if c.txnCoordinatorIndex(t, 0, id) != gi {
			break
		}
	}
	ci := 3 - gi - c.txnCoordinatorIndex(t, 0, id)
	tc, gs := c.clientsOf(ci), c.groupsOf(ci)

	p, err := initProducer(t, tc, id, 0)
	require.NoError(t, err)
	require.NoError(t, txnOffsets(t, gs, "g", id, p.GetProducerId(), p.GetProducerEpoch(), "", 0, map[int32]int64{0: 5}))
	c.stopBroker(gi)
	ot, ok := c.brokers[ci].metadata().Topic(systemTenantID, offsetsTopic)
	require.True(t, ok)
	op := coordinator.PartitionOf(c.tenantID, "g", len(ot.Partitions))
	testenv.Wait(t, 60*time.Second, "a new group coordinator, the offsets pending there", func() error {
		ot, _ := c.brokers[ci].metadata().Topic(systemTenantID, offsetsTopic)
		if l := ot.Partitions[op].Leader; int(l)-1 == gi || l < 0 {
			return fmt.Errorf("offsets partition %d led by %d", op, l)
		}
		_, err := fetchOrders(gs, "g", 0)
		if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "has offsets pending in an open transaction") {
			return fmt.Errorf("want the offsets pending: %v", err)
		}
		return nil
	})

	_, err = endTxn(t, tc, id, p.GetProducerId(), p.GetProducerEpoch(), true)
	require.NoError(t, err)
	got, err := fetchOrders(gs, "g", 0)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 5}, got)
}
