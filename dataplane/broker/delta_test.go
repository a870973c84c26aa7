package broker

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/cluster"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

const (
	deltaGone  = "01a2316c-bf77-7355-9a8f-a7deac7ee6b4"
	deltaOther = "01a2316c-c1aa-7e3b-8c55-0a1b2c3d4e5f"
	deltaNew   = "01a2316c-c2bb-7f4c-9d66-1b2c3d4e5f60"
)

// deltaAssignment is partition n of topic id (named name) of growTenant,
// led by leader alone at leader epoch epoch.
func deltaAssignment(id, name string, n, leader, epoch int32) *sluicev1.PartitionAssignment {
	return &sluicev1.PartitionAssignment{
		TenantId: growTenant, TopicId: id, TopicName: name, Partition: n,
		Replicas: []int32{leader}, Leader: leader, LeaderEpoch: epoch, Isr: []int32{leader}, PartitionEpoch: epoch,
		Config: &sluicev1.TopicConfig{MinInsyncReplicas: ptrTo(int32(1)), MaxMessageBytes: ptrTo(int32(1 << 20))},
	}
}

// TestBrokerAppliesAssignmentDelta: a delta changes the view copy-on-write
// — the view before is left as it was, topics the delta does not name are
// shared, not copied or walked — and brings to their new role exactly the
// replicas of the partitions it lists: a leader epoch change applies, a
// new topic's replica opens, and a deleted topic's replica closes and its
// data goes.
func TestBrokerAppliesAssignmentDelta(t *testing.T) {
	t.Parallel()
	b := newTestBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()
	defer b.applyMetadata(toClusterMeta(&sluicev1.WatchAssignmentsResponse{MetadataVersion: 99}))

	snap := assignments(5, 3, 0, 1) // orders: 0 and 1 here, 2 on broker 2
	snap.Partitions = append(snap.Partitions,
		deltaAssignment(deltaGone, "gone", 0, 1, 0),
		deltaAssignment(deltaOther, "other", 0, 2, 0))
	b.applyMetadata(toClusterMeta(snap))
	before := b.metadata()
	gone := b.partition(deltaGone, 0)
	require.NotNil(t, gone)
	require.DirExists(t, gone.Dir())
	p0, p1 := b.partition(growTopic, 0), b.partition(growTopic, 1)
	require.True(t, p1.LeadsAt(0))

	d := &sluicev1.WatchAssignmentsResponse{
		Delta: true, BaseVersion: 5, MetadataVersion: 8,
		Partitions: []*sluicev1.PartitionAssignment{
			deltaAssignment(growTopic, "orders", 1, 1, 1),
			deltaAssignment(deltaNew, "new", 0, 1, 0),
		},
		DeletedTopicIds: []string{deltaGone},
		Brokers:         []*sluicev1.BrokerEndpoint{{BrokerId: 2, Address: "b2:9092"}},
	}
	next, changed := before.WithDelta(d)
	require.ElementsMatch(t, []cluster.PartKey{{TopicID: deltaGone, Partition: 0}, {TopicID: growTopic, Partition: 1}, {TopicID: deltaNew, Partition: 0}}, changed,
		"the partitions the delta lists and those of the topics it deletes, no others")
	require.Same(t, before.ByID[deltaOther], next.ByID[deltaOther], "a topic the delta does not name is shared")
	require.Same(t, before.ByTenant[growTenant]["other"], next.ByTenant[growTenant]["other"])

	b.applyDelta(next, changed)
	m := b.metadata()
	require.EqualValues(t, 8, m.Version)
	require.Equal(t, map[int32]cluster.Node{2: {ID: 2, Address: "b2:9092"}}, m.Brokers)
	_, ok := m.Topic(growTenant, "gone")
	require.False(t, ok, "the deleted topic is gone by name")
	_, ok = m.ByID[deltaGone]
	require.False(t, ok, "and by id")
	orders, ok := m.Topic(growTenant, "orders")
	require.True(t, ok)
	require.Len(t, orders.Partitions, 3)
	require.EqualValues(t, 1, orders.Partitions[1].LeaderEpoch)
	require.Equal(t, []int32{2}, orders.Partitions[2].Replicas, "the partitions the delta does not list stay")
	_, ok = m.Topic(growTenant, "new")
	require.True(t, ok)

	// The view before is as it was (readers holding it see one version).
	require.EqualValues(t, 5, before.Version)
	_, ok = before.Topic(growTenant, "gone")
	require.True(t, ok)
	require.Zero(t, before.ByID[growTopic].Partitions[1].LeaderEpoch)
	_, ok = before.ByID[deltaNew]
	require.False(t, ok)

	require.Same(t, p0, b.partition(growTopic, 0), "an unchanged replica is kept")
	require.Same(t, p1, b.partition(growTopic, 1))
	require.True(t, p1.LeadsAt(1), "the changed one leads at its new epoch")
	require.NotNil(t, b.partition(deltaNew, 0), "the new topic's replica opens")
	require.Nil(t, b.partition(deltaGone, 0), "the deleted topic's replica closes")
	testenv.Wait(t, 10*time.Second, "the deleted topic's data to go", func() error {
		if _, err := os.Stat(gone.Dir()); !os.IsNotExist(err) {
			return fmt.Errorf("%s of a deleted topic is still on disk", gone.Dir())
		}
		return nil
	})
}

// fakeAssignments replays messages as an assignment stream.
type fakeAssignments struct {
	msgs []*sluicev1.WatchAssignmentsResponse
	cur  *sluicev1.WatchAssignmentsResponse
}

func (f *fakeAssignments) Receive() bool {
	if len(f.msgs) == 0 {
		return false
	}
	f.cur, f.msgs = f.msgs[0], f.msgs[1:]
	return true
}
func (f *fakeAssignments) Msg() *sluicev1.WatchAssignmentsResponse { return f.cur }
func (f *fakeAssignments) Err() error                              { return nil }

// TestBrokerAssignmentDeltaGap: a delta applies only on top of this
// stream's snapshot at its base version; otherwise the broker ends the
// stream (errDeltaGap) to reconnect for a snapshot, keeping the view it
// holds.
func TestBrokerAssignmentDeltaGap(t *testing.T) {
	t.Parallel()
	delta := func(base, version int64, n int32) *sluicev1.WatchAssignmentsResponse {
		return &sluicev1.WatchAssignmentsResponse{Delta: true, BaseVersion: base, MetadataVersion: version,
			Partitions: []*sluicev1.PartitionAssignment{deltaAssignment(growTopic, "orders", n, 2, int32(version))}}
	}
	b := newTestBroker(t)
	follow := func(msgs ...*sluicev1.WatchAssignmentsResponse) error {
		return b.followAssignments(&fakeAssignments{msgs: msgs}, func() {})
	}

	require.NoError(t, follow(assignments(5, 2), delta(5, 6, 0), delta(6, 9, 1)), "deltas in sequence apply")
	m := b.metadata()
	require.EqualValues(t, 9, m.Version)
	require.EqualValues(t, 6, m.ByID[growTopic].Partitions[0].LeaderEpoch)
	require.EqualValues(t, 9, m.ByID[growTopic].Partitions[1].LeaderEpoch)

	require.ErrorIs(t, follow(delta(9, 10, 0)), errDeltaGap, "a new stream's first message must be a snapshot")
	require.ErrorIs(t, follow(assignments(12, 2), delta(11, 13, 0)), errDeltaGap, "a delta on another version")
	require.EqualValues(t, 12, b.metadata().Version, "the view held stays")
}
