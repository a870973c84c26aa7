package broker

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestBrokerDeleteOffsets: GroupService.DeleteOffsets, through a broker
// that forwards to the group's coordinator, deletes the group's committed
// offsets of a topic (all its partitions, or those named), and is refused
// FailedPrecondition while a member subscribes to the topic; an unknown
// group is NotFound, an unknown topic too, a missing topic InvalidArgument.
func TestBrokerDeleteOffsets(t *testing.T) {
	t.Parallel()
	c := startLagCluster(t)
	ctx := context.Background()
	c.produce(t, 0, 10, time.Now())
	c.produce(t, 1, 10, time.Now())
	offsets := func() map[int32]int64 {
		t.Helper()
		res, err := c.groups.FetchOffsets(ctx, connect.NewRequest(&sluicev1.FetchOffsetsRequest{Group: "g"}))
		require.NoError(t, err)
		out := map[int32]int64{}
		for _, o := range res.Msg.GetOffsets() {
			out[o.GetPartition()] = o.GetOffset()
		}
		return out
	}
	del := func(group string, partitions ...int32) error {
		_, err := c.groups.DeleteOffsets(ctx, connect.NewRequest(&sluicev1.DeleteOffsetsRequest{Group: group, Topic: "orders", Partitions: partitions}))
		return err
	}

	c.commit(t, "g", map[int32]int64{0: 2, 1: 3})
	hb, err := c.groups.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: "g", SubscribedTopics: []string{"orders"}, SubscriptionSet: true}))
	require.NoError(t, err)
	err = del("g")
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, `group "g": its members subscribe to topic "orders"; its offsets stay while they do`)
	require.Equal(t, map[int32]int64{0: 2, 1: 3}, offsets())

	_, err = c.groups.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: "g", MemberId: hb.Msg.GetMemberId(), MemberEpoch: -1}))
	require.NoError(t, err, "the member leaves")
	require.NoError(t, del("g", 1))
	require.Equal(t, map[int32]int64{0: 2}, offsets())
	require.NoError(t, del("g"), "every partition; 1 has none left, no error")
	require.Empty(t, offsets())

	err = del("never")
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	_, err = c.groups.DeleteOffsets(ctx, connect.NewRequest(&sluicev1.DeleteOffsetsRequest{Group: "g", Topic: "nope"}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
	_, err = c.groups.DeleteOffsets(ctx, connect.NewRequest(&sluicev1.DeleteOffsetsRequest{Group: "g"}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
}
