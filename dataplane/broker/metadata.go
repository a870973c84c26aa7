package broker

import (
	"slices"

	"github.com/sluicemq/sluice/dataplane/partition"
)

// clusterMeta is the broker's view of the cluster, replaced whole on every
// assignment snapshot from the control plane. Never mutated after publish.
type clusterMeta struct {
	version int64
	// loaded: a view from the control plane (false for the empty view a
	// broker starts with, before its first assignments arrive).
	loaded  bool
	brokers map[int32]brokerMeta
	// byTenant maps tenant id → topic name → topic.
	byTenant map[string]map[string]*topicMeta
	byID     map[string]*topicMeta
}

type brokerMeta struct {
	id      int32
	address string
	rack    string
}

type topicConfig struct {
	minISR          int32
	maxMessageBytes int32
	retentionMs     int64
	retentionBytes  int64
	// With tiered storage: how much stays on broker disks (-2: as much as
	// retentionMs / retentionBytes keep).
	localRetentionMs    int64
	localRetentionBytes int64
	// unclean: the topic opted in to unclean leader election, so a leader
	// may lack committed records and followers must follow it anyway.
	unclean bool
}

type topicMeta struct {
	tenantID   string
	id         string
	name       string
	config     topicConfig
	partitions []partMeta // index = partition number
}

type partMeta struct {
	partition      int32
	replicas       []int32
	leader         int32
	leaderEpoch    int32
	isr            []int32
	partitionEpoch int32
}

func emptyMeta() *clusterMeta {
	return &clusterMeta{brokers: map[int32]brokerMeta{}, byTenant: map[string]map[string]*topicMeta{}, byID: map[string]*topicMeta{}}
}

func (m *clusterMeta) addTopic(t *topicMeta) {
	if m.byTenant[t.tenantID] == nil {
		m.byTenant[t.tenantID] = map[string]*topicMeta{}
	}
	m.byTenant[t.tenantID][t.name] = t
	m.byID[t.id] = t
}

// topic resolves a topic by name under a tenant: another tenant's topic is
// simply not found.
func (m *clusterMeta) topic(tenantID, name string) (*topicMeta, bool) {
	t, ok := m.byTenant[tenantID][name]
	return t, ok
}

func (p partMeta) hasReplica(id int32) bool { return slices.Contains(p.replicas, id) }

// assignment is the partition's assignment as its replica applies it.
func (p partMeta) assignment() partition.Assignment {
	return partition.Assignment{Replicas: p.replicas, Leader: p.leader, LeaderEpoch: p.leaderEpoch, ISR: p.isr, PartitionEpoch: p.partitionEpoch}
}

// replica is the part of the topic's configuration its replicas apply.
func (c topicConfig) replica() partition.TopicConfig {
	return partition.TopicConfig{
		MinISR: c.minISR, RetentionMs: c.retentionMs, RetentionBytes: c.retentionBytes,
		LocalRetentionMs: c.localRetentionMs, LocalRetentionBytes: c.localRetentionBytes, Unclean: c.unclean,
	}
}
