// Package cluster is a data-plane broker's view of the cluster: which
// brokers exist (Node), which topics each tenant has, with their
// configuration (Topic, TopicConfig), and where each partition's replicas,
// leader and in-sync replicas are (Partition). A View is immutable once
// published; the broker swaps in a new one when the control plane's
// assignment stream brings a change, and the data-plane services resolve
// every request against the View they loaded at its start.
package cluster

import (
	"maps"
	"slices"

	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// PartKey names a partition of a topic by the topic's id.
type PartKey struct {
	TopicID   string
	Partition int32
}

// View is a broker's view of the cluster: built whole from an assignment
// snapshot of the control plane, or copied on write from the view before
// by a delta (WithDelta). Never mutated after it is published: every
// reader of one view sees one version of the cluster, and its maps and
// slices are read-only.
type View struct {
	Version int64
	// Loaded: a view from the control plane (false for the empty view a
	// broker starts with, before its first assignments arrive).
	Loaded  bool
	Brokers map[int32]Node
	// ByTenant maps tenant id → topic name → topic.
	ByTenant map[string]map[string]*Topic
	ByID     map[string]*Topic
}

// Node is a broker the view names: its id, the address its clients and
// peers reach it at, the address clients outside the cluster reach it at
// (its external listener's; empty without one), and its rack.
type Node struct {
	ID              int32
	Address         string
	ExternalAddress string
	// KafkaAddress is its Kafka listener's advertised host:port; empty
	// without one.
	KafkaAddress string
	Rack         string
}

// TopicConfig is the part of a topic's configuration the data plane
// applies.
type TopicConfig struct {
	MinISR          int32
	MaxMessageBytes int32
	RetentionMs     int64
	RetentionBytes  int64
	// With tiered storage: how much stays on broker disks (-2: as much as
	// retentionMs / retentionBytes keep).
	LocalRetentionMs    int64
	LocalRetentionBytes int64
	// Unclean: the topic opted in to Unclean leader election, so a leader
	// may lack committed records and followers must follow it anyway.
	Unclean bool
	// LogAppendTime: message.timestamp.type is LogAppendTime.
	LogAppendTime bool
}

// Topic is a tenant's topic and its partitions.
type Topic struct {
	TenantID   string
	ID         string
	Name       string
	Config     TopicConfig
	Partitions []Partition // index = partition number
}

// Partition is where a partition's replicas are: the leader, its leader
// epoch, the in-sync replicas and the partition epoch the controller
// fences changes with. A partition the control plane has not assigned yet
// has Leader -1.
type Partition struct {
	TopicID        string // its topic's id, which NotLeader answers name
	Partition      int32
	Replicas       []int32
	Leader         int32
	LeaderEpoch    int32
	ISR            []int32
	PartitionEpoch int32
}

func EmptyView() *View {
	return &View{Brokers: map[int32]Node{}, ByTenant: map[string]map[string]*Topic{}, ByID: map[string]*Topic{}}
}

func (m *View) AddTopic(t *Topic) {
	if m.ByTenant[t.TenantID] == nil {
		m.ByTenant[t.TenantID] = map[string]*Topic{}
	}
	m.ByTenant[t.TenantID][t.Name] = t
	m.ByID[t.ID] = t
}

// WithDelta returns the view d (a delta whose base is m's version) makes of
// m, and the partitions it changed: those it lists, and every partition
// of the topics it deletes. m is left as is: the new view shares m's
// topics but those d touches, which are copied (with their partition
// lists) before they change, and copies the top-level maps, which hold
// pointers — no partition outside d is visited.
func (m *View) WithDelta(d *sluicev1.WatchAssignmentsResponse) (next *View, changed []PartKey) {
	next = &View{
		Version: d.GetMetadataVersion(), Loaded: true,
		Brokers:  NodesOf(d.GetBrokers()),
		ByTenant: maps.Clone(m.ByTenant),
		ByID:     maps.Clone(m.ByID),
	}
	ownTenant := map[string]bool{} // inner maps of byTenant copied already
	tenant := func(id string) map[string]*Topic {
		if !ownTenant[id] {
			next.ByTenant[id] = maps.Clone(next.ByTenant[id])
			if next.ByTenant[id] == nil {
				next.ByTenant[id] = map[string]*Topic{}
			}
			ownTenant[id] = true
		}
		return next.ByTenant[id]
	}
	for _, id := range d.GetDeletedTopicIds() {
		t, ok := next.ByID[id]
		if !ok {
			continue
		}
		delete(next.ByID, id)
		delete(tenant(t.TenantID), t.Name)
		for _, pm := range t.Partitions {
			changed = append(changed, PartKey{id, pm.Partition})
		}
	}
	copied := map[string]*Topic{} // topics of next that d writes
	for _, pa := range d.GetPartitions() {
		t := copied[pa.GetTopicId()]
		if t == nil {
			t = NewTopic(pa)
			if old, ok := next.ByID[t.ID]; ok {
				t.Partitions = slices.Clone(old.Partitions)
				if old.Name != t.Name || old.TenantID != t.TenantID {
					delete(tenant(old.TenantID), old.Name)
				}
			}
			copied[t.ID] = t
			next.ByID[t.ID] = t
			tenant(t.TenantID)[t.Name] = t
		}
		pm := t.SetPartition(pa)
		changed = append(changed, PartKey{t.ID, pm.Partition})
	}
	return next, changed
}

func NodesOf(bs []*sluicev1.BrokerEndpoint) map[int32]Node {
	out := make(map[int32]Node, len(bs))
	for _, br := range bs {
		out[br.GetBrokerId()] = Node{ID: br.GetBrokerId(), Address: br.GetAddress(), ExternalAddress: br.GetExternalAddress(), KafkaAddress: br.GetKafkaAddress(), Rack: br.GetRack()}
	}
	return out
}

// NewTopic is the topic of pa, without partitions.
func NewTopic(pa *sluicev1.PartitionAssignment) *Topic {
	c := pa.GetConfig()
	return &Topic{
		TenantID: pa.GetTenantId(), ID: pa.GetTopicId(), Name: pa.GetTopicName(),
		Config: TopicConfig{
			MinISR: c.GetMinInsyncReplicas(), MaxMessageBytes: c.GetMaxMessageBytes(),
			RetentionMs: c.GetRetentionMs(), RetentionBytes: c.GetRetentionBytes(),
			LocalRetentionMs: c.GetLocalRetentionMs(), LocalRetentionBytes: c.GetLocalRetentionBytes(),
			Unclean:       c.GetUncleanLeaderElectionEnable(),
			LogAppendTime: c.GetMessageTimestampType() == "LogAppendTime",
		},
	}
}

// SetPartition stores pa in t (unpublished), growing t's partitions with
// offline placeholders up to it.
func (t *Topic) SetPartition(pa *sluicev1.PartitionAssignment) Partition {
	pm := ToPartition(pa)
	for int(pm.Partition) >= len(t.Partitions) {
		t.Partitions = append(t.Partitions, Partition{TopicID: t.ID, Partition: int32(len(t.Partitions)), Leader: -1})
	}
	t.Partitions[pm.Partition] = pm
	return pm
}

func ToPartition(pa *sluicev1.PartitionAssignment) Partition {
	return Partition{
		TopicID: pa.GetTopicId(), Partition: pa.GetPartition(), Replicas: slices.Clone(pa.GetReplicas()), Leader: pa.GetLeader(),
		LeaderEpoch: pa.GetLeaderEpoch(), ISR: slices.Clone(pa.GetIsr()), PartitionEpoch: pa.GetPartitionEpoch(),
	}
}

// Topic resolves a Topic by name under a tenant: another tenant's Topic is
// simply not found.
func (m *View) Topic(tenantID, name string) (*Topic, bool) {
	t, ok := m.ByTenant[tenantID][name]
	return t, ok
}

func (p Partition) HasReplica(id int32) bool { return slices.Contains(p.Replicas, id) }

// Assignment is the partition's Assignment as its replica applies it.
func (p Partition) Assignment() partition.Assignment {
	return partition.Assignment{Replicas: p.Replicas, Leader: p.Leader, LeaderEpoch: p.LeaderEpoch, ISR: p.ISR, PartitionEpoch: p.PartitionEpoch}
}

// Replica is the part of the topic's configuration its replicas apply.
func (c TopicConfig) Replica() partition.TopicConfig {
	return partition.TopicConfig{
		MinISR: c.MinISR, RetentionMs: c.RetentionMs, RetentionBytes: c.RetentionBytes,
		LocalRetentionMs: c.LocalRetentionMs, LocalRetentionBytes: c.LocalRetentionBytes, Unclean: c.Unclean,
		LogAppendTime: c.LogAppendTime,
	}
}

// SortedNodes is the view's brokers by id.
func SortedNodes(m *View) []Node {
	out := make([]Node, 0, len(m.Brokers))
	for _, bm := range m.Brokers {
		out = append(out, bm)
	}
	slices.SortFunc(out, func(a, b Node) int { return int(a.ID) - int(b.ID) })
	return out
}
