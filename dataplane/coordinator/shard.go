package coordinator

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/runtime"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Shard is the group coordinator's state machine on one offsets partition:
// the groups' committed offsets, static members' incarnations and
// transactions' pending offsets as the partition's records hold them
// (state), and the groups' membership (dataplane/group), in memory only.
// It does no I/O: each operation returns the records to write and the
// answer (membership changes at once: it is not persisted), and Replay
// applies a written record (dataplane/runtime hosts it; Coordinator is
// the hosted shard's API). Not safe for concurrent use: the runtime
// serialises its calls.
type Shard struct {
	cfg ShardConfig
	st  state
	// waiting are the classic groups' JoinGroups and SyncGroups waiting
	// for other members (see classic.go).
	waiting *waiters
	// loaded is when the shard was loaded (Loaded): when this coordinator
	// started serving the groups of its partition.
	loaded time.Time
}

// ShardConfig configures a Shard.
type ShardConfig struct {
	// SessionTimeout and HeartbeatInterval are every group's
	// (group.Config); the members' sessions are checked every
	// HeartbeatInterval.
	SessionTimeout, HeartbeatInterval time.Duration
	// InitialRebalanceDelay holds a classic group's first join phase for
	// more members (group.ClassicConfig).
	InitialRebalanceDelay time.Duration
	// Logger: nil discards.
	Logger *slog.Logger
	// Metrics: nil counts nothing.
	Metrics *Metrics
}

// NewShard returns an empty shard (a partition with no records).
func NewShard(cfg ShardConfig) *Shard {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Shard{cfg: cfg, st: newState(), waiting: &waiters{}}
}

// The runtime keys of a group's operations (see the package doc,
// Concurrency):
//   - a plain offset commit holds the group's key shared and a sub-key per
//     partition it commits (commitKeys): commits of different partitions
//     of one group are written at once, like different groups';
//   - a deletion, a transactional commit, a transaction marker and a
//     static member's join (staticJoin) hold the group's key exclusively;
//   - every other heartbeat, a leave and the members' expiry write nothing
//     and hold no key (the empty key): they run against the state under
//     the runtime's lock, never behind another operation's append.

// opKey is the runtime key of a group's operations.
func opKey(gk GroupKey) string { return gk.Tenant + "\x00" + gk.Group }

// commitKeys are the sub-keys of the group's key a plain commit of offsets
// holds: the partitions it commits.
func commitKeys(offsets []OffsetCommit) []string {
	out := make([]string, len(offsets))
	for i, oc := range offsets {
		out[i] = oc.TopicID + "\x00" + strconv.Itoa(int(oc.Offset.GetPartition()))
	}
	return out
}

// staticJoin reports whether a heartbeat is a static member's join: the
// only heartbeat that may write (its new incarnation).
func staticJoin(req group.HeartbeatRequest) bool {
	return req.InstanceID != "" && req.MemberEpoch == group.JoinEpoch
}

// Replay applies one record of the offsets partition at its offset.
func (s *Shard) Replay(offset int64, r runtime.Record) error {
	k, v, err := decodeGroupRecord(r)
	if err != nil {
		return err
	}
	s.st.apply(offset, k, v)
	return nil
}

// Loaded records when the coordinator started serving (the groups it
// rebuilds hold their free partitions from then on, see members) and arms
// the members' expiry.
func (s *Shard) Loaded(now time.Time) runtime.Update {
	s.loaded = now
	return runtime.Update{Timers: []runtime.Timer{s.expiryTimer(now)}}
}

// expiryTimer checks the members' sessions every HeartbeatInterval (under
// the empty key: it writes nothing).
func (s *Shard) expiryTimer(now time.Time) runtime.Timer {
	interval := s.cfg.HeartbeatInterval
	if interval <= 0 {
		interval = time.Second
	}
	return runtime.Timer{Name: "expiry", At: now.Add(interval), Op: func(now time.Time) (runtime.Update, error) {
		s.Expire(now)
		return runtime.Update{Timers: []runtime.Timer{s.expiryTimer(now)}}, nil
	}}
}

// write is the Result writing recs.
func write(recs ...groupRecord) (runtime.Result[struct{}], error) {
	rs, err := encodeAll(recs)
	return runtime.Result[struct{}]{Update: runtime.Update{Records: rs}}, err
}

// Known reports whether the shard knows the group (its offsets,
// incarnations or members).
func (s *Shard) Known(gk GroupKey) bool { return s.st.groups[gk] != nil }

// CommitOffsets writes the group's offsets, stamped now; a later commit of
// the same partition wins (in log order). A partition with offsets
// pending in an open transaction is refused (ErrUnstableOffset, wrapped):
// retry once the transaction ends.
func (s *Shard) CommitOffsets(gk GroupKey, offsets []OffsetCommit, now time.Time) (runtime.Result[struct{}], error) {
	recs := make([]groupRecord, len(offsets))
	tps := make([]TopicPartition, len(offsets))
	for i, oc := range offsets {
		recs[i] = offsetRecord(gk.Tenant, gk.Group, oc, now)
		tps[i] = TopicPartition{oc.TopicID, oc.Offset.GetPartition()}
	}
	if err := s.unstable(gk, tps); err != nil {
		return runtime.Result[struct{}]{}, err
	}
	return write(recs...)
}

// DeleteGroup writes the group's deletion: its committed offsets and
// static-member incarnations are gone. A group with offsets pending in an
// open transaction is refused (ErrUnstableOffset, wrapped).
func (s *Shard) DeleteGroup(gk GroupKey) (runtime.Result[struct{}], error) {
	if err := s.unstable(gk, nil); err != nil {
		return runtime.Result[struct{}]{}, err
	}
	return write(groupDeletedRecord(gk.Tenant, gk.Group))
}

// OffsetDeletion names one partition whose committed offset DeleteOffsets
// deletes.
type OffsetDeletion struct {
	TopicID, Topic string
	Partition      int32
}

// ClassicSubscriptions answers the topics a classic group's members
// subscribe to, from the group's protocol type and every member's
// protocol metadata (Kafka's consumer protocol carries them); ok false
// when it cannot tell (another protocol type).
type ClassicSubscriptions func(protocolType string, metadata [][]byte) (topics []string, ok bool)

// DeleteOffsets deletes the group's committed offsets of parts (Kafka's
// OffsetDelete): a deletion record for each that has one; a part without
// one is done already. Parts of a topic the group's members subscribe to
// are left as they are, and answered true: a KIP-848 member's
// subscriptions count, and a classic member's as classic tells them; a
// group with classic members whose subscriptions classic cannot tell is
// refused (ErrGroupActive), as is a part with offsets pending in an open
// transaction (ErrUnstableOffset, wrapped).
func (s *Shard) DeleteOffsets(gk GroupKey, parts []OffsetDeletion, classic ClassicSubscriptions, now time.Time) (runtime.Result[[]bool], error) {
	var none runtime.Result[[]bool]
	subscribed := map[string]bool{}
	gs := s.st.groups[gk]
	if gs != nil && gs.members != nil {
		for _, m := range gs.members.Describe(now).Members {
			for _, t := range m.Subscriptions {
				subscribed[t] = true
			}
		}
	}
	if gs != nil && gs.classic != nil {
		if gs.classic.Members() > 0 { // (a member past its session timeout counts until the group's timer removes it)
			protocolType, metadata := gs.classic.Subscriptions()
			topics, ok := classic(protocolType, metadata)
			if !ok {
				return none, fmt.Errorf("group %q %w of protocol type %q, whose subscriptions are not known: stop them first", gk.Group, ErrGroupActive, protocolType)
			}
			for _, t := range topics {
				subscribed[t] = true
			}
		}
	}
	left := make([]bool, len(parts))
	var recs []groupRecord
	var tps []TopicPartition
	for i, d := range parts {
		if left[i] = subscribed[d.Topic]; left[i] {
			continue
		}
		tk := TopicPartition{d.TopicID, d.Partition}
		if gs == nil {
			continue
		}
		if _, ok := gs.offsets[tk]; ok {
			recs = append(recs, offsetDeletedRecord(gk.Tenant, gk.Group, d))
		}
		tps = append(tps, tk)
	}
	if len(tps) > 0 {
		if err := s.unstable(gk, tps); err != nil {
			return none, err
		}
	}
	if len(recs) == 0 {
		return runtime.Result[[]bool]{Response: left}, nil
	}
	w, err := write(recs...)
	return runtime.Result[[]bool]{Update: w.Update, Response: left}, err
}

// Offsets returns a copy of the group's committed offsets (nil when none).
func (s *Shard) Offsets(gk GroupKey) map[TopicPartition]Committed {
	g := s.st.groups[gk]
	if g == nil {
		return nil
	}
	return maps.Clone(g.offsets)
}

// CommittedOffsets returns a copy of every group's committed offsets
// (groups without any are left out).
func (s *Shard) CommittedOffsets() map[GroupKey]map[TopicPartition]Committed {
	out := make(map[GroupKey]map[TopicPartition]Committed, len(s.st.groups))
	for gk, gs := range s.st.groups {
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
func (s *Shard) CheckCommitter(gk GroupKey, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset, now time.Time) error {
	var g *group.Group
	gs := s.st.groups[gk]
	if err := s.checkClassicCommit(gk, gs, memberID, instanceID, memberEpoch, now); !errors.Is(err, errNotClassic) {
		return err // a classic member's commit, or one into a classic group
	}
	if gs != nil {
		g = gs.members
	}
	if memberID == "" {
		if g != nil && !g.Empty(now) {
			return fmt.Errorf("group %q %w: commit as one of them (member id and epoch), or stop them first", gk.Group, ErrGroupActive)
		}
		return nil
	}
	if g == nil {
		// No heartbeat here since this coordinator took over: only the
		// persisted incarnations can tell.
		if gs != nil && instanceID != "" {
			if cur, ok := gs.instances[instanceID]; ok && cur != memberID {
				return fmt.Errorf("%w: instance id %q belongs to member %s, not %s: another process joined with it", group.ErrFencedInstanceID, instanceID, cur, memberID)
			}
		}
		return fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, gk.Group)
	}
	for _, po := range offsets {
		if err := g.Owns(now, memberID, instanceID, memberEpoch, po.GetTopic(), po.GetPartition()); err != nil {
			return fmt.Errorf("commit for topic %q partition %d: %w", po.GetTopic(), po.GetPartition(), err)
		}
	}
	return nil
}

// members returns the group's state machine, creating it on first use. A
// group that has committed offsets or static members but no members here
// may have lived on another coordinator before a failover, whose members
// may still be consuming: none of its partitions is handed to a member that
// does not report owning it before a session timeout has passed since this
// coordinator was loaded (group.Config.HoldUntil). A member that is alive
// rejoins within that time, reporting its partitions, and keeps them; one
// that does not would have been expired by the old coordinator too. A
// shorter hold (it was two heartbeat intervals) hands a member that is slow
// to find the new coordinator's partitions to another while it still
// consumes them: both process them, and the new owner starts from the
// last commit, before what the old one processed while it could not
// commit.
func (s *Shard) members(gk GroupKey, assignor string) (*group.Group, error) {
	gs := s.st.group(gk)
	if gs.members != nil {
		return gs.members, nil
	}
	cfg := group.Config{Assignor: assignor, SessionTimeout: s.cfg.SessionTimeout, HeartbeatInterval: s.cfg.HeartbeatInterval}
	if len(gs.offsets) > 0 || len(gs.instances) > 0 || len(gs.pending) > 0 {
		session := s.cfg.SessionTimeout
		if session <= 0 {
			session = group.DefaultSessionTimeout
		}
		cfg.HoldUntil = s.loaded.Add(session)
	}
	g, err := group.New(gk.Group, cfg)
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

// count adds the group's new rebalances and revocations to Metrics.
func (s *Shard) count(gs *groupState) {
	if gs.members == nil || s.cfg.Metrics == nil {
		return
	}
	r, v := gs.members.Counters()
	if d := r - gs.rebalances; d > 0 && s.cfg.Metrics.Rebalances != nil {
		s.cfg.Metrics.Rebalances.Add(float64(d))
	}
	if d := v - gs.revoked; d > 0 && s.cfg.Metrics.Revoked != nil {
		s.cfg.Metrics.Revoked.Add(float64(d))
	}
	gs.rebalances, gs.revoked = r, v
}

// HeartbeatResult is a heartbeat's answer; Persist says it writes a
// static member's new incarnation (answered once written).
type HeartbeatResult struct {
	group.HeartbeatResponse
	Persist bool
}

// Heartbeat runs one member heartbeat (group.Group.Heartbeat), creating
// the group with assignor on first use; topics is the tenant's current
// view of partition counts. The membership changes at once. A static
// member's join that makes a new incarnation (a new member id for its
// instance id, replacing and fencing the previous one) returns the
// incarnation's record: the answer waits for it, so that no coordinator
// taking over later lets the fenced process back in. If the write fails
// the member stays replaced here (the old one fenced) and the caller's
// retry, a join again, replaces it once more.
func (s *Shard) Heartbeat(gk GroupKey, assignor string, topics group.Topics, req group.HeartbeatRequest, now time.Time) (runtime.Result[HeartbeatResult], error) {
	var none runtime.Result[HeartbeatResult]
	if gs := s.st.groups[gk]; gs != nil && gs.classic != nil && gs.classic.Members() > 0 {
		return none, fmt.Errorf("%w: group %q has members of Kafka's classic protocol; a member of the consumer protocol (KIP-848) cannot join it", group.ErrInconsistentProtocol, gk.Group)
	}
	g, err := s.members(gk, assignor)
	if err != nil {
		return none, err
	}
	res, err := g.Heartbeat(now, req, topics)
	gs := s.st.groups[gk]
	s.count(gs)
	if err != nil {
		return none, err
	}
	out := runtime.Result[HeartbeatResult]{Response: HeartbeatResult{HeartbeatResponse: res}}
	if staticJoin(req) && gs.instances[req.InstanceID] != res.MemberID {
		r, err := staticMemberRecord(gk.Tenant, gk.Group, req.InstanceID, res.MemberID, now).encode()
		if err != nil {
			return none, err
		}
		out.Records = []runtime.Record{r}
		out.Response.Persist = true
	}
	return out, nil
}

// Leave removes a member (group.Group.Leave).
func (s *Shard) Leave(gk GroupKey, memberID, instanceID string, now time.Time) error {
	gs := s.st.groups[gk]
	if gs == nil || gs.members == nil {
		return fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, gk.Group)
	}
	return gs.members.Leave(now, memberID, instanceID)
}

// Expire removes members whose session expired, in every group.
func (s *Shard) Expire(now time.Time) {
	for gk, gs := range s.st.groups {
		if gs.classic != nil {
			s.waiting.deliver(gk, gs.classic.Tick(now))
		}
		if gs.members == nil {
			continue
		}
		for _, id := range gs.members.Expire(now) {
			s.cfg.Logger.Info("group member session expired", "tenant", gk.Tenant, "group", gk.Group, "member", id)
		}
		s.count(gs)
	}
}

// Summaries lists a tenant's groups (in no order).
func (s *Shard) Summaries(tenantID string, now time.Time) []*sluicev1.GroupSummary {
	var out []*sluicev1.GroupSummary
	for gk, gs := range s.st.groups {
		if gk.Tenant != tenantID {
			continue
		}
		sum := &sluicev1.GroupSummary{Group: gk.Group, State: "empty"}
		if gs.members != nil {
			d := gs.members.Describe(now)
			sum.State, sum.Members = string(d.State), int32(len(d.Members))
		}
		if gs.classic != nil && gs.classic.Members() > 0 {
			sum.State, sum.Members = strings.ToLower(string(gs.classic.State())), int32(gs.classic.Members())
		}
		out = append(out, sum)
	}
	return out
}

// Description is a group's membership and committed offsets (Describe).
type Description struct {
	Group   group.GroupDescription
	Offsets map[TopicPartition]Committed
	Known   bool
}

// Describe returns the group's membership (zero when it has none here)
// and a copy of its committed offsets; Known is false for a group unknown
// here.
func (s *Shard) Describe(gk GroupKey, now time.Time) Description {
	gs := s.st.groups[gk]
	if gs == nil {
		return Description{}
	}
	d := Description{Offsets: maps.Clone(gs.offsets), Known: true}
	if gs.members != nil {
		d.Group = gs.members.Describe(now)
	}
	if gs.classic != nil && gs.classic.Members() > 0 {
		s.waiting.deliver(gk, gs.classic.Tick(now))
		d.Group = classicDescription(gk.Group, gs.classic.Describe())
	}
	return d
}

// classicDescription is a classic group described as the consumer
// protocol's are (DescribeGroup, sluice group describe): its generation as
// the group and member epochs, its protocol as the assignor, and, for
// protocol type "consumer", each member's subscriptions and assignment
// read from its metadata and the leader's assignment (empty when they do
// not parse). A classic group has no target or revocations of its own:
// the leader's assignment is the target.
func classicDescription(groupID string, c group.ClassicDescription) group.GroupDescription {
	d := group.GroupDescription{
		GroupID: groupID, State: group.State(strings.ToLower(string(c.State))), Assignor: c.Protocol,
		GroupEpoch: c.Generation, TargetEpoch: c.Generation,
	}
	for _, m := range c.Members {
		md := group.MemberDescription{
			MemberID: m.MemberID, InstanceID: m.InstanceID, MemberEpoch: c.Generation, Subscriptions: []string{},
			Assignment: group.TopicPartitions{}, Target: group.TopicPartitions{}, Pending: group.TopicPartitions{}, Revoking: group.TopicPartitions{},
		}
		if c.ProtocolType == "consumer" {
			if subs, err := group.ConsumerSubscription(m.Metadata); err == nil {
				md.Subscriptions = subs
			}
			if a, err := group.ConsumerAssignment(m.Assignment); err == nil {
				md.Assignment, md.Target = a, a
			}
		}
		d.Members = append(d.Members, md)
	}
	return d
}

// GroupsByTenant counts the groups known (with committed offsets, static
// members or members here), per tenant.
func (s *Shard) GroupsByTenant() map[string]int {
	out := map[string]int{}
	for gk := range s.st.groups {
		out[gk.Tenant]++
	}
	return out
}

// Active reports whether the group has members.
func (s *Shard) Active(gk GroupKey, now time.Time) bool {
	gs := s.st.groups[gk]
	return gs != nil && (gs.members != nil && !gs.members.Empty(now) || gs.classic != nil && gs.classic.Members() > 0)
}
