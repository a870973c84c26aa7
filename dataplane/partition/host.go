package partition

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition/fetcher"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tiered"
)

// Host is what a replica needs of the broker that hosts it: one Host
// serves every replica of a broker. Its funcs are called from the
// replicas' goroutines, never with a replica's lock held across a
// network call (BrokerEpoch and LeaderAddress are called under it and
// must not block).
type Host struct {
	// ID is this broker's id.
	ID int32
	// BrokerEpoch is the epoch of the broker's current registration: a
	// follower sends it with every fetch, a leader with its ISR proposals.
	BrokerEpoch func() int64
	// Logger logs the replicas' role changes and failures.
	Logger *slog.Logger
	// Metrics counts what replicas do; nil counts nothing.
	Metrics *Metrics

	// The log of every replica: segment size, the longest a segment stays
	// active (a topic's short local retention shortens it), the flush
	// policy and its interval.
	SegmentBytes  int64
	SegmentAge    time.Duration
	Flush         log.FlushPolicy
	FlushInterval time.Duration
	// Files bounds the segment files every replica's log holds open
	// (shared by all of them); nil: no limit.
	Files *log.FileCache
	// ReplicaLagTimeMax: a follower not caught up for this long leaves
	// the ISR of a leader here.
	ReplicaLagTimeMax time.Duration

	// LeaderAddress is the address of broker id in the broker's view of
	// the cluster ("" when it has none), for NotLeader errors.
	LeaderAddress func(id int32) string
	// ReplicaClient returns the client of broker leader's replica service
	// that the fetcher of that leader's partitions fetches with
	// (FetchReplicas).
	ReplicaClient func(leader int32) fetcher.LeaderClient
	// AlterPartition sends a leader's ISR proposal to the controller. It
	// returns the partition's new state, or the controller's refusal as a
	// domain error (derr.InvalidUpdateVersion for a stale partition epoch,
	// else the generic kind of the refusal: derr.FailedPrecondition,
	// derr.InvalidRequest, ...) with the partition's current state when the
	// refusal is about the partition, or the call's failure (nil state).
	AlterPartition func(context.Context, *sluicev1.AlterPartitionRequest) (*sluicev1.PartitionAssignment, error)
	// AlterPartitions sends many leaders' ISR proposals to the controller
	// in one call (AlterISRs): one result per item, in order, each as
	// AlterPartition answers; or the call's failure
	// (derr.UnsupportedVersion: a control plane that does not know it).
	// nil sends each alone with AlterPartition.
	AlterPartitions func(context.Context, *sluicev1.AlterPartitionsRequest) ([]AlterResult, error)
	// FailStop stops the broker after the local log of a replica failed
	// (a write or sync was refused, or its producer state could not be
	// rebuilt): the broker gives up its lease rather than serve a disk it
	// cannot trust. It may be called more than once.
	FailStop func(topicID string, partition int32, err error)
	// Tier is the broker's tiered storage, nil when off; only replicas
	// opened with Spec.Tiered use it.
	Tier *tiered.Tier

	// fetchersOnce makes fetchers, the follower side of the broker's
	// replicas (dataplane/partition/fetcher): one fetcher, with one fetch
	// session, per leader broker. They take the Host's fields as they are
	// when the first replica follows.
	fetchersOnce sync.Once
	fetchers     *fetcher.Fetchers
}

// AlterResult is the controller's answer to one item of AlterPartitions:
// Err nil and Partition the new state when accepted; else the refusal
// and, when it is about the partition, its current state.
type AlterResult struct {
	Partition *sluicev1.PartitionAssignment
	Err       error
}

// Metrics are the counters replicas update, registered by the broker.
type Metrics struct {
	// Duplicates counts idempotent batches answered as already written.
	Duplicates prometheus.Counter
	// SequenceErrors counts idempotent batches refused, by reason
	// (out_of_order_sequence, producer_fenced, duplicate_sequence,
	// invalid_sequence).
	SequenceErrors *prometheus.CounterVec
	// ISRShrinks and ISRExpands count the ISR changes the controller
	// confirmed to a leader here.
	ISRShrinks prometheus.Counter
	ISRExpands prometheus.Counter
}

// Spec names a replica and where its log lives.
type Spec struct {
	TenantID string
	TopicID  string
	// Partition is the partition's number within its topic.
	Partition int32
	// Dir is the replica's directory: its log segments and the
	// producer-state snapshots (and, from brokers before the broker-wide
	// HW checkpoint, a legacy per-partition one).
	Dir string
	// HW is the replica's high watermark in the broker's checkpoint
	// (hwcheckpoint.Read) when HWKnown is set. Otherwise Open reads the
	// legacy per-partition checkpoint file, if any (a broker upgraded from
	// a version that kept one), else the HW starts at 0.
	HW      int64
	HWKnown bool
	// Config is the topic's configuration when the replica opens, for its
	// log's retention and segment age until the first Update.
	Config TopicConfig
	// Tiered copies the replica's closed segments to Host.Tier and reads
	// below the local log start from it.
	Tiered bool
}

// Assignment is the partition's state as the controller last published
// it: the input a role's state machine starts from. A leader's ISR moves
// on with the AlterPartition answers it applies; Status reads the
// leader's.
type Assignment struct {
	Replicas       []int32
	Leader         int32 // -1: offline
	LeaderEpoch    int32
	ISR            []int32
	PartitionEpoch int32
}

// TopicConfig is the part of a topic's configuration a replica applies.
type TopicConfig struct {
	// MinISR refuses acks=all writes while the ISR is smaller.
	MinISR int32
	// RetentionMs and RetentionBytes are the total retention (≤ 0: keep);
	// with tiered storage LocalRetentionMs and LocalRetentionBytes bound
	// what stays on the broker's disk (≤ 0: as much as the total keeps).
	RetentionMs         int64
	RetentionBytes      int64
	LocalRetentionMs    int64
	LocalRetentionBytes int64
	// Unclean: the topic opted in to unclean leader election, so a
	// leader may lack committed records and followers truncate them.
	Unclean bool
	// LogAppendTime: the leader stamps each batch it appends with the
	// time of the append (message.timestamp.type=LogAppendTime).
	LogAppendTime bool
}

// Role is what a replica does for its partition.
type Role int

const (
	RoleNone Role = iota
	RoleLeader
	RoleFollower
)

func (r Role) String() string {
	switch r {
	case RoleLeader:
		return "leader"
	case RoleFollower:
		return "follower"
	}
	return "none"
}

func (h *Host) failStop(p *Replica, err error) { h.FailStop(p.topicID, p.id, err) }

// fetcherSet returns the broker's fetchers, made at the first call.
func (h *Host) fetcherSet() *fetcher.Fetchers {
	h.fetchersOnce.Do(func() {
		h.fetchers = fetcher.New(fetcher.Config{ID: h.ID, BrokerEpoch: h.BrokerEpoch, Client: h.ReplicaClient,
			Logger: h.Logger, Flush: h.Flush, FailStop: h.FailStop})
	})
	return h.fetchers
}

// Fetchers counts the leader brokers this broker's replicas fetch from:
// one fetcher (and one goroutine, while its context lives) each.
func (h *Host) Fetchers() int { return h.fetcherSet().Len() }

// follower is a replica as the fetcher of its leader sees it
// (fetcher.Replica).
type follower struct{ p *Replica }

func (f follower) TopicID() string  { return f.p.topicID }
func (f follower) Partition() int32 { return f.p.id }
func (f follower) Log() *log.Log    { return f.p.log }

func (f follower) Next(fol *replica.Follower, brokerEpoch int64) (replica.FetchRequest, bool) {
	p := f.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fol != fol {
		return replica.FetchRequest{}, false
	}
	fol.SetBrokerEpoch(brokerEpoch)
	return fol.Next(logState(p.log)), true
}

func (f follower) Apply(fol *replica.Follower, q replica.FetchRequest, res *sluicev1.FetchReplicaResponse) error {
	return f.p.applyFetch(fol, q, res)
}
