package cluster

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func assignment(tenant, id, name string, p, leader int32) *sluicev1.PartitionAssignment {
	return &sluicev1.PartitionAssignment{TenantId: tenant, TopicId: id, TopicName: name, Partition: p,
		Replicas: []int32{leader}, Leader: leader, LeaderEpoch: 3, Isr: []int32{leader}, PartitionEpoch: 5}
}

// TestViewResolve: a request resolves against its own tenant's topics only;
// what it names wrongly is InvalidRequest, what the view does not know is
// UnknownTopicOrPartition (Unavailable before the first assignments), and
// a partition another broker leads is a NotLeader naming it and its
// address.
func TestViewResolve(t *testing.T) {
	empty := EmptyView()
	_, _, err := empty.Resolve("t1", "orders", 0)
	require.ErrorIs(t, err, derr.Unavailable)

	v, changed := empty.WithDelta(&sluicev1.WatchAssignmentsResponse{
		MetadataVersion: 7,
		Brokers:         []*sluicev1.BrokerEndpoint{{BrokerId: 1, Address: "b1:9092"}, {BrokerId: 2, Address: "b2:9092"}},
		Partitions:      []*sluicev1.PartitionAssignment{assignment("t1", "id-1", "orders", 0, 1), assignment("t1", "id-1", "orders", 1, 2)},
	})
	require.ElementsMatch(t, []PartKey{{TopicID: "id-1", Partition: 0}, {TopicID: "id-1", Partition: 1}}, changed)
	require.False(t, empty.Loaded, "the view a delta starts from is left as it was")

	top, pm, err := v.Resolve("t1", "orders", 1)
	require.NoError(t, err)
	require.Equal(t, "id-1", top.ID)
	require.Equal(t, int32(2), pm.Leader)

	for _, c := range []struct {
		tenant, topic string
		partition     int32
		kind          derr.Kind
	}{
		{"t1", "", 0, derr.InvalidRequest},
		{"t1", "orders", -1, derr.InvalidRequest},
		{"t1", "orders", 2, derr.UnknownTopicOrPartition},
		{"t1", "missing", 0, derr.UnknownTopicOrPartition},
		{"t2", "orders", 0, derr.UnknownTopicOrPartition}, // another tenant's topic is not found
	} {
		_, _, err := v.Resolve(c.tenant, c.topic, c.partition)
		require.ErrorIs(t, err, c.kind, "%+v", c)
	}

	var nl *partition.NotLeaderError
	require.ErrorAs(t, v.NotLeader(1, pm), &nl)
	require.Equal(t, partition.NotLeaderError{TopicID: "id-1", Partition: 1, Leader: 2, Epoch: 3, Address: "b2:9092"}, *nl)
	require.ErrorAs(t, v.NotLeader(2, pm), &nl)
	require.True(t, nl.Self, "the view names this broker as the leader")
	require.Equal(t, []Node{{ID: 1, Address: "b1:9092"}, {ID: 2, Address: "b2:9092"}}, SortedNodes(v))
}
