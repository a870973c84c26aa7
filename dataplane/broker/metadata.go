package broker

import (
	"maps"
	"slices"

	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// clusterMeta is the broker's view of the cluster: built whole from an
// assignment snapshot of the control plane (toClusterMeta), or copied on
// write from the view before by a delta (withDelta). Never mutated after
// publish (Broker.meta), so every reader of one loaded view sees one
// version of the cluster.
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
	topicID        string // its topic's id, which NotLeader answers name
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

// withDelta returns the view d (a delta whose base is m's version) makes of
// m, and the partitions it changed: those it lists, and every partition
// of the topics it deletes. m is left as is: the new view shares m's
// topics but those d touches, which are copied (with their partition
// lists) before they change, and copies the top-level maps, which hold
// pointers — no partition outside d is visited.
func (m *clusterMeta) withDelta(d *sluicev1.WatchAssignmentsResponse) (next *clusterMeta, changed []partKey) {
	next = &clusterMeta{
		version: d.GetMetadataVersion(), loaded: true,
		brokers:  brokersOf(d.GetBrokers()),
		byTenant: maps.Clone(m.byTenant),
		byID:     maps.Clone(m.byID),
	}
	ownTenant := map[string]bool{} // inner maps of byTenant copied already
	tenant := func(id string) map[string]*topicMeta {
		if !ownTenant[id] {
			next.byTenant[id] = maps.Clone(next.byTenant[id])
			if next.byTenant[id] == nil {
				next.byTenant[id] = map[string]*topicMeta{}
			}
			ownTenant[id] = true
		}
		return next.byTenant[id]
	}
	for _, id := range d.GetDeletedTopicIds() {
		t, ok := next.byID[id]
		if !ok {
			continue
		}
		delete(next.byID, id)
		delete(tenant(t.tenantID), t.name)
		for _, pm := range t.partitions {
			changed = append(changed, partKey{id, pm.partition})
		}
	}
	copied := map[string]*topicMeta{} // topics of next that d writes
	for _, pa := range d.GetPartitions() {
		t := copied[pa.GetTopicId()]
		if t == nil {
			t = newTopicMeta(pa)
			if old, ok := next.byID[t.id]; ok {
				t.partitions = slices.Clone(old.partitions)
				if old.name != t.name || old.tenantID != t.tenantID {
					delete(tenant(old.tenantID), old.name)
				}
			}
			copied[t.id] = t
			next.byID[t.id] = t
			tenant(t.tenantID)[t.name] = t
		}
		pm := t.setPartition(pa)
		changed = append(changed, partKey{t.id, pm.partition})
	}
	return next, changed
}

func brokersOf(bs []*sluicev1.BrokerEndpoint) map[int32]brokerMeta {
	out := make(map[int32]brokerMeta, len(bs))
	for _, br := range bs {
		out[br.GetBrokerId()] = brokerMeta{id: br.GetBrokerId(), address: br.GetAddress(), rack: br.GetRack()}
	}
	return out
}

// newTopicMeta is the topic of pa, without partitions.
func newTopicMeta(pa *sluicev1.PartitionAssignment) *topicMeta {
	c := pa.GetConfig()
	return &topicMeta{
		tenantID: pa.GetTenantId(), id: pa.GetTopicId(), name: pa.GetTopicName(),
		config: topicConfig{
			minISR: c.GetMinInsyncReplicas(), maxMessageBytes: c.GetMaxMessageBytes(),
			retentionMs: c.GetRetentionMs(), retentionBytes: c.GetRetentionBytes(),
			localRetentionMs: c.GetLocalRetentionMs(), localRetentionBytes: c.GetLocalRetentionBytes(),
			unclean: c.GetUncleanLeaderElectionEnable(),
		},
	}
}

// setPartition stores pa in t (unpublished), growing t's partitions with
// offline placeholders up to it.
func (t *topicMeta) setPartition(pa *sluicev1.PartitionAssignment) partMeta {
	pm := toPartMeta(pa)
	for int(pm.partition) >= len(t.partitions) {
		t.partitions = append(t.partitions, partMeta{topicID: t.id, partition: int32(len(t.partitions)), leader: -1})
	}
	t.partitions[pm.partition] = pm
	return pm
}

func toPartMeta(pa *sluicev1.PartitionAssignment) partMeta {
	return partMeta{
		topicID: pa.GetTopicId(), partition: pa.GetPartition(), replicas: slices.Clone(pa.GetReplicas()), leader: pa.GetLeader(),
		leaderEpoch: pa.GetLeaderEpoch(), isr: slices.Clone(pa.GetIsr()), partitionEpoch: pa.GetPartitionEpoch(),
	}
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
