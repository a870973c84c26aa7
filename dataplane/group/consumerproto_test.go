package group_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/sluicemq/sluice/dataplane/group"
)

// TestConsumerProtocol: subscriptions and assignments as Kafka clients
// encode them (kmsg's codecs, every version) read back; truncated bytes
// are an error, never a panic.
func TestConsumerProtocol(t *testing.T) {
	for v := int16(0); v <= 3; v++ {
		s := kmsg.NewConsumerMemberMetadata()
		s.Version, s.Topics, s.UserData = v, []string{"orders", "audit"}, []byte("x")
		if v >= 1 {
			s.OwnedPartitions = []kmsg.ConsumerMemberMetadataOwnedPartition{{Topic: "orders", Partitions: []int32{1}}}
		}
		b := s.AppendTo(nil)
		topics, err := group.ConsumerSubscription(b)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, []string{"audit", "orders"}, topics)
		for i := range b {
			_, _ = group.ConsumerSubscription(b[:i])
		}

		a := kmsg.NewConsumerMemberAssignment()
		a.Version = v
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "orders", Partitions: []int32{3, 1}}, {Topic: "audit", Partitions: []int32{0}}}
		b = a.AppendTo(nil)
		got, err := group.ConsumerAssignment(b)
		require.NoError(t, err, "version %d", v)
		require.Equal(t, group.TopicPartitions{"orders": {1, 3}, "audit": {0}}, got)
		for i := 1; i < len(b)-4; i++ { // the last 4 bytes are the user data's length
			_, err := group.ConsumerAssignment(b[:i])
			require.Error(t, err, "version %d, %d of %d bytes", v, i, len(b))
		}
	}
}
