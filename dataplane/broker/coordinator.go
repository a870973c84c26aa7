package broker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// Consumer groups are coordinated by the leaders of the internal offsets
// topic's partitions: a group belongs to partition hash(tenant, group) mod
// N. The coordinator keeps the groups' committed offsets in memory, writes
// every change to its offsets partition (acks=all) before answering, and a
// new leader rebuilds them by reading that partition from the start. The
// same goes for the member id of each static member's latest incarnation
// (instance id → member id), so that a process another one replaced stays
// fenced across a coordinator failover; the rest of the membership lives
// in memory only.

// systemTenantID and offsetsTopic name the internal offsets topic (as the
// control plane's store.SystemTenantID and store.OffsetsTopic).
const (
	systemTenantID = "00000000-0000-0000-0000-000000000001"
	offsetsTopic   = "__consumer_offsets"
)

// errNoOffsetsTopic: the control plane creates the offsets topic once
// enough brokers are live.
var errNoOffsetsTopic = connect.NewError(connect.CodeUnavailable, errors.New("consumer groups are not available yet: the internal offsets topic does not exist (the control plane creates it once --offsets-topic-replication-factor brokers are live)"))

// groupPartition is the offsets-topic partition that coordinates a group.
func groupPartition(tenantID, group string, partitions int) int32 {
	h := fnv.New32a()
	h.Write([]byte(tenantID))
	h.Write([]byte{0})
	h.Write([]byte(group))
	return int32(h.Sum32() % uint32(partitions))
}

type groupKey struct{ tenant, group string }

// tpKey names a partition by topic id, so a topic deleted and created again
// under the same name does not inherit its predecessor's offsets.
type tpKey struct {
	topicID   string
	partition int32
}

type committedOffset struct {
	topic     string // the name at commit time
	offset    *sluicev1.PartitionOffset
	logOffset int64 // where the commit is in the offsets partition: later wins
	at        time.Time
}

// groupState is what a coordinator knows of one group: its committed
// offsets and its static members' incarnations (persisted), and its members
// (in memory only: after a coordinator failover members rejoin, reporting
// the partitions they own, and keep them).
type groupState struct {
	offsets map[tpKey]committedOffset
	// instances: instance id → the member id of its latest incarnation,
	// as written to the offsets partition. Given to members when it is
	// created (group.Group.RestoreInstance).
	instances map[string]string
	members   *group.Group // nil until the first heartbeat at this coordinator
	// rebalances and revoked are the members' counters last reported to
	// the broker's metrics.
	rebalances, revoked int64
}

// countLocked adds the group's new rebalances and revocations to the
// broker's counters.
func (c *coordinator) countLocked(gs *groupState) {
	if gs.members == nil || c.b.metrics == nil {
		return
	}
	r, v := gs.members.Counters()
	if d := r - gs.rebalances; d > 0 {
		c.b.metrics.groupRebalances.Add(float64(d))
	}
	if d := v - gs.revoked; d > 0 {
		c.b.metrics.groupRevoked.Add(float64(d))
	}
	gs.rebalances, gs.revoked = r, v
}

// coordinator serves the groups of one offsets partition this broker leads,
// loaded at one leader epoch.
type coordinator struct {
	b     *Broker
	p     *partition
	epoch int32

	// staticJoins serialises static members' joins with the write of the
	// incarnation they create, so that the offsets partition records
	// incarnations in the order the groups made them (the last one written
	// is the current one). Taken before mu, never while holding it.
	staticJoins sync.Mutex
	mu          sync.Mutex
	groups      map[groupKey]*groupState
}

// coordinatorFor returns the loaded coordinator of the group's offsets
// partition, or the error to answer: errNoOffsetsTopic, or NotLeader
// naming the coordinator (which a client, or forwarding, follows).
func (b *Broker) coordinatorFor(ctx context.Context, tenantID, group string) (*coordinator, partMeta, error) {
	meta := b.metadata()
	t, ok := meta.topic(systemTenantID, offsetsTopic)
	if !ok || len(t.partitions) == 0 {
		return nil, partMeta{}, errNoOffsetsTopic
	}
	pm := t.partitions[groupPartition(tenantID, group, len(t.partitions))]
	c, err := b.coordinatorAt(ctx, t, pm)
	return c, pm, err
}

// coordinatorAt returns the loaded coordinator of one offsets partition,
// or NotLeader when this broker does not lead it.
func (b *Broker) coordinatorAt(ctx context.Context, t *topicMeta, pm partMeta) (*coordinator, error) {
	if pm.leader != b.cfg.ID {
		return nil, b.notLeader(pm)
	}
	p := b.partition(t.id, pm.partition)
	if p == nil {
		return nil, b.notLeader(pm)
	}
	k := partKey{t.id, pm.partition}
	b.mu.Lock()
	c := b.coords[k]
	if c == nil || c.epoch != pm.leaderEpoch || c.p != p {
		c = &coordinator{b: b, p: p, epoch: pm.leaderEpoch}
		b.coords[k] = c
	}
	b.mu.Unlock()
	if err := c.load(ctx); err != nil {
		return nil, b.takingOver(err)
	}
	return c, nil
}

// takingOver turns "not the leader, broker N is" into Unavailable when N is
// this broker: the metadata already names it but its replica has not taken
// over yet. Retrying shortly succeeds; following the NotLeader would loop.
func (b *Broker) takingOver(err error) error {
	var nl *notLeaderError
	if errors.As(err, &nl) && nl.leader == b.cfg.ID {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("this broker is taking over the partition; retry: %w", err))
	}
	return err
}

// localCoordinators are the loaded coordinators of every offsets partition
// this broker leads.
func (b *Broker) localCoordinators(ctx context.Context) ([]*coordinator, error) {
	meta := b.metadata()
	t, ok := meta.topic(systemTenantID, offsetsTopic)
	if !ok {
		return nil, errNoOffsetsTopic
	}
	var out []*coordinator
	for _, pm := range t.partitions {
		if pm.leader != b.cfg.ID {
			continue
		}
		c, err := b.coordinatorAt(ctx, t, pm)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// load rebuilds the coordinator's state from its offsets partition, once
// per leader epoch: every record from the log start to the log end (a new
// leader's whole log is what it will commit).
func (c *coordinator) load(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups != nil {
		return nil
	}
	if _, err := c.p.readerHW(); err != nil {
		return err // not the leader any more, or its HW is still catching up
	}
	start := time.Now()
	groups := map[groupKey]*groupState{}
	l := c.p.log
	end := l.LEO()
	n := 0
	for off := l.LogStartOffset(); off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := l.Read(off, 1<<20)
		if err != nil {
			return fmt.Errorf("load offsets partition %d at %d: %w", c.p.id, off, err)
		}
		if len(data) == 0 {
			break
		}
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				return fmt.Errorf("load offsets partition %d: %w", c.p.id, err)
			}
			data = rest
			h := b.Header()
			if h.LastOffset() < off {
				continue
			}
			if err := eachGroupRecord(b, func(logOffset int64, k *sluicev1.GroupRecordKey, v *sluicev1.GroupRecordValue) {
				applyGroupRecord(groups, logOffset, k, v)
				n++
			}); err != nil {
				return fmt.Errorf("load offsets partition %d at %d: %w", c.p.id, h.BaseOffset, err)
			}
			off = h.LastOffset() + 1
		}
	}
	c.groups = groups
	lvl := slog.LevelInfo
	if n == 0 {
		lvl = slog.LevelDebug // nothing to load: routine (16 lines at every start of a fresh cluster)
	}
	c.b.logger.Log(context.Background(), lvl, "loaded consumer groups", "offsets_partition", c.p.id, "leader_epoch", c.epoch,
		"groups", len(groups), "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// eachGroupRecord decodes the records of one offsets-topic batch.
func eachGroupRecord(b record.Batch, fn func(int64, *sluicev1.GroupRecordKey, *sluicev1.GroupRecordValue)) error {
	h := b.Header()
	if h.Attributes.Control() {
		return nil
	}
	it, err := b.Records()
	if err != nil {
		return err
	}
	for it.Next() {
		r := it.Record()
		k, v := &sluicev1.GroupRecordKey{}, &sluicev1.GroupRecordValue{}
		if err := proto.Unmarshal(r.Key, k); err != nil {
			return fmt.Errorf("record key at %d: %w", h.BaseOffset+int64(r.OffsetDelta), err)
		}
		if r.Value != nil {
			if err := proto.Unmarshal(r.Value, v); err != nil {
				return fmt.Errorf("record value at %d: %w", h.BaseOffset+int64(r.OffsetDelta), err)
			}
		}
		fn(h.BaseOffset+int64(r.OffsetDelta), k, v)
	}
	return it.Err()
}

// applyGroupRecord applies one record; a record older (in the log) than
// what a key holds is ignored, so concurrent commits resolve in log order.
func applyGroupRecord(groups map[groupKey]*groupState, logOffset int64, k *sluicev1.GroupRecordKey, v *sluicev1.GroupRecordValue) {
	gk := groupKey{k.GetTenantId(), k.GetGroup()}
	switch kind := k.GetKind().(type) {
	case *sluicev1.GroupRecordKey_GroupDeleted:
		delete(groups, gk)
	case *sluicev1.GroupRecordKey_StaticMember:
		g := groups[gk]
		if g == nil {
			g = &groupState{offsets: map[tpKey]committedOffset{}}
			groups[gk] = g
		}
		if g.instances == nil {
			g.instances = map[string]string{}
		}
		g.instances[kind.StaticMember.GetInstanceId()] = v.GetMemberId()
	case *sluicev1.GroupRecordKey_Offset:
		g := groups[gk]
		if g == nil {
			g = &groupState{offsets: map[tpKey]committedOffset{}}
			groups[gk] = g
		}
		tk := tpKey{kind.Offset.GetTopicId(), kind.Offset.GetPartition()}
		if cur, ok := g.offsets[tk]; ok && cur.logOffset > logOffset {
			return
		}
		g.offsets[tk] = committedOffset{
			topic: kind.Offset.GetTopic(), offset: v.GetOffset(), logOffset: logOffset,
			at: time.UnixMilli(v.GetCommitTimeMs()),
		}
	}
}

// groupRecord is one record to write to the offsets partition.
type groupRecord struct {
	key   *sluicev1.GroupRecordKey
	value *sluicev1.GroupRecordValue
}

// write appends records to the offsets partition with acks=all, then
// applies them. It fails when this broker no longer coordinates the
// partition at the epoch it loaded.
func (c *coordinator) write(ctx context.Context, recs []groupRecord) error {
	now := time.Now()
	lr := make([]record.Record, len(recs))
	for i, r := range recs {
		k, err := proto.Marshal(r.key)
		if err != nil {
			return err
		}
		var v []byte
		if r.value != nil {
			if v, err = proto.Marshal(r.value); err != nil {
				return err
			}
		}
		lr[i] = record.Record{OffsetDelta: int32(i), Key: k, Value: v}
	}
	batch, err := log.EncodeLeaderBatch(nil, record.BatchHeader{FirstTimestamp: now.UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, lr)
	if err != nil {
		return err
	}
	epoch := c.epoch
	start := time.Now()
	res, err := c.p.produce(ctx, []log.ValidBatch{batch}, sluicev1.Acks_ACKS_ALL, 30*time.Second, &epoch)
	err = c.b.takingOver(err)
	if c.b.metrics != nil {
		c.b.metrics.groupWriteLatency.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return fmt.Errorf("write to offsets partition %d: %w", c.p.id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range recs {
		applyGroupRecord(c.groups, res.base+int64(i), r.key, r.value)
	}
	return nil
}

// offsets returns the group's committed offsets (nil when none).
func (c *coordinator) offsets(tenantID, group string) map[tpKey]committedOffset {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.groups[groupKey{tenantID, group}]
	if g == nil {
		return nil
	}
	out := make(map[tpKey]committedOffset, len(g.offsets))
	for k, v := range g.offsets {
		out[k] = v
	}
	return out
}

// checkCommitter allows a commit from a group member for partitions it
// owns at its epoch (and, for a static member, as its latest incarnation),
// or from outside the group (no member id) while the group has no members.
func (c *coordinator) checkCommitter(tenantID, groupID, memberID, instanceID string, memberEpoch int32, offsets []*sluicev1.PartitionOffset) error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var g *group.Group
	if gs := c.groups[groupKey{tenantID, groupID}]; gs != nil {
		g = gs.members
	}
	if memberID == "" {
		if g != nil && !g.Empty(now) {
			return groupError(fmt.Errorf("group %q has members: commit as one of them (member id and epoch), or stop them first", groupID), sluicev1.GroupError_REASON_GROUP_ACTIVE)
		}
		return nil
	}
	if g == nil {
		// No heartbeat here since this coordinator took over: only the
		// persisted incarnations can tell.
		if gs := c.groups[groupKey{tenantID, groupID}]; gs != nil && instanceID != "" {
			if cur, ok := gs.instances[instanceID]; ok && cur != memberID {
				return groupError(fmt.Errorf("%w: instance id %q belongs to member %s, not %s: another process joined with it", group.ErrFencedInstanceID, instanceID, cur, memberID), 0)
			}
		}
		return groupError(fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, groupID), 0)
	}
	for _, po := range offsets {
		if err := g.Owns(now, memberID, instanceID, memberEpoch, po.GetTopic(), po.GetPartition()); err != nil {
			return groupError(fmt.Errorf("commit for topic %q partition %d: %w", po.GetTopic(), po.GetPartition(), err), 0)
		}
	}
	return nil
}

// groupError maps the group state machine's refusals to Connect errors
// with a GroupError detail (reason 0: derive it from err).
func groupError(err error, reason sluicev1.GroupError_Reason) error {
	code := connect.CodeFailedPrecondition
	switch {
	case errors.Is(err, group.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, group.ErrUnknownMember):
		code, reason = connect.CodeNotFound, sluicev1.GroupError_REASON_UNKNOWN_MEMBER
	case errors.Is(err, group.ErrFencedMemberEpoch):
		reason = sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH
	case errors.Is(err, group.ErrFencedInstanceID):
		reason = sluicev1.GroupError_REASON_FENCED_INSTANCE_ID
	case errors.Is(err, group.ErrNotOwned):
		reason = sluicev1.GroupError_REASON_NOT_OWNED
	case reason == 0:
		return err
	}
	ce := connect.NewError(code, err)
	if d, derr := connect.NewErrorDetail(&sluicev1.GroupError{Reason: reason}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// members returns the group's state machine, creating it on first use. A
// group that has committed offsets but no members here may have lived on
// another coordinator before a failover: its members get a moment to
// rejoin with the partitions they own before any is handed to another.
func (c *coordinator) membersLocked(tenantID, groupID, assignor string) (*group.Group, error) {
	gk := groupKey{tenantID, groupID}
	gs := c.groups[gk]
	if gs == nil {
		gs = &groupState{offsets: map[tpKey]committedOffset{}}
		c.groups[gk] = gs
	}
	if gs.members != nil {
		return gs.members, nil
	}
	cfg := group.Config{Assignor: assignor, SessionTimeout: c.b.cfg.GroupSessionTimeout, HeartbeatInterval: c.b.cfg.GroupHeartbeatInterval}
	if len(gs.offsets) > 0 || len(gs.instances) > 0 {
		cfg.InitialAssignmentDelay = 2 * c.b.cfg.GroupHeartbeatInterval
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

// heartbeat runs one member heartbeat. A static member's join that makes a
// new incarnation (a new member id for its instance id, replacing and
// fencing the previous one) is answered only once the incarnation is
// written to the offsets partition, so that no coordinator taking over
// later lets the fenced process back in. If the write fails the member
// stays replaced here (the old one fenced) and the caller's retry, a join
// again, replaces it once more.
func (c *coordinator) heartbeat(ctx context.Context, now time.Time, tenantID, groupID, assignor string, req group.HeartbeatRequest) (group.HeartbeatResponse, error) {
	meta := c.b.metadata()
	topics := func(name string) (int32, bool) {
		t, ok := meta.topic(tenantID, name)
		if !ok {
			return 0, false
		}
		return int32(len(t.partitions)), true
	}
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
	gs := c.groups[groupKey{tenantID, groupID}]
	c.countLocked(gs)
	record := staticJoin && err == nil && gs.instances[req.InstanceID] != res.MemberID
	c.mu.Unlock()
	if err != nil || !record {
		return res, err
	}
	err = c.write(ctx, []groupRecord{{
		key: &sluicev1.GroupRecordKey{TenantId: tenantID, Group: groupID, Kind: &sluicev1.GroupRecordKey_StaticMember{
			StaticMember: &sluicev1.StaticMemberKey{InstanceId: req.InstanceID},
		}},
		value: &sluicev1.GroupRecordValue{MemberId: res.MemberID, CommitTimeMs: now.UnixMilli()},
	}})
	if err != nil {
		return group.HeartbeatResponse{}, toConnect(fmt.Errorf("record static member %q of group %q: %w", req.InstanceID, groupID, err))
	}
	return res, nil
}

// leave removes a member.
func (c *coordinator) leave(now time.Time, tenantID, groupID, memberID, instanceID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.groups[groupKey{tenantID, groupID}]
	if gs == nil || gs.members == nil {
		return fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, groupID)
	}
	return gs.members.Leave(now, memberID, instanceID)
}

// expire removes members whose session expired, in every group.
func (c *coordinator) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for gk, gs := range c.groups {
		if gs.members == nil {
			continue
		}
		for _, id := range gs.members.Expire(now) {
			c.b.logger.Info("group member session expired", "tenant", gk.tenant, "group", gk.group, "member", id)
		}
		c.countLocked(gs)
	}
}

// expireGroups expires group members on every coordinator of this broker;
// coordinators of leaderships this broker lost are dropped.
func (b *Broker) expireGroups() {
	b.mu.Lock()
	coords := make([]*coordinator, 0, len(b.coords))
	for k, c := range b.coords {
		if !c.current() {
			delete(b.coords, k)
			continue
		}
		coords = append(coords, c)
	}
	b.mu.Unlock()
	now := time.Now()
	for _, c := range coords {
		c.expire(now)
	}
}

// summaries lists a tenant's groups on this coordinator.
func (c *coordinator) summaries(now time.Time, tenantID string) []*sluicev1.GroupSummary {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*sluicev1.GroupSummary
	for gk, gs := range c.groups {
		if gk.tenant != tenantID {
			continue
		}
		sum := &sluicev1.GroupSummary{Group: gk.group, State: "empty"}
		if gs.members != nil {
			d := gs.members.Describe(now)
			sum.State, sum.Members = string(d.State), int32(len(d.Members))
		}
		out = append(out, sum)
	}
	return out
}

// describe returns the group's membership (zero when it has none here)
// and its committed offsets; ok is false for a group unknown here.
func (c *coordinator) describe(now time.Time, tenantID, groupID string) (d group.GroupDescription, offsets map[tpKey]committedOffset, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.groups[groupKey{tenantID, groupID}]
	if gs == nil {
		return d, nil, false
	}
	if gs.members != nil {
		d = gs.members.Describe(now)
	}
	offsets = make(map[tpKey]committedOffset, len(gs.offsets))
	for k, v := range gs.offsets {
		offsets[k] = v
	}
	return d, offsets, true
}

// active reports whether the group has members.
func (c *coordinator) active(now time.Time, tenantID, groupID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := c.groups[groupKey{tenantID, groupID}]
	return gs != nil && gs.members != nil && !gs.members.Empty(now)
}

// current reports whether this broker still leads the coordinator's
// partition at the epoch it loaded.
func (c *coordinator) current() bool {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.p.role == roleLeader && c.p.meta.leaderEpoch == c.epoch
}
