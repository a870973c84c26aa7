package cluster

import (
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
)

// Resolve finds a tenant's topic partition in the view: a topic of another
// tenant is simply not found. It checks what the request names (an empty
// topic, a negative partition) and answers a topic or partition the view
// does not know with TopicNotFound or PartitionNotFound.
func (v *View) Resolve(tenantID, topic string, partition int32) (*Topic, Partition, error) {
	if topic == "" {
		return nil, Partition{}, derr.New(derr.InvalidRequest, "topic: must not be empty")
	}
	t, ok := v.Topic(tenantID, topic)
	if !ok {
		return nil, Partition{}, v.TopicNotFound(topic)
	}
	if partition < 0 {
		return nil, Partition{}, derr.New(derr.InvalidRequest, "partition: must not be negative; got %d", partition)
	}
	if int(partition) >= len(t.Partitions) {
		return nil, Partition{}, PartitionNotFound(t, partition)
	}
	return t, t.Partitions[partition], nil
}

// TopicNotFound is the answer for a topic the view does not name:
// UnknownTopicOrPartition, or Unavailable while the view is not loaded
// (the broker has just started; another broker, or this one shortly,
// knows the topic).
func (v *View) TopicNotFound(name string) error {
	if !v.Loaded {
		return derr.New(derr.Unavailable, "topic %q: this broker is starting and has not received its assignments yet; retry", name)
	}
	return derr.New(derr.UnknownTopicOrPartition, "topic %q not found", name)
}

// PartitionNotFound is the answer for a partition beyond the topic's count
// in the view: UnknownTopicOrPartition, as for a topic the view does not
// name. Partitions are only ever added, so a client that knows of the
// partition may be ahead of this broker: the control plane added it and
// the assignment stream has not brought it here yet. Clients retry
// UnknownTopicOrPartition when their metadata names the partition, as
// they do for a new topic.
func PartitionNotFound(t *Topic, partition int32) error {
	return derr.New(derr.UnknownTopicOrPartition, "topic %q partition %d not found: this broker knows partitions 0..%d (partitions added just now reach every broker within moments)", t.Name, partition, len(t.Partitions)-1)
}

// NotLeader is the answer of broker self for partition pm it does not lead
// (or leads at another epoch than pm says): the leader as the view knows
// it, with its address, for the client to go to.
func (v *View) NotLeader(self int32, pm Partition) error {
	return &partition.NotLeaderError{TopicID: pm.TopicID, Partition: pm.Partition, Leader: pm.Leader, Epoch: pm.LeaderEpoch, Self: pm.Leader == self, Address: v.Brokers[pm.Leader].Address}
}
