package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/runtime"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Partition is the offsets partition a Coordinator serves, as its broker
// provides it (runtime.Partition, the contract every coordinator's
// partition has).
type Partition = runtime.Partition

// Config configures one Coordinator.
type Config struct {
	// Partition is the offsets partition's number (for logs and errors).
	Partition int32
	// LeaderEpoch is the leader epoch the coordinator serves: it loads
	// the log led at it, and its writes are fenced at it.
	LeaderEpoch int32
	// SessionTimeout and HeartbeatInterval are every group's
	// (group.Config).
	SessionTimeout, HeartbeatInterval time.Duration
	// InitialRebalanceDelay holds a classic group's first join phase for
	// more members (Kafka's group.initial.rebalance.delay.ms).
	InitialRebalanceDelay time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
	// Metrics: nil counts nothing.
	Metrics *Metrics
	// Admit decides a call that would create a group this coordinator
	// does not know (CommitOffsets, TxnCommitOffsets, Heartbeat): a
	// non-nil error refuses the call, returned as is, and nothing is
	// created. When it admits, done is called once the call has created
	// the group or failed to (nil done: nothing to call). Calls on known
	// groups are not asked about. It is the one admission point of group
	// creation, whichever front door the call came through (the broker's
	// quotas: max_groups). Nil admits everything. Called without the
	// coordinator's locks held.
	Admit func(ctx context.Context, tenantID, group string) (done func(), err error)
}

// Metrics are what coordinators count, shared by every coordinator of a
// broker. The caller registers them.
type Metrics struct {
	// Rebalances counts rebalances (new target assignments), Revoked the
	// partitions members were asked to give up, in the groups coordinated.
	Rebalances, Revoked prometheus.Counter
	// WriteLatency observes each write to the offsets partition (acks=all).
	WriteLatency prometheus.Observer
}

// ErrGroupActive: the group has members and the request needs it empty
// (or comes from outside the group). Its text reads after the group's
// name: `group "g" has members: stop them first`.
var ErrGroupActive = errors.New("has members")

// GroupKey names a group: group ids are per tenant.
type GroupKey struct{ Tenant, Group string }

// TopicPartition names a partition by topic id, so a topic deleted and
// created again under the same name does not inherit its predecessor's
// offsets.
type TopicPartition struct {
	TopicID   string
	Partition int32
}

// Committed is a group's committed offset on one partition.
type Committed struct {
	Topic      string // the topic's name at commit time
	Offset     *sluicev1.PartitionOffset
	CommitTime time.Time
	logOffset  int64 // where the commit is in the offsets partition: later wins
}

// OffsetCommit is one partition's offset to commit: Offset's Topic (the
// topic's current name), Partition, Offset, LeaderEpoch and Metadata are
// recorded under the topic id.
type OffsetCommit struct {
	TopicID string
	Offset  *sluicev1.PartitionOffset
}

// groupState is what a coordinator knows of one group: its committed
// offsets and its static members' incarnations (persisted), and its members
// (in memory only: after a coordinator failover members rejoin, reporting
// the partitions they own, and keep them).
type groupState struct {
	offsets map[TopicPartition]Committed
	// instances: instance id → the member id of its latest incarnation,
	// as written to the offsets partition. Given to members when it is
	// created (group.Group.RestoreInstance).
	instances map[string]string
	// pending: producer id → the offsets its open transaction committed
	// (TxnCommitOffsets), not yet the group's until its commit marker.
	pending map[int64]map[TopicPartition]pendingOffset
	// offsetsDeleted: the log offset of each partition's last offset
	// deletion (DeleteOffsets), so that an older commit applied after it
	// does not bring the offset back.
	offsetsDeleted map[TopicPartition]int64
	members        *group.Group // nil until the first heartbeat at this coordinator
	// classic: the group's members of Kafka's classic protocol (nil until
	// the first JoinGroup here); classicArmed: the deadline a timer is
	// armed for.
	classic      *group.Classic
	classicArmed time.Time
	// rebalances and revoked are the members' counters last reported to
	// Metrics.
	rebalances, revoked int64
}

// Coordinator is the group coordinator of one offsets partition its
// broker leads, at one leader epoch: a Shard hosted by the runtime. Call
// Load before anything else (and again after it failed); the other
// methods need it done.
type Coordinator struct {
	h   *runtime.Hosted[*Shard]
	cfg Config
	w   *waiters // the shard's waiting classic requests
}

// New returns the coordinator of p at cfg.LeaderEpoch, not loaded yet.
func New(p Partition, cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var write prometheus.Observer
	if cfg.Metrics != nil {
		write = cfg.Metrics.WriteLatency
	}
	shard := NewShard(ShardConfig{SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval, InitialRebalanceDelay: cfg.InitialRebalanceDelay, Logger: cfg.Logger, Metrics: cfg.Metrics})
	return &Coordinator{cfg: cfg, w: shard.waiting, h: runtime.New(p, shard, runtime.Config{
		Name: fmt.Sprintf("offsets partition %d", cfg.Partition), LeaderEpoch: cfg.LeaderEpoch,
		Logger: cfg.Logger, WriteLatency: write,
	})}
}

// Epoch is the leader epoch the coordinator serves.
func (c *Coordinator) Epoch() int32 { return c.h.Epoch() }

// Partition is the partition it is hosted on.
func (c *Coordinator) Partition() Partition { return c.h.Partition() }

// Current reports whether its broker still leads the partition at the
// epoch the coordinator serves.
func (c *Coordinator) Current() bool { return c.h.Current() }

// Load rebuilds the coordinator's state from its offsets partition, once:
// every record from the log start to the log end (a new leader's whole log
// is what it will commit). It fails, to be called again, while the
// partition is not ready (Partition.CheckLeader's error) or when ctx ends.
func (c *Coordinator) Load(ctx context.Context) error { return c.h.Load(ctx) }

// Run expires members whose session ended, every HeartbeatInterval, until
// ctx ends or Close.
func (c *Coordinator) Run(ctx context.Context) { c.h.Run(ctx) }

// Close stops the coordinator's timers (its partition moved).
func (c *Coordinator) Close() { c.h.Close() }

// read runs fn against the shard; zero before it is loaded.
func read[R any](c *Coordinator, fn func(s *Shard) R) R {
	r, _ := runtime.Read(c.h, fn)
	return r
}

// writeOp runs op under the group's key, exclusively.
func writeOp[R any](ctx context.Context, c *Coordinator, gk GroupKey, op func(s *Shard, now time.Time) (runtime.Result[R], error)) (R, error) {
	return runtime.Write(ctx, c.h, opKey(gk), op)
}

// memberOp runs op, which writes nothing, under no key: against the
// state, never behind another operation's append.
func memberOp[R any](c *Coordinator, op func(s *Shard, now time.Time) (runtime.Result[R], error)) (R, error) {
	return runtime.Write(context.Background(), c.h, "", op)
}

// admit asks Config.Admit about a call that would create the group when
// the coordinator does not know it; the returned done is never nil.
func (c *Coordinator) admit(ctx context.Context, gk GroupKey) (done func(), err error) {
	noop := func() {}
	if c.cfg.Admit == nil || read(c, func(s *Shard) bool { return s.Known(gk) }) {
		return noop, nil
	}
	done, err = c.cfg.Admit(ctx, gk.Tenant, gk.Group)
	if err != nil {
		return noop, err
	}
	if done == nil {
		done = noop
	}
	return done, nil
}

// CommitOffsets writes the group's offsets, stamped now, to the offsets
// partition (acks=all) and answers once they are committed; a later commit
// of the same partition wins (in log order). Commits of different
// partitions of the group are written at once, those of one partition one
// at a time. The caller checks the committer first (CheckCommitter) and
// the offsets against the partitions. A partition with offsets pending in
// an open transaction is refused (ErrUnstableOffset, wrapped): retry once
// the transaction ends. A group unknown here is created only when
// Config.Admit admits it.
func (c *Coordinator) CommitOffsets(ctx context.Context, now time.Time, tenantID, groupID string, offsets []OffsetCommit) error {
	gk := GroupKey{tenantID, groupID}
	done, err := c.admit(ctx, gk)
	if err != nil {
		return err
	}
	defer done()
	_, err = runtime.WriteShared(ctx, c.h, opKey(gk), commitKeys(offsets), func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		return s.CommitOffsets(gk, offsets, now)
	})
	return err
}

// DeleteGroup writes the group's deletion to the offsets partition
// (acks=all): its committed offsets and static-member incarnations are
// gone, here and at every coordinator that loads the partition later.
// A group with offsets pending in an open transaction is refused
// (ErrUnstableOffset, wrapped): retry once the transaction ends.
func (c *Coordinator) DeleteGroup(ctx context.Context, tenantID, groupID string) error {
	gk := GroupKey{tenantID, groupID}
	_, err := writeOp(ctx, c, gk, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) { return s.DeleteGroup(gk) })
	return err
}

// DeleteOffsets deletes the group's committed offsets of parts, but for
// those of topics its members subscribe to (Shard.DeleteOffsets), written
// to the offsets partition (acks=all); it answers which parts were left
// for that reason.
func (c *Coordinator) DeleteOffsets(ctx context.Context, tenantID, groupID string, parts []OffsetDeletion, classic ClassicSubscriptions) ([]bool, error) {
	gk := GroupKey{tenantID, groupID}
	return writeOp(ctx, c, gk, func(s *Shard, now time.Time) (runtime.Result[[]bool], error) {
		return s.DeleteOffsets(gk, parts, classic, now)
	})
}

// TxnCommitOffsets writes offsets committed inside producerID's
// transaction at epoch to the offsets partition (acks=all) and answers once
// they are pending there (Shard.TxnCommitOffsets). The caller checks the
// committer first (CheckCommitter), the offsets against the partitions,
// and that the group is in the producer's current transaction at its
// transaction coordinator (KIP-890's verification). A group unknown here
// is created only when Config.Admit admits it.
func (c *Coordinator) TxnCommitOffsets(ctx context.Context, now time.Time, tenantID, groupID string, producerID int64, epoch int16, offsets []OffsetCommit) error {
	if producerID < 0 || epoch < 0 {
		return fmt.Errorf("transactional offsets of group %q: producer id %d epoch %d: must not be negative", groupID, producerID, epoch)
	}
	gk := GroupKey{tenantID, groupID}
	done, err := c.admit(ctx, gk)
	if err != nil {
		return err
	}
	defer done()
	_, err = writeOp(ctx, c, gk, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		return s.TxnCommitOffsets(gk, producerID, epoch, offsets, now)
	})
	return err
}

// WriteTxnMarker ends producerID's transaction in the group's offsets
// (Shard.WriteTxnMarker), written to the offsets partition (acks=all) and
// applied before it returns.
func (c *Coordinator) WriteTxnMarker(ctx context.Context, tenantID, groupID string, producerID int64, epoch int16, coordinatorEpoch int32, commit, keptEpoch bool) error {
	gk := GroupKey{tenantID, groupID}
	_, err := writeOp(ctx, c, gk, func(s *Shard, now time.Time) (runtime.Result[struct{}], error) {
		return s.WriteTxnMarker(gk, producerID, epoch, coordinatorEpoch, commit, keptEpoch, now)
	})
	return err
}

// Offsets returns a copy of the group's committed offsets (nil when none).
func (c *Coordinator) Offsets(tenantID, groupID string) map[TopicPartition]Committed {
	return read(c, func(s *Shard) map[TopicPartition]Committed { return s.Offsets(GroupKey{tenantID, groupID}) })
}

// CommittedOffsets returns a copy of every group's committed offsets
// (groups without any are left out).
func (c *Coordinator) CommittedOffsets() map[GroupKey]map[TopicPartition]Committed {
	return read(c, (*Shard).CommittedOffsets)
}

// StableOffsets returns a copy of the group's committed offsets, as
// Offsets does, unless a transaction holds pending offsets for one of tps
// (for any of the group's partitions when tps is nil): then
// ErrUnstableOffset, wrapped, so that a consumer taking a partition over
// does not resume from the offset before a transaction about to commit.
func (c *Coordinator) StableOffsets(tenantID, groupID string, tps []TopicPartition) (map[TopicPartition]Committed, error) {
	type stable struct {
		offsets map[TopicPartition]Committed
		err     error
	}
	r := read(c, func(s *Shard) stable {
		o, err := s.StableOffsets(GroupKey{tenantID, groupID}, tps)
		return stable{o, err}
	})
	return r.offsets, r.err
}

// PendingOffsets returns a copy of the group's pending transactional
// offsets: per producer id, its offsets not committed yet.
func (c *Coordinator) PendingOffsets(tenantID, groupID string) map[int64]map[TopicPartition]Committed {
	return read(c, func(s *Shard) map[int64]map[TopicPartition]Committed {
		return s.PendingOffsets(GroupKey{tenantID, groupID})
	})
}

// CheckCommitter allows a commit from a group member for partitions it
// owns at its epoch (Shard.CheckCommitter), now.
func (c *Coordinator) CheckCommitter(tenantID, groupID, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset) error {
	now := time.Now()
	return read(c, func(s *Shard) error {
		return s.CheckCommitter(GroupKey{tenantID, groupID}, memberID, instanceID, memberEpoch, offsets, now)
	})
}

// Heartbeat runs one member heartbeat (Shard.Heartbeat), creating the
// group with assignor on first use; topics is the tenant's current view of
// partition counts. A static member's join that makes a new incarnation is
// answered only once the incarnation is written to the offsets partition;
// the other heartbeats write nothing and wait for no write of the group.
// A group unknown here is created only when Config.Admit admits it.
func (c *Coordinator) Heartbeat(ctx context.Context, now time.Time, tenantID, groupID, assignor string, topics group.Topics, req group.HeartbeatRequest) (group.HeartbeatResponse, error) {
	gk := GroupKey{tenantID, groupID}
	done, err := c.admit(ctx, gk)
	if err != nil {
		return group.HeartbeatResponse{}, err
	}
	defer done()
	persist := false
	op := func(s *Shard, _ time.Time) (runtime.Result[HeartbeatResult], error) {
		r, err := s.Heartbeat(gk, assignor, topics, req, now)
		persist = r.Response.Persist
		return r, err
	}
	var res HeartbeatResult
	if staticJoin(req) {
		res, err = writeOp(ctx, c, gk, op)
	} else {
		res, err = memberOp(c, op)
	}
	if err != nil && persist {
		return group.HeartbeatResponse{}, fmt.Errorf("record static member %q of group %q: %w", req.InstanceID, groupID, err)
	}
	return res.HeartbeatResponse, err
}

// Leave removes a member (group.Group.Leave).
func (c *Coordinator) Leave(now time.Time, tenantID, groupID, memberID, instanceID string) error {
	gk := GroupKey{tenantID, groupID}
	_, err := memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		return runtime.Result[struct{}]{}, s.Leave(gk, memberID, instanceID, now)
	})
	return err
}

// Expire removes members whose session expired at now, in every group
// (what Run does every HeartbeatInterval).
func (c *Coordinator) Expire(now time.Time) {
	_, _ = memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		s.Expire(now)
		return runtime.Result[struct{}]{}, nil
	})
}

// Summaries lists a tenant's groups on this coordinator (in no order).
func (c *Coordinator) Summaries(now time.Time, tenantID string) []*sluicev1.GroupSummary {
	return read(c, func(s *Shard) []*sluicev1.GroupSummary { return s.Summaries(tenantID, now) })
}

// Describe returns the group's membership (zero when it has none here)
// and a copy of its committed offsets; ok is false for a group unknown
// here.
func (c *Coordinator) Describe(now time.Time, tenantID, groupID string) (d group.GroupDescription, offsets map[TopicPartition]Committed, ok bool) {
	r := read(c, func(s *Shard) Description { return s.Describe(GroupKey{tenantID, groupID}, now) })
	return r.Group, r.Offsets, r.Known
}

// GroupsByTenant counts the groups this coordinator knows (with committed
// offsets, static members or members here), per tenant.
func (c *Coordinator) GroupsByTenant() map[string]int {
	if m := read(c, (*Shard).GroupsByTenant); m != nil {
		return m
	}
	return map[string]int{}
}

// Active reports whether the group has members.
func (c *Coordinator) Active(now time.Time, tenantID, groupID string) bool {
	return read(c, func(s *Shard) bool { return s.Active(GroupKey{tenantID, groupID}, now) })
}
