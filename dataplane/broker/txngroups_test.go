package broker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// offsetsTxnReason is err's TransactionError reason (0: none).
func offsetsTxnReason(t *testing.T, err error) sluicev1.TransactionError_Reason {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, err, &ce)
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if te, ok := v.(*sluicev1.TransactionError); ok {
				return te.GetReason()
			}
		}
	}
	return 0
}

// TestBrokerTxnOffsetsUnstable: while a transaction holds pending offsets
// of a group's partition at its coordinator, the group's RPCs (through a
// broker that forwards) hold that partition: FetchOffsets of it, and of
// every offset of the group, answers Unavailable, so a consumer taking the
// partition over does not resume from before the transaction; a plain
// commit of it, a reset and the group's deletion are refused likewise;
// other partitions are served. The commit marker makes the offsets the
// group's; then everything goes through. TxnCommitOffsets checks its
// request as CommitOffsets does before it asks the transaction
// coordinator.
func TestBrokerTxnOffsetsUnstable(t *testing.T) {
	t.Parallel()
	c := startLagCluster(t)
	ctx := context.Background()
	c.produce(t, 0, 10, time.Now())
	c.produce(t, 1, 10, time.Now())
	c.commit(t, "g", map[int32]int64{0: 2, 1: 3})

	coord := c.brokers[c.coordinatorOf(t, "g")-1]
	gc, _, err := coord.coordinatorFor(ctx, c.tenantID, "g")
	require.NoError(t, err)
	tm, ok := coord.metadata().Topic(c.tenantID, "orders")
	require.True(t, ok)
	require.NoError(t, gc.TxnCommitOffsets(ctx, time.Now(), c.tenantID, "g", 7, 0, []coordinator.OffsetCommit{{TopicID: tm.ID, Offset: &sluicev1.PartitionOffset{Topic: "orders", Partition: 0, Offset: 8, LeaderEpoch: -1}}}))

	fetch := func(ps ...int32) (map[int32]int64, error) {
		req := &sluicev1.FetchOffsetsRequest{Group: "g"}
		if len(ps) > 0 {
			req.Partitions = []*sluicev1.TopicPartitions{{Topic: "orders", Partitions: ps}}
		}
		res, err := c.groups.FetchOffsets(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		for _, o := range res.Msg.GetOffsets() {
			out[o.GetPartition()] = o.GetOffset()
		}
		return out, nil
	}
	_, err = fetch(0)
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `group "g" topic "orders" partition 0 has offsets pending in an open transaction (producer 7); retry once it commits or aborts`)
	_, err = fetch()
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "every offset of the group: %v", err)
	got, err := fetch(1)
	require.NoError(t, err, "another partition is stable")
	require.Equal(t, map[int32]int64{1: 3}, got)

	pendingOf := func() map[int32][]string {
		d, err := c.groups.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: "g"}))
		require.NoError(t, err)
		out := map[int32][]string{}
		for _, pl := range d.Msg.GetPartitions() {
			for _, po := range pl.GetPendingOffsets() {
				out[pl.GetPartition()] = append(out[pl.GetPartition()], fmt.Sprintf("producer %d offset %d", po.GetProducerId(), po.GetOffset()))
			}
		}
		return out
	}
	require.Equal(t, map[int32][]string{0: {"producer 7 offset 8"}}, pendingOf(), "DescribeGroup shows them")

	_, err = c.groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "g", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 5}}}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	_, err = c.groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "g", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 1, Offset: 5}}}))
	require.NoError(t, err)
	_, err = c.groups.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: "g", Topic: "orders", Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	_, err = c.groups.DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: "g"}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)

	// TxnCommitOffsets checks the request first, as CommitOffsets does.
	txn := func(m *sluicev1.TxnCommitOffsetsRequest) error {
		_, err := c.groups.TxnCommitOffsets(ctx, connect.NewRequest(m))
		return err
	}
	offs := []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 9}}
	for _, m := range []*sluicev1.TxnCommitOffsetsRequest{
		{Group: "g", ProducerId: 7, Offsets: offs},
		{Group: "g", TransactionalId: "job", ProducerId: -1, Offsets: offs},
		{Group: "g", TransactionalId: "job", ProducerId: 7, ProducerEpoch: 1 << 15, Offsets: offs},
		{Group: "g", TransactionalId: "job", ProducerId: 7},
		{Group: "", TransactionalId: "job", ProducerId: 7, Offsets: offs},
	} {
		require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(txn(m)), "%v", m)
	}
	err = txn(&sluicev1.TxnCommitOffsetsRequest{Group: "g", TransactionalId: "job", ProducerId: 7, Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 11}}})
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(err), "beyond the high watermark: %v", err)
	err = txn(&sluicev1.TxnCommitOffsetsRequest{Group: "g", TransactionalId: "job", ProducerId: 7, MemberId: "nobody", MemberEpoch: 1, Offsets: offs})
	require.Equal(t, sluicev1.GroupError_REASON_UNKNOWN_MEMBER, groupReason(t, err), "the group fences members: %v", err)

	// The transaction commits.
	require.NoError(t, gc.WriteTxnMarker(ctx, c.tenantID, "g", 7, 1, 0, true, false))
	require.Empty(t, pendingOf())
	got, err = fetch(0, 1)
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 8, 1: 5}, got)
	got, err = fetch()
	require.NoError(t, err)
	require.Equal(t, map[int32]int64{0: 8, 1: 5}, got)
	_, err = c.groups.DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: "g"}))
	require.NoError(t, err)
}
