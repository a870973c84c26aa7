package client

import (
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestMetadataNeverLosesAddedPartitions: partitions are only ever added, so
// an answer with fewer partitions for the same topic id (from a broker
// that has not heard of the added ones yet) keeps the cached ones, with
// their routing; a topic with another id (deleted and created again) is
// taken as it comes.
func TestMetadataNeverLosesAddedPartitions(t *testing.T) {
	c := &Client{brokers: map[int32]broker{}, topics: map[string]*topicMeta{}}
	md := func(id string, leaders ...int32) *sluicev1.GetMetadataResponse {
		tm := &sluicev1.TopicMetadata{Name: "orders", Id: id}
		for i, l := range leaders {
			tm.Partitions = append(tm.Partitions, &sluicev1.PartitionMetadata{Partition: int32(i), Leader: l, LeaderEpoch: 1})
		}
		return &sluicev1.GetMetadataResponse{Topics: []*sluicev1.TopicMetadata{tm}}
	}
	leaders := func() []int32 {
		var out []int32
		for _, p := range c.topics["orders"].partitions {
			out = append(out, p.leader)
		}
		return out
	}
	c.applyMetadata(md("id-1", 1, 2, 3, 1))
	require.Equal(t, []int32{1, 2, 3, 1}, leaders())
	c.applyMetadata(md("id-1", 3, 3)) // a broker that knows 2 of them
	require.Equal(t, []int32{3, 3, 3, 1}, leaders(), "the answer's partitions updated, the others kept")
	c.applyMetadata(md("id-1", 2, 2, 2, 2, 2))
	require.Equal(t, []int32{2, 2, 2, 2, 2}, leaders(), "grown again")
	c.applyMetadata(md("id-2", 1))
	require.Equal(t, []int32{1}, leaders(), "another topic under the name")
}
