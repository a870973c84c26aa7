package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/runtime"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/record"
)

// errNotLeader is what logPartition answers when it does not lead at the
// epoch asked.
var errNotLeader = errors.New("not the leader")

// logPartition is an offsets partition of one replica: a real log in a
// temp dir that leads at one epoch (acks=all is then the leader's own
// append), as the broker's partition replica serves a Coordinator. While
// gate is set, each append waits for it before writing (a slow ISR).
type logPartition struct {
	*log.Log
	dir string

	mu       sync.Mutex
	epoch    int32 // the epoch it leads at; -1 while it does not lead
	notReady error // CheckLeader's answer while set
	gate     chan struct{}
	started  int // appends that reached the partition
}

func openPartition(t *testing.T, epoch int32) *logPartition {
	t.Helper()
	dir := t.TempDir()
	// Small segments: a rebuild reads across several.
	l, err := log.Open(dir, log.Config{SegmentBytes: 1024, Flush: log.FlushOS})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return &logPartition{Log: l, dir: dir, epoch: epoch}
}

func (p *logPartition) CheckLeader() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch < 0 {
		return errNotLeader
	}
	return p.notReady
}

func (p *logPartition) AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (int64, error) {
	p.mu.Lock()
	gate := p.gate
	p.started++
	p.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch < 0 || epoch != p.epoch {
		return 0, errNotLeader
	}
	base, _, err := p.AppendValidated(batch, epoch)
	return base, err
}

func (p *logPartition) Leads(epoch int32) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch >= 0 && p.epoch == epoch
}

// hold makes the appends from now on wait until the returned func is
// called.
func (p *logPartition) hold() (release func()) {
	gate := make(chan struct{})
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = gate
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.gate = nil
		close(gate)
	}
}

// appendsStarted is how many appends reached the partition.
func (p *logPartition) appendsStarted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.started
}

// resign: the partition's leadership moved away from this replica.
func (p *logPartition) resign() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = -1
}

// replicate copies every batch of from to p as a follower's fetches do
// (byte-identical), then makes p the leader at epoch: a takeover.
func (p *logPartition) replicate(t *testing.T, from *logPartition, epoch int32) {
	t.Helper()
	for off := p.LEO(); off < from.LEO(); off = p.LEO() {
		data, err := from.Read(off, 1<<20)
		require.NoError(t, err)
		require.NotEmpty(t, data)
		_, err = p.AppendFollower(data)
		require.NoError(t, err)
	}
	require.Equal(t, from.LEO(), p.LEO())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch = epoch
}

const (
	sessionTimeout    = 10 * time.Second
	heartbeatInterval = time.Second
)

func newCoordinator(t *testing.T, p Partition, epoch int32, m *Metrics) *Coordinator {
	t.Helper()
	c := New(p, Config{Partition: 7, LeaderEpoch: epoch, SessionTimeout: sessionTimeout, HeartbeatInterval: heartbeatInterval, Metrics: m})
	require.NoError(t, c.Load(t.Context()))
	return c
}

// fixture is a coordinator at leader epoch 1 on a fresh partition, with
// a request context and a clock reading.
type fixture struct {
	ctx context.Context
	now time.Time
	p   *logPartition
	c   *Coordinator
}

func setup(t *testing.T, m *Metrics) fixture {
	t.Helper()
	p := openPartition(t, 1)
	return fixture{ctx: t.Context(), now: time.Now(), p: p, c: newCoordinator(t, p, 1, m)}
}

// topics is a tenant's topics for heartbeats: "orders" with 2 partitions.
var topics = group.TopicMap(map[string]int32{"orders": 2})

func commit(topicID, topic string, partition int32, offset int64) OffsetCommit {
	return OffsetCommit{TopicID: topicID, Offset: &sluicev1.PartitionOffset{Topic: topic, Partition: partition, Offset: offset, LeaderEpoch: 3, Metadata: "m"}}
}

// offsetsOf is the committed offset of each (topic id, partition).
func offsetsOf(c *Coordinator, tenantID, groupID string) map[TopicPartition]int64 {
	out := map[TopicPartition]int64{}
	for k, co := range c.Offsets(tenantID, groupID) {
		out[k] = co.Offset.GetOffset()
	}
	return out
}

// TestCoordinatorRebuildsFromTheLogAfterTakeover: a coordinator on another
// replica of the offsets partition, taking over at a new leader epoch,
// rebuilds from the log exactly what the old one answered: committed
// offsets per (tenant, group, topic id, partition), the last commit of a
// partition winning, a deleted group gone (and one committed again after
// its deletion starting afresh), a re-created topic (new id, same name) not
// inheriting offsets. The old coordinator is fenced: its writes fail and
// change nothing.
func TestCoordinatorRebuildsFromTheLogAfterTakeover(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p1, old := s.ctx, s.now, s.p, s.c

	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-1", "orders", 0, 5), commit("id-1", "orders", 1, 7)}))
	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-b", "billing", []OffsetCommit{commit("id-2", "orders", 0, 1)}))
	for i := range int64(40) { // enough batches for several segments
		require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-1", "orders", 0, 10+i)}))
	}
	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "gone", []OffsetCommit{commit("id-1", "orders", 0, 3)}))
	require.NoError(t, old.DeleteGroup(ctx, "tenant-a", "gone"))
	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "again", []OffsetCommit{commit("id-1", "orders", 0, 3)}))
	require.NoError(t, old.DeleteGroup(ctx, "tenant-a", "again"))
	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "again", []OffsetCommit{commit("id-1", "orders", 1, 9)}))
	// "orders" deleted and created again: a new topic id.
	require.NoError(t, old.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-3", "orders", 0, 2)}))
	require.Greater(t, len(p1.ClosedSegments()), 1, "the log spans several segments")

	want := map[GroupKey]map[TopicPartition]int64{
		{"tenant-a", "billing"}: {{"id-1", 0}: 49, {"id-1", 1}: 7, {"id-3", 0}: 2},
		{"tenant-b", "billing"}: {{"id-2", 0}: 1},
		{"tenant-a", "again"}:   {{"id-1", 1}: 9},
	}
	answered := func(c *Coordinator) map[GroupKey]map[TopicPartition]int64 {
		got := map[GroupKey]map[TopicPartition]int64{}
		for gk := range c.CommittedOffsets() {
			got[gk] = offsetsOf(c, gk.Tenant, gk.Group)
		}
		return got
	}
	require.Equal(t, want, answered(old))

	p2 := openPartition(t, -1)
	p2.replicate(t, p1, 2)
	p1.resign()
	require.False(t, old.Current())
	taken := newCoordinator(t, p2, 2, nil)
	require.True(t, taken.Current())
	require.Equal(t, want, answered(taken), "the new coordinator answers what the old one did")
	_, _, ok := taken.Describe(now, "tenant-a", "gone")
	require.False(t, ok, "a deleted group stays deleted")
	co := taken.Offsets("tenant-a", "billing")[TopicPartition{"id-1", 1}]
	require.Equal(t, "orders", co.Topic)
	require.Equal(t, "m", co.Offset.GetMetadata())
	require.EqualValues(t, 3, co.Offset.GetLeaderEpoch())
	require.Equal(t, now.UnixMilli(), co.CommitTime.UnixMilli())

	// The old coordinator is fenced: its write fails and changes nothing,
	// in its memory or in the new leader's log.
	leo := p2.LEO()
	err := old.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-1", "orders", 0, 99)})
	require.ErrorIs(t, err, errNotLeader)
	require.ErrorContains(t, err, "write to offsets partition 7")
	require.Equal(t, want, answered(old))
	require.Equal(t, leo, p2.LEO())

	// The new one goes on from there, and a third takeover sees it.
	require.NoError(t, taken.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-1", "orders", 0, 50)}))
	p3 := openPartition(t, -1)
	p3.replicate(t, p2, 3)
	require.EqualValues(t, 50, offsetsOf(newCoordinator(t, p3, 3, nil), "tenant-a", "billing")[TopicPartition{"id-1", 0}])
}

// TestCoordinatorRecordsOnDisk: what a commit, a static member's new
// incarnation and a group's deletion write to the offsets partition, one
// record each, keyed by tenant and group (the format coordinators of every
// version rebuild from).
func TestCoordinatorRecordsOnDisk(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "billing", []OffsetCommit{commit("id-1", "orders", 1, 5)}))
	res, err := c.Heartbeat(ctx, now, "tenant-a", "billing", "", topics, group.HeartbeatRequest{InstanceID: "pod-x", Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.NoError(t, c.DeleteGroup(ctx, "tenant-b", "old"))

	type rec struct {
		offset int64
		key    *coordinatorv1.GroupRecordKey
		value  *coordinatorv1.GroupRecordValue
	}
	var got []rec
	data, err := p.Read(0, 1<<20)
	require.NoError(t, err)
	for len(data) > 0 {
		b, rest, err := record.ReadBatch(data)
		require.NoError(t, err)
		data = rest
		require.EqualValues(t, 1, b.Header().LeaderEpoch, "written at the coordinator's epoch")
		require.EqualValues(t, -1, b.Header().ProducerID)
		require.NoError(t, eachGroupRecord(b, func(off int64, k *coordinatorv1.GroupRecordKey, v *coordinatorv1.GroupRecordValue) {
			got = append(got, rec{off, k, v})
		}))
	}
	require.Len(t, got, 3)
	require.Equal(t, "tenant-a", got[0].key.GetTenantId())
	require.Equal(t, "billing", got[0].key.GetGroup())
	require.Equal(t, "id-1", got[0].key.GetOffset().GetTopicId())
	require.Equal(t, "orders", got[0].key.GetOffset().GetTopic())
	require.EqualValues(t, 1, got[0].key.GetOffset().GetPartition())
	require.EqualValues(t, 5, got[0].value.GetOffset().GetOffset())
	require.Equal(t, now.UnixMilli(), got[0].value.GetCommitTimeMs())

	require.EqualValues(t, 1, got[1].offset)
	require.Equal(t, "pod-x", got[1].key.GetStaticMember().GetInstanceId())
	require.Equal(t, res.MemberID, got[1].value.GetMemberId())

	require.Equal(t, "tenant-b", got[2].key.GetTenantId())
	require.True(t, got[2].key.GetGroupDeleted())
	require.Nil(t, got[2].value.GetOffset(), "a deletion has no value")
}

// TestCoordinatorRecordsApplyInLogOrder: records apply by their offset in
// the offsets partition, not by when a write returned: of two concurrent
// commits of one partition the one later in the log wins, whichever
// coordinator request applied first; a commit older in the log than the
// group's deletion, applied after it, does not bring the group back.
func TestCoordinatorRecordsApplyInLogOrder(t *testing.T) {
	t.Parallel()
	st := newState()
	r := func(off int64) groupRecord {
		return offsetRecord("tenant-a", "g", commit("id-1", "orders", 0, off), time.Now())
	}
	for _, off := range []int64{6, 5} {
		rec := r(off)
		st.apply(off, rec.key, rec.value)
	}
	require.EqualValues(t, 6, st.groups[GroupKey{"tenant-a", "g"}].offsets[TopicPartition{"id-1", 0}].Offset.GetOffset())
	del := groupDeletedRecord("tenant-a", "g")
	st.apply(8, del.key, del.value)
	require.NotContains(t, st.groups, GroupKey{"tenant-a", "g"})
	rec := r(7)
	st.apply(7, rec.key, rec.value)
	require.NotContains(t, st.groups, GroupKey{"tenant-a", "g"}, "older than the deletion")
	rec = r(9)
	st.apply(9, rec.key, rec.value)
	require.EqualValues(t, 9, st.groups[GroupKey{"tenant-a", "g"}].offsets[TopicPartition{"id-1", 0}].Offset.GetOffset(), "committed again after it")
}

// TestCoordinatorStaticMemberFencedAcrossRebuild: a coordinator that takes
// over rebuilds, from the offsets partition's records, the member id of
// each static member's latest incarnation: a process another one replaced
// before the failover is still fenced (heartbeat and commit), the current
// one is only unknown (it rejoins), and so is anything without the
// instance id. Records apply in log order, per (tenant, group, instance
// id); the incarnation made after the takeover survives the next one.
func TestCoordinatorStaticMemberFencedAcrossRebuild(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p1, c1 := s.ctx, s.now, s.p, s.c
	join := func(c *Coordinator, tenant, instance string, owned group.TopicPartitions) group.HeartbeatResponse {
		t.Helper()
		res, err := c.Heartbeat(ctx, now, tenant, "g", "", topics, group.HeartbeatRequest{InstanceID: instance, Subscriptions: []string{"orders"}, Owned: owned})
		require.NoError(t, err)
		return res
	}
	m1 := join(c1, "tenant-a", "pod-x", nil)
	m2 := join(c1, "tenant-a", "pod-x", nil) // another process with the same instance id replaces m1
	require.NotEqual(t, m1.MemberID, m2.MemberID)
	other := join(c1, "tenant-b", "pod-x", nil)
	require.EqualValues(t, 3, p1.LEO(), "each new incarnation is written before it is answered")
	offs := []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 1}}
	require.ErrorIs(t, c1.CheckCommitter("tenant-a", "g", m1.MemberID, "pod-x", m1.MemberEpoch, offs), group.ErrFencedInstanceID)

	p2 := openPartition(t, -1)
	p2.replicate(t, p1, 2)
	c2 := newCoordinator(t, p2, 2, nil)

	// Before any heartbeat reaches the new coordinator.
	err := c2.CheckCommitter("tenant-a", "g", m1.MemberID, "pod-x", m1.MemberEpoch, offs)
	require.ErrorIs(t, err, group.ErrFencedInstanceID, "the replaced process stays fenced")
	require.ErrorIs(t, c2.CheckCommitter("tenant-a", "g", m2.MemberID, "pod-x", m2.MemberEpoch, offs), group.ErrUnknownMember, "the current incarnation rejoins")
	require.ErrorIs(t, c2.CheckCommitter("tenant-a", "g", m1.MemberID, "", m1.MemberEpoch, offs), group.ErrUnknownMember)
	require.ErrorIs(t, c2.CheckCommitter("tenant-b", "g", m2.MemberID, "pod-x", m2.MemberEpoch, offs), group.ErrFencedInstanceID, "tenants apart: tenant-b's pod-x is %s", other.MemberID)

	// Once the group is rebuilt here by a heartbeat.
	_, err = c2.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m1.MemberID, InstanceID: "pod-x", MemberEpoch: m1.MemberEpoch})
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	_, err = c2.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m2.MemberID, InstanceID: "pod-x", MemberEpoch: m2.MemberEpoch})
	require.ErrorIs(t, err, group.ErrUnknownMember)
	require.ErrorIs(t, c2.CheckCommitter("tenant-a", "g", m1.MemberID, "pod-x", m1.MemberEpoch, offs), group.ErrFencedInstanceID)

	// The current process rejoins (a new member id), reporting what it
	// owns, and keeps it; the old one is still fenced and cannot take the
	// slot back with its member id.
	m3 := join(c2, "tenant-a", "pod-x", m2.Assignment)
	require.NotEqual(t, m2.MemberID, m3.MemberID)
	require.Equal(t, m2.Assignment, m3.Assignment)
	_, err = c2.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m1.MemberID, InstanceID: "pod-x", Subscriptions: []string{"orders"}})
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	require.NoError(t, c2.CheckCommitter("tenant-a", "g", m3.MemberID, "pod-x", m3.MemberEpoch, offs))
	require.True(t, c2.Active(now, "tenant-a", "g"))

	// A third coordinator fences m2 now, the incarnation m3 replaced.
	p3 := openPartition(t, -1)
	p3.replicate(t, p2, 3)
	c3 := newCoordinator(t, p3, 3, nil)
	require.ErrorIs(t, c3.CheckCommitter("tenant-a", "g", m2.MemberID, "pod-x", m2.MemberEpoch, offs), group.ErrFencedInstanceID)
	require.ErrorIs(t, c3.CheckCommitter("tenant-a", "g", m3.MemberID, "pod-x", m3.MemberEpoch, offs), group.ErrUnknownMember)
}

// TestCoordinatorStaticJoinAnsweredOnlyOnceWritten: a static member's new
// incarnation whose write fails is not answered (the caller retries the
// join); a dynamic member's join writes nothing.
func TestCoordinatorStaticJoinAnsweredOnlyOnceWritten(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, p, c := s.ctx, s.now, s.p, s.c
	_, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.EqualValues(t, 0, p.LEO(), "a dynamic member's join is not written")

	p.resign()
	_, err = c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{InstanceID: "pod-x", Subscriptions: []string{"orders"}})
	require.ErrorIs(t, err, errNotLeader)
	require.ErrorContains(t, err, `record static member "pod-x" of group "g"`)
	require.EqualValues(t, 0, p.LEO())
}

// TestCoordinatorCommitters: who may commit. From outside the group (no
// member id) only while it has no members; a member only for partitions it
// owns, at its epoch; offsets commit and fetch per group, the last commit
// winning.
func TestCoordinatorCommitters(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c := s.ctx, s.now, s.c
	offs := func(ps ...int32) []*sluicev1.PartitionOffset {
		var out []*sluicev1.PartitionOffset
		for _, p := range ps {
			out = append(out, &sluicev1.PartitionOffset{Topic: "orders", Partition: p, Offset: 1})
		}
		return out
	}
	require.NoError(t, c.CheckCommitter("tenant-a", "g", "", "", 0, offs(0, 1)), "an unknown group takes commits from outside")
	require.Nil(t, c.Offsets("tenant-a", "g"))
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 4)}))
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 6), commit("id-1", "orders", 1, 2)}))
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 6, {"id-1", 1}: 2}, offsetsOf(c, "tenant-a", "g"))
	require.Nil(t, c.Offsets("tenant-b", "g"), "tenants apart")

	// A member joins. The group has committed offsets, so it may have
	// lived on another coordinator: free partitions are handed out only
	// once its members had a session timeout since the load (the
	// runtime's clock: before loaded) to rejoin with theirs.
	loaded := time.Now()
	m, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.Empty(t, m.Assignment["orders"])
	m, err = c.Heartbeat(ctx, loaded.Add(sessionTimeout/2), "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m.MemberID, MemberEpoch: m.MemberEpoch})
	require.NoError(t, err)
	require.Empty(t, m.Assignment["orders"], "held back")
	m, err = c.Heartbeat(ctx, loaded.Add(sessionTimeout+time.Millisecond), "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m.MemberID, MemberEpoch: m.MemberEpoch})
	require.NoError(t, err)
	require.Equal(t, group.TopicPartitions{"orders": {0, 1}}, m.Assignment)
	require.True(t, c.Active(now, "tenant-a", "g"))

	err = c.CheckCommitter("tenant-a", "g", "", "", 0, offs(0))
	require.ErrorIs(t, err, ErrGroupActive)
	require.EqualError(t, err, `group "g" has members: commit as one of them (member id and epoch), or stop them first`)
	require.NoError(t, c.CheckCommitter("tenant-a", "g", m.MemberID, "", m.MemberEpoch, offs(0, 1)))
	require.ErrorIs(t, c.CheckCommitter("tenant-a", "g", m.MemberID, "", m.MemberEpoch+1, offs(0)), group.ErrFencedMemberEpoch)
	require.ErrorIs(t, c.CheckCommitter("tenant-a", "g", m.MemberID, "", m.MemberEpoch, []*sluicev1.PartitionOffset{{Topic: "other", Partition: 0}}), group.ErrNotOwned)
	err = c.CheckCommitter("tenant-a", "g", "nobody", "", 1, offs(0))
	require.ErrorIs(t, err, group.ErrUnknownMember)
	require.ErrorIs(t, c.CheckCommitter("tenant-a", "other", "nobody", "", 1, offs(0)), group.ErrUnknownMember)

	d, offsets, ok := c.Describe(now, "tenant-a", "g")
	require.True(t, ok)
	require.Len(t, d.Members, 1)
	require.Len(t, offsets, 2)
	sums := c.Summaries(now, "tenant-a")
	require.Len(t, sums, 1)
	require.Equal(t, "g", sums[0].GetGroup())
	require.EqualValues(t, 1, sums[0].GetMembers())
	require.Empty(t, c.Summaries(now, "tenant-b"))
}

// TestCoordinatorExpiry: a member silent for the session timeout is
// removed by Expire, after which the group has no members again (commits
// from outside are allowed, a deletion may go ahead); a member that left
// is gone at once. The group's rebalances are counted.
func TestCoordinatorExpiry(t *testing.T) {
	t.Parallel()
	m := &Metrics{
		Rebalances:   prometheus.NewCounter(prometheus.CounterOpts{Name: "rebalances"}),
		Revoked:      prometheus.NewCounter(prometheus.CounterOpts{Name: "revoked"}),
		WriteLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "write"}),
	}
	s := setup(t, m)
	ctx, now, c := s.ctx, s.now, s.c
	a, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	b, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.NoError(t, c.Leave(now, "tenant-a", "g", b.MemberID, ""))
	require.ErrorIs(t, c.Leave(now, "tenant-a", "g", b.MemberID, ""), group.ErrUnknownMember)
	require.ErrorIs(t, c.Leave(now, "tenant-a", "nope", "x", ""), group.ErrUnknownMember)
	require.Positive(t, testutil.ToFloat64(m.Rebalances))

	c.Expire(now.Add(sessionTimeout / 2))
	require.True(t, c.Active(now.Add(sessionTimeout/2), "tenant-a", "g"), "within its session")
	later := now.Add(sessionTimeout + time.Second)
	c.Expire(later)
	require.False(t, c.Active(later, "tenant-a", "g"))
	d, _, ok := c.Describe(later, "tenant-a", "g")
	require.True(t, ok)
	require.Empty(t, d.Members)
	_, err = c.Heartbeat(ctx, later, "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: a.MemberID, MemberEpoch: a.MemberEpoch})
	require.ErrorIs(t, err, group.ErrUnknownMember, "an expired member rejoins")

	require.NoError(t, c.CommitOffsets(ctx, later, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 1)}))
	require.EqualValues(t, 1, testutil.CollectAndCount(m.WriteLatency.(prometheus.Histogram)), "the write is observed")
}

// TestCoordinatorLoadWaitsForTheLeader: Load fails, with the partition's
// answer, until the replica leads with its HW established, and succeeds
// when called again.
func TestCoordinatorLoadWaitsForTheLeader(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, p1 := s.ctx, s.p
	require.NoError(t, s.c.CommitOffsets(ctx, s.now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", 0, 8)}))

	p2 := openPartition(t, -1)
	p2.replicate(t, p1, 2)
	catchingUp := errors.New("the HW is catching up")
	p2.notReady = catchingUp
	c := New(p2, Config{Partition: 7, LeaderEpoch: 2, SessionTimeout: sessionTimeout, HeartbeatInterval: heartbeatInterval})
	require.ErrorIs(t, c.Load(ctx), catchingUp)
	p2.mu.Lock()
	p2.notReady = nil
	p2.mu.Unlock()
	require.NoError(t, c.Load(ctx))
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 8}, offsetsOf(c, "tenant-a", "g"))
	require.EqualValues(t, 2, c.Epoch())

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, New(p2, Config{LeaderEpoch: 2}).Load(canceled), context.Canceled)
}

// TestCoordinatorGrownSubscription: the coordinator reads the subscribed
// topics' partition counts at every heartbeat (the broker passes its
// current view), so when a topic grows the next heartbeat bumps the group
// epoch and the new partitions are assigned by a cooperative rebalance:
// every member keeps what it had, nothing is revoked, and each new
// partition goes to exactly one member.
func TestCoordinatorGrownSubscription(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c := s.ctx, s.now, s.c
	view := group.TopicMap(map[string]int32{"orders": 2})
	type member struct {
		id    string
		epoch int32
		owned group.TopicPartitions
	}
	hb := func(m *member) group.HeartbeatResponse {
		t.Helper()
		req := group.HeartbeatRequest{MemberID: m.id, MemberEpoch: m.epoch, Owned: m.owned}
		if m.id == "" {
			req.Subscriptions = []string{"orders"}
		}
		res, err := c.Heartbeat(ctx, now, "tenant-a", "billing", "", view, req)
		require.NoError(t, err)
		m.id, m.epoch, m.owned = res.MemberID, res.MemberEpoch, res.Assignment
		return res
	}
	describe := func() group.GroupDescription {
		d, _, ok := c.Describe(now, "tenant-a", "billing")
		require.True(t, ok)
		return d
	}
	a, bm := &member{}, &member{}
	hb(a)
	hb(bm)
	for range 3 { // settle: a releases what moves to b
		hb(a)
		hb(bm)
	}
	require.Equal(t, group.TopicPartitions{"orders": {0}}, a.owned)
	require.Equal(t, group.TopicPartitions{"orders": {1}}, bm.owned)
	before := describe()

	// orders grows from 2 to 6 partitions.
	view = group.TopicMap(map[string]int32{"orders": 6})
	hb(a)
	d := describe()
	require.Greater(t, d.GroupEpoch, before.GroupEpoch, "the first heartbeat after the growth bumps the group epoch")
	hb(bm)
	hb(a)
	hb(bm)
	require.Contains(t, a.owned["orders"], int32(0), "a keeps its partition")
	require.Contains(t, bm.owned["orders"], int32(1), "b keeps its partition")
	require.Len(t, a.owned["orders"], 3)
	require.Len(t, bm.owned["orders"], 3)
	all := append(append([]int32(nil), a.owned["orders"]...), bm.owned["orders"]...)
	require.ElementsMatch(t, []int32{0, 1, 2, 3, 4, 5}, all, "every partition assigned once")
	d = describe()
	require.Equal(t, before.RevokedPartitions, d.RevokedPartitions, "nothing revoked: a cooperative rebalance")
	require.Equal(t, group.StateStable, d.State)
}

func TestCoordinatorPartitionOfSpreadsAndSeparatesTenants(t *testing.T) {
	t.Parallel()
	counts := make([]int, 16)
	for i := range 1600 {
		counts[PartitionOf("tenant-a", "group-"+string(rune('a'+i%26))+string(rune('a'+i/26)), 16)]++
	}
	for p, n := range counts {
		require.Positive(t, n, "partition %d gets groups", p)
	}
	require.Equal(t, PartitionOf("t", "g", 16), PartitionOf("t", "g", 16), "stable")
	require.NotEqual(t, PartitionOf("ab", "c", 1<<30), PartitionOf("a", "bc", 1<<30), "tenant and group are separated")
	// The mapping is the offsets topic's format: records already written
	// are in these partitions (FNV-1a of "tenant-a\x00billing" is
	// 4016250656).
	require.EqualValues(t, 6, PartitionOf("tenant-a", "billing", 50))
	require.EqualValues(t, 0, PartitionOf("tenant-a", "billing", 16))
}

// TestCoordinatorAdmitsNewGroupsOnly: every call that would create a group
// the coordinator does not know (a commit, a transactional commit, a
// heartbeat) asks Config.Admit first, and calls its done once the group
// exists (or the call failed); a refusal is returned as is and creates
// nothing; calls on a known group are not asked about.
func TestCoordinatorAdmitsNewGroupsOnly(t *testing.T) {
	t.Parallel()
	errFull := errors.New("at max_groups")
	p := openPartition(t, 1)
	var (
		mu     sync.Mutex
		asked  []string
		doneOK []bool // per done call: the group existed by then
		refuse = map[string]bool{}
		c      *Coordinator
	)
	c = New(p, Config{Partition: 7, LeaderEpoch: 1, SessionTimeout: sessionTimeout, HeartbeatInterval: heartbeatInterval,
		Admit: func(_ context.Context, tenantID, group string) (func(), error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, tenantID+"/"+group)
			if refuse[group] {
				return nil, errFull
			}
			return func() {
				_, _, known := c.Describe(time.Now(), tenantID, group)
				mu.Lock()
				doneOK = append(doneOK, known)
				mu.Unlock()
			}, nil
		}})
	ctx, now := t.Context(), time.Now()
	require.NoError(t, c.Load(ctx))

	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "committed", []OffsetCommit{commit("id-1", "orders", 0, 5)}))
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "txn", 9, 0, []OffsetCommit{commit("id-1", "orders", 0, 5)}))
	_, err := c.Heartbeat(ctx, now, "tenant-a", "joined", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant-a/committed", "tenant-a/txn", "tenant-a/joined"}, asked)
	require.Equal(t, []bool{true, true, true}, doneOK, "done once the group exists")

	// Known groups are not asked about; the same name in another tenant is
	// a new group.
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-a", "committed", []OffsetCommit{commit("id-1", "orders", 0, 6)}))
	require.NoError(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "committed", 9, 0, []OffsetCommit{commit("id-1", "orders", 1, 6)}))
	_, err = c.Heartbeat(ctx, now, "tenant-a", "committed", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	require.NoError(t, c.CommitOffsets(ctx, now, "tenant-b", "committed", []OffsetCommit{commit("id-2", "orders", 0, 1)}))
	require.Equal(t, []string{"tenant-a/committed", "tenant-a/txn", "tenant-a/joined", "tenant-b/committed"}, asked)

	// Refused: the error as is, nothing created, no done.
	mu.Lock()
	refuse["full"] = true
	mu.Unlock()
	require.ErrorIs(t, c.CommitOffsets(ctx, now, "tenant-a", "full", []OffsetCommit{commit("id-1", "orders", 0, 5)}), errFull)
	require.ErrorIs(t, c.TxnCommitOffsets(ctx, now, "tenant-a", "full", 9, 0, []OffsetCommit{commit("id-1", "orders", 0, 5)}), errFull)
	_, err = c.Heartbeat(ctx, now, "tenant-a", "full", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.ErrorIs(t, err, errFull)
	_, _, known := c.Describe(now, "tenant-a", "full")
	require.False(t, known)
	require.Equal(t, map[string]int{"tenant-a": 3, "tenant-b": 1}, c.GroupsByTenant())
	require.Len(t, doneOK, 4)
}

// eachGroupRecord decodes the records of one offsets-topic batch, as a
// load replays them.
func eachGroupRecord(b record.Batch, fn func(int64, *coordinatorv1.GroupRecordKey, *coordinatorv1.GroupRecordValue)) error {
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
		k, v, err := decodeGroupRecord(runtime.Record{Key: r.Key, Value: r.Value})
		if err != nil {
			return fmt.Errorf("record at %d: %w", h.BaseOffset+int64(r.OffsetDelta), err)
		}
		fn(h.BaseOffset+int64(r.OffsetDelta), k, v)
	}
	return it.Err()
}
