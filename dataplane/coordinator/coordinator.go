package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// Partition is the offsets partition a Coordinator serves, as its broker
// provides it: the local replica's log to rebuild from, and the replicated
// write path. Every method may be called concurrently.
type Partition interface {
	// LogStartOffset, LEO and Read read the local replica's log, as
	// dataplane/log.Log does: Read returns whole batches from the one
	// holding offset, at most about maxBytes (at least one batch).
	LogStartOffset() int64
	LEO() int64
	Read(offset int64, maxBytes int) ([]byte, error)
	// CheckLeader returns nil when this replica leads the partition and
	// its high watermark has reached the start of its leader epoch (so
	// every record in its log is one it commits), and otherwise the error
	// to answer (not the leader; the HW still catching up), which a
	// caller may retry.
	CheckLeader() error
	// AppendAcksAll appends batch as the leader at leader epoch epoch and
	// returns its base offset once every ISR member has it (acks=all). It
	// fails, and the records count as not written, when this replica does
	// not lead at epoch, or when the ISR does not acknowledge them in
	// time.
	AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (base int64, err error)
	// Leads reports whether this replica still leads the partition at
	// leader epoch epoch.
	Leads(epoch int32) bool
}

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
	members *group.Group // nil until the first heartbeat at this coordinator
	// rebalances and revoked are the members' counters last reported to
	// Metrics.
	rebalances, revoked int64
}

// Coordinator serves the groups of one offsets partition its broker leads,
// loaded at one leader epoch. Call Load before anything else (and again
// after it failed); the other methods need it done.
type Coordinator struct {
	p   Partition
	cfg Config

	// staticJoins serialises static members' joins with the write of the
	// incarnation they create, so that the offsets partition records
	// incarnations in the order the groups made them (the last one written
	// is the current one). Taken before mu, never while holding it.
	staticJoins sync.Mutex
	// txnOps serialise, per (group, producer id), a transactional write's
	// check with its append and apply (TxnCommitOffsets, WriteTxnMarker):
	// a marker never comes between an offset commit's fencing check and
	// its record. Taken before mu, never while holding it; one at a time.
	txnOps [64]sync.Mutex
	mu     sync.Mutex
	st     state // st.groups nil until loaded
}

// New returns the coordinator of p at cfg.LeaderEpoch, not loaded yet.
func New(p Partition, cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Coordinator{p: p, cfg: cfg}
}

// Epoch is the leader epoch the coordinator serves.
func (c *Coordinator) Epoch() int32 { return c.cfg.LeaderEpoch }

// Current reports whether its broker still leads the partition at the
// epoch the coordinator serves.
func (c *Coordinator) Current() bool { return c.p.Leads(c.cfg.LeaderEpoch) }

// Load rebuilds the coordinator's state from its offsets partition, once:
// every record from the log start to the log end (a new leader's whole log
// is what it will commit). It fails, to be called again, while the
// partition is not ready (Partition.CheckLeader's error) or when ctx ends.
func (c *Coordinator) Load(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.groups != nil {
		return nil
	}
	if err := c.p.CheckLeader(); err != nil {
		return err // not the leader any more, or its HW is still catching up
	}
	start := time.Now()
	st := newState()
	end := c.p.LEO()
	n := 0
	for off := c.p.LogStartOffset(); off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := c.p.Read(off, 1<<20)
		if err != nil {
			return fmt.Errorf("load offsets partition %d at %d: %w", c.cfg.Partition, off, err)
		}
		if len(data) == 0 {
			break
		}
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				return fmt.Errorf("load offsets partition %d: %w", c.cfg.Partition, err)
			}
			data = rest
			h := b.Header()
			if h.LastOffset() < off {
				continue
			}
			if err := eachGroupRecord(b, func(logOffset int64, k *coordinatorv1.GroupRecordKey, v *coordinatorv1.GroupRecordValue) {
				st.apply(logOffset, k, v)
				n++
			}); err != nil {
				return fmt.Errorf("load offsets partition %d at %d: %w", c.cfg.Partition, h.BaseOffset, err)
			}
			off = h.LastOffset() + 1
		}
	}
	c.st = st
	lvl := slog.LevelInfo
	if n == 0 {
		lvl = slog.LevelDebug // nothing to load: routine (16 lines at every start of a fresh cluster)
	}
	c.cfg.Logger.Log(context.Background(), lvl, "loaded consumer groups", "offsets_partition", c.cfg.Partition, "leader_epoch", c.cfg.LeaderEpoch,
		"groups", len(st.groups), "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// write appends records to the offsets partition with acks=all, then
// applies them. It fails when this broker no longer leads the partition at
// the epoch the coordinator serves.
func (c *Coordinator) write(ctx context.Context, recs []groupRecord) error {
	batch, err := encodeGroupRecords(recs, time.Now())
	if err != nil {
		return err
	}
	start := time.Now()
	base, err := c.p.AppendAcksAll(ctx, c.cfg.LeaderEpoch, batch)
	if c.cfg.Metrics != nil && c.cfg.Metrics.WriteLatency != nil {
		c.cfg.Metrics.WriteLatency.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return fmt.Errorf("write to offsets partition %d: %w", c.cfg.Partition, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range recs {
		c.st.apply(base+int64(i), r.key, r.value)
	}
	return nil
}

// CommitOffsets writes the group's offsets, stamped now, to the offsets
// partition (acks=all) and answers once they are committed; a later commit
// of the same partition wins (in log order). The caller checks the
// committer first (CheckCommitter) and the offsets against the partitions.
// A partition with offsets pending in an open transaction is refused
// (ErrUnstableOffset, wrapped): retry once the transaction ends. A group
// unknown here is created only when Config.Admit admits it.
func (c *Coordinator) CommitOffsets(ctx context.Context, now time.Time, tenantID, groupID string, offsets []OffsetCommit) error {
	done, err := c.admit(ctx, GroupKey{tenantID, groupID})
	if err != nil {
		return err
	}
	defer done()
	recs := make([]groupRecord, len(offsets))
	tps := make([]TopicPartition, len(offsets))
	for i, oc := range offsets {
		recs[i] = offsetRecord(tenantID, groupID, oc, now)
		tps[i] = TopicPartition{oc.TopicID, oc.Offset.GetPartition()}
	}
	c.mu.Lock()
	err = c.unstableLocked(GroupKey{tenantID, groupID}, tps)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.write(ctx, recs)
}

// admit asks Config.Admit about a call that would create the group when
// the coordinator does not know it; the returned done is never nil.
func (c *Coordinator) admit(ctx context.Context, gk GroupKey) (done func(), err error) {
	noop := func() {}
	if c.cfg.Admit == nil {
		return noop, nil
	}
	c.mu.Lock()
	_, known := c.st.groups[gk]
	c.mu.Unlock()
	if known {
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

// DeleteGroup writes the group's deletion to the offsets partition
// (acks=all): its committed offsets and static-member incarnations are
// gone, here and at every coordinator that loads the partition later.
// A group with offsets pending in an open transaction is refused
// (ErrUnstableOffset, wrapped): retry once the transaction ends.
func (c *Coordinator) DeleteGroup(ctx context.Context, tenantID, groupID string) error {
	c.mu.Lock()
	err := c.unstableLocked(GroupKey{tenantID, groupID}, nil)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.write(ctx, []groupRecord{groupDeletedRecord(tenantID, groupID)})
}

// Offsets returns a copy of the group's committed offsets (nil when none).
func (c *Coordinator) Offsets(tenantID, groupID string) map[TopicPartition]Committed {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.st.groups[GroupKey{tenantID, groupID}]
	if g == nil {
		return nil
	}
	return maps.Clone(g.offsets)
}

// CommittedOffsets returns a copy of every group's committed offsets
// (groups without any are left out).
func (c *Coordinator) CommittedOffsets() map[GroupKey]map[TopicPartition]Committed {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[GroupKey]map[TopicPartition]Committed, len(c.st.groups))
	for gk, gs := range c.st.groups {
		if len(gs.offsets) == 0 {
			continue
		}
		out[gk] = maps.Clone(gs.offsets)
	}
	return out
}

// CheckCommitter allows a commit from a group member for partitions it
// owns at its epoch (and, for a static member, as its latest incarnation),
// or from outside the group (no member id) while the group has no members.
// A refusal wraps ErrGroupActive or one of dataplane/group's errors
// (ErrUnknownMember, ErrFencedInstanceID, ErrFencedMemberEpoch,
// ErrNotOwned, ErrInvalid).
func (c *Coordinator) CheckCommitter(tenantID, groupID, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset) error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var g *group.Group
	if gs := c.st.groups[GroupKey{tenantID, groupID}]; gs != nil {
		g = gs.members
	}
	if memberID == "" {
		if g != nil && !g.Empty(now) {
			return fmt.Errorf("group %q %w: commit as one of them (member id and epoch), or stop them first", groupID, ErrGroupActive)
		}
		return nil
	}
	if g == nil {
		// No heartbeat here since this coordinator took over: only the
		// persisted incarnations can tell.
		if gs := c.st.groups[GroupKey{tenantID, groupID}]; gs != nil && instanceID != "" {
			if cur, ok := gs.instances[instanceID]; ok && cur != memberID {
				return fmt.Errorf("%w: instance id %q belongs to member %s, not %s: another process joined with it", group.ErrFencedInstanceID, instanceID, cur, memberID)
			}
		}
		return fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, groupID)
	}
	for _, po := range offsets {
		if err := g.Owns(now, memberID, instanceID, memberEpoch, po.GetTopic(), po.GetPartition()); err != nil {
			return fmt.Errorf("commit for topic %q partition %d: %w", po.GetTopic(), po.GetPartition(), err)
		}
	}
	return nil
}

// membersLocked returns the group's state machine, creating it on first
// use. A group that has committed offsets or static members but no members
// here may have lived on another coordinator before a failover: its
// members get a moment to rejoin with the partitions they own before any
// is handed to another.
func (c *Coordinator) membersLocked(tenantID, groupID, assignor string) (*group.Group, error) {
	gk := GroupKey{tenantID, groupID}
	gs := c.st.groups[gk]
	if gs == nil {
		gs = &groupState{offsets: map[TopicPartition]Committed{}}
		c.st.groups[gk] = gs
	}
	if gs.members != nil {
		return gs.members, nil
	}
	cfg := group.Config{Assignor: assignor, SessionTimeout: c.cfg.SessionTimeout, HeartbeatInterval: c.cfg.HeartbeatInterval}
	if len(gs.offsets) > 0 || len(gs.instances) > 0 || len(gs.pending) > 0 {
		cfg.InitialAssignmentDelay = 2 * c.cfg.HeartbeatInterval
	}
	g, err := group.New(groupID, cfg)
	if err != nil {
		return nil, err
	}
	for instanceID, memberID := range gs.instances {
		if err := g.RestoreInstance(instanceID, memberID); err != nil {
			return nil, err
		}
	}
	gs.members = g
	return g, nil
}

// countLocked adds the group's new rebalances and revocations to Metrics.
func (c *Coordinator) countLocked(gs *groupState) {
	if gs.members == nil || c.cfg.Metrics == nil {
		return
	}
	r, v := gs.members.Counters()
	if d := r - gs.rebalances; d > 0 && c.cfg.Metrics.Rebalances != nil {
		c.cfg.Metrics.Rebalances.Add(float64(d))
	}
	if d := v - gs.revoked; d > 0 && c.cfg.Metrics.Revoked != nil {
		c.cfg.Metrics.Revoked.Add(float64(d))
	}
	gs.rebalances, gs.revoked = r, v
}

// Heartbeat runs one member heartbeat (group.Group.Heartbeat), creating
// the group with assignor on first use; topics is the tenant's current
// view of partition counts. A static member's join that makes a new
// incarnation (a new member id for its instance id, replacing and fencing
// the previous one) is answered only once the incarnation is written to
// the offsets partition, so that no coordinator taking over later lets the
// fenced process back in. If the write fails the member stays replaced
// here (the old one fenced) and the caller's retry, a join again, replaces
// it once more. A group unknown here is created only when Config.Admit
// admits it.
func (c *Coordinator) Heartbeat(ctx context.Context, now time.Time, tenantID, groupID, assignor string, topics group.Topics, req group.HeartbeatRequest) (group.HeartbeatResponse, error) {
	done, err := c.admit(ctx, GroupKey{tenantID, groupID})
	if err != nil {
		return group.HeartbeatResponse{}, err
	}
	defer done()
	staticJoin := req.InstanceID != "" && req.MemberEpoch == group.JoinEpoch
	if staticJoin {
		c.staticJoins.Lock()
		defer c.staticJoins.Unlock()
	}
	c.mu.Lock()
	g, err := c.membersLocked(tenantID, groupID, assignor)
	if err != nil {
		c.mu.Unlock()
		return group.HeartbeatResponse{}, err
	}
	res, err := g.Heartbeat(now, req, topics)
	gs := c.st.groups[GroupKey{tenantID, groupID}]
	c.countLocked(gs)
	persist := staticJoin && err == nil && gs.instances[req.InstanceID] != res.MemberID
	c.mu.Unlock()
	if err != nil || !persist {
		return res, err
	}
	if err := c.write(ctx, []groupRecord{staticMemberRecord(tenantID, groupID, req.InstanceID, res.MemberID, now)}); err != nil {
		return group.HeartbeatResponse{}, fmt.Errorf("record static member %q of group %q: %w", req.InstanceID, groupID, err)
	}
	return res, nil
}

// Leave removes a member (group.Group.Leave).
func (c *Coordinator) Leave(now time.Time, tenantID, groupID, memberID, instanceID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.st.groups[GroupKey{tenantID, groupID}]
	if gs == nil || gs.members == nil {
		return fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, groupID)
	}
	return gs.members.Leave(now, memberID, instanceID)
}

// Expire removes members whose session expired, in every group.
func (c *Coordinator) Expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gk, gs := range c.st.groups {
		if gs.members == nil {
			continue
		}
		for _, id := range gs.members.Expire(now) {
			c.cfg.Logger.Info("group member session expired", "tenant", gk.Tenant, "group", gk.Group, "member", id)
		}
		c.countLocked(gs)
	}
}

// Summaries lists a tenant's groups on this coordinator (in no order).
func (c *Coordinator) Summaries(now time.Time, tenantID string) []*sluicev1.GroupSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*sluicev1.GroupSummary
	for gk, gs := range c.st.groups {
		if gk.Tenant != tenantID {
			continue
		}
		sum := &sluicev1.GroupSummary{Group: gk.Group, State: "empty"}
		if gs.members != nil {
			d := gs.members.Describe(now)
			sum.State, sum.Members = string(d.State), int32(len(d.Members))
		}
		out = append(out, sum)
	}
	return out
}

// Describe returns the group's membership (zero when it has none here)
// and a copy of its committed offsets; ok is false for a group unknown
// here.
func (c *Coordinator) Describe(now time.Time, tenantID, groupID string) (d group.GroupDescription, offsets map[TopicPartition]Committed, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.st.groups[GroupKey{tenantID, groupID}]
	if gs == nil {
		return d, nil, false
	}
	if gs.members != nil {
		d = gs.members.Describe(now)
	}
	return d, maps.Clone(gs.offsets), true
}

// GroupsByTenant counts the groups this coordinator knows (with committed
// offsets, static members or members here), per tenant.
func (c *Coordinator) GroupsByTenant() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for gk := range c.st.groups {
		out[gk.Tenant]++
	}
	return out
}

// Active reports whether the group has members.
func (c *Coordinator) Active(now time.Time, tenantID, groupID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.st.groups[GroupKey{tenantID, groupID}]
	return gs != nil && gs.members != nil && !gs.members.Empty(now)
}
