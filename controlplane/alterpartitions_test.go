package controlplane_test

import (
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/api"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
)

// TestControllerAlterPartitions: one call carries many partitions' ISR
// changes; each item is answered on its own, as AlterPartition would have
// answered it (the current assignment attached to refusals about the
// partition), and the accepted ones are stored.
func TestControllerAlterPartitions(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		// On a fake clock nobody moves: no lease lapses, however slowly
		// the machine runs.
		c := startFake(t, clock.NewFake(time.Now()), dbURL, nil)
		f := newFleet(t, c, 3)
		topicID := c.createTopic(t, "alters", "orders", 12, 3)
		parts := c.partitions(t, topicID)
		leader := parts[0].Leader
		var led []int32
		other := int32(-1)
		for _, p := range parts {
			if p.Leader == leader {
				led = append(led, p.Partition)
			} else if other < 0 {
				other = p.Partition
			}
		}
		require.GreaterOrEqual(t, len(led), 3, "placement spreads leaders: %v", parts)
		require.GreaterOrEqual(t, other, int32(0))
		a, b, d := parts[led[0]], parts[led[1]], parts[led[2]]
		ctx := t.Context()
		bs := c.brokers(brokerToken)
		item := func(p int32, partitionEpoch int32, isr ...int32) *sluicev1.AlterPartitionsItem {
			return &sluicev1.AlterPartitionsItem{TopicId: topicID, Partition: p, PartitionEpoch: partitionEpoch, NewIsr: isr}
		}
		call := func(epoch int64, items ...*sluicev1.AlterPartitionsItem) []*sluicev1.AlterPartitionsResult {
			t.Helper()
			res, err := bs.AlterPartitions(ctx, connect.NewRequest(&sluicev1.AlterPartitionsRequest{BrokerId: leader, BrokerEpoch: epoch, Items: items}))
			require.NoError(t, err)
			require.Len(t, res.Msg.GetResults(), len(items))
			return res.Msg.GetResults()
		}
		requireRefused := func(r *sluicev1.AlterPartitionsResult, code connect.Code, msg string) *sluicev1.PartitionAssignment {
			t.Helper()
			e := r.GetError()
			require.NotNil(t, e, "%v", r)
			require.Equal(t, code.String(), e.GetCode())
			require.Contains(t, e.GetMessage(), msg)
			return e.GetCurrent()
		}

		res := call(f.epoch(leader),
			item(a.Partition, 0, leader, a.Replicas[1]),                             // 0: shrink, accepted
			item(b.Partition, 5, leader),                                            // 1: stale partition epoch
			item(other, 0, leader),                                                  // 2: not its leader
			item(d.Partition, 0),                                                    // 3: malformed
			item(d.Partition, 0, d.Replicas[2], leader, d.Replicas[1]),              // 4: the ISR it has: unchanged
			&sluicev1.AlterPartitionsItem{TopicId: "nope", NewIsr: []int32{leader}}, // 5: unknown topic
			item(99, 0, leader),                                                     // 6: unknown partition
			item(a.Partition, 0, leader),                                            // 7: a again: its epoch moved with item 0
			item(b.Partition, 0, leader, b.Replicas[2]),                             // 8: shrink, accepted
		)
		got := res[0].GetPartition()
		require.NotNil(t, got, "%v", res[0])
		require.Equal(t, []int32{leader, a.Replicas[1]}, got.GetIsr())
		require.EqualValues(t, 1, got.GetPartitionEpoch())
		require.Equal(t, topicID, got.GetTopicId())
		require.EqualValues(t, 2, got.GetConfig().GetMinInsyncReplicas())

		cur := requireRefused(res[1], connect.CodeFailedPrecondition, "stale partition epoch 5 (current 0)")
		require.EqualValues(t, b.Partition, cur.GetPartition())
		require.EqualValues(t, 5, res[1].GetError().GetStalePartitionEpoch().GetPartitionEpoch(), "typed: a StalePartitionEpoch")
		require.EqualValues(t, 0, res[1].GetError().GetStalePartitionEpoch().GetCurrentPartitionEpoch())
		cur = requireRefused(res[2], connect.CodeFailedPrecondition, "is not the leader")
		require.Equal(t, parts[other].Leader, cur.GetLeader())
		require.Nil(t, res[2].GetError().GetStalePartitionEpoch(), "only a stale partition epoch has the detail")
		require.Nil(t, requireRefused(res[3], connect.CodeInvalidArgument, "new_isr"))
		require.EqualValues(t, 0, res[4].GetPartition().GetPartitionEpoch())
		require.Equal(t, d.ISR, res[4].GetPartition().GetIsr())
		require.Nil(t, requireRefused(res[5], connect.CodeNotFound, "not found"))
		require.Nil(t, requireRefused(res[6], connect.CodeNotFound, "partition 99"))
		cur = requireRefused(res[7], connect.CodeFailedPrecondition, "stale partition epoch 0 (current 1)")
		require.EqualValues(t, 1, res[7].GetError().GetStalePartitionEpoch().GetCurrentPartitionEpoch())
		require.Equal(t, []int32{leader, a.Replicas[1]}, cur.GetIsr(), "the state item 0 wrote")
		require.EqualValues(t, 1, res[8].GetPartition().GetPartitionEpoch())

		stored := c.partitions(t, topicID)
		for _, p := range stored {
			switch p.Partition {
			case a.Partition:
				require.Equal(t, []int32{leader, a.Replicas[1]}, p.ISR)
				require.EqualValues(t, 1, p.PartitionEpoch)
			case b.Partition:
				require.Equal(t, []int32{leader, b.Replicas[2]}, p.ISR)
				require.EqualValues(t, 1, p.PartitionEpoch)
			default:
				require.Equal(t, parts[p.Partition], p, "untouched")
			}
		}

		// The caller's own refusals come after each item's partition epoch,
		// as AlterPartition's do.
		res = call(f.epoch(leader)-1, item(a.Partition, 1, leader), item(d.Partition, 7, leader))
		requireRefused(res[0], connect.CodeFailedPrecondition, "stale (current")
		requireRefused(res[1], connect.CodeFailedPrecondition, "stale partition epoch 7")
		// Growing back: the added broker's epoch is checked per item.
		res = call(f.epoch(leader), &sluicev1.AlterPartitionsItem{
			TopicId: topicID, Partition: a.Partition, PartitionEpoch: 1, NewIsr: a.Replicas,
			AddedBrokerEpochs: []*sluicev1.BrokerEpoch{{BrokerId: a.Replicas[2], BrokerEpoch: f.epoch(a.Replicas[2])}},
		}, item(b.Partition, 1, b.Replicas...))
		require.Equal(t, a.Replicas, res[0].GetPartition().GetIsr())
		requireRefused(res[1], connect.CodeInvalidArgument, "added_broker_epochs")

		// Items over many topics (read in one go): each answered from its own.
		var items []*sluicev1.AlterPartitionsItem
		var want []int32
		for i := range 9 {
			id := c.createTopic(t, fmt.Sprintf("alters-%d", i), "t", 1, 3)
			p := c.partitions(t, id)[0]
			items = append(items, &sluicev1.AlterPartitionsItem{TopicId: id, NewIsr: []int32{leader}})
			want = append(want, p.Leader)
		}
		res = call(f.epoch(leader), items...)
		for i, r := range res {
			if want[i] == leader {
				require.Equal(t, []int32{leader}, r.GetPartition().GetIsr(), "topic %d", i)
				continue
			}
			require.Equal(t, want[i], requireRefused(r, connect.CodeFailedPrecondition, "is not the leader").GetLeader(), "topic %d", i)
		}

		// Bounded; broker access only.
		many := make([]*sluicev1.AlterPartitionsItem, api.MaxAlterPartitionsItems+1)
		for i := range many {
			many[i] = item(a.Partition, 2, leader)
		}
		_, err := bs.AlterPartitions(ctx, connect.NewRequest(&sluicev1.AlterPartitionsRequest{BrokerId: leader, BrokerEpoch: f.epoch(leader), Items: many}))
		requireCode(t, connect.CodeInvalidArgument, err, "items")
		_, err = c.brokers(operatorToken).AlterPartitions(ctx, connect.NewRequest(&sluicev1.AlterPartitionsRequest{BrokerId: leader}))
		requireCode(t, connect.CodeUnauthenticated, err)
	})
}
