package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Remote segments: the tests run on the shared store. Each fixture registers
// brokers of its own (ids no other test uses), so fixtures never fence each
// other.

// lastBrokerID hands out broker ids unique in the test binary.
var lastBrokerID atomic.Int32

func init() { lastBrokerID.Store(1_000_000) }

// remoteFixture is a topic whose partitions are replicated on three brokers
// of its own, registered with a lease of an hour.
type remoteFixture struct {
	s       store.Store
	tenant  store.Tenant
	topic   store.Topic
	brokers []int32 // the replicas of partition 0, leader first
	epochs  map[int32]int64
	created time.Duration // the next segment's CreatedAt is at(created)
}

func newRemoteFixture(t *testing.T, s store.Store, partitions int32) *remoteFixture {
	t.Helper()
	ten, _ := createTenant(t, s)
	f := &remoteFixture{s: s, tenant: ten, epochs: map[int32]int64{}}
	for range 3 {
		f.brokers = append(f.brokers, lastBrokerID.Add(1))
	}
	tp, parts := newTopicValue(ten.ID, "tiered", partitions)
	for i := range parts {
		parts[i].Replicas = nil
		for r := range 3 {
			parts[i].Replicas = append(parts[i].Replicas, f.brokers[(i+r)%3])
		}
		parts[i].Leader, parts[i].ISR = parts[i].Replicas[0], slices.Clone(parts[i].Replicas)
	}
	tp.ReplicationFactor = 3
	require.NoError(t, s.CreateTopic(t.Context(), tp, parts, store.CountLimits{}))
	f.topic = tp
	for _, id := range f.brokers {
		f.register(t, id)
	}
	return f
}

// register (re)registers broker id, bumping its epoch.
func (f *remoteFixture) register(t *testing.T, id int32) int64 {
	t.Helper()
	b, err := f.s.RegisterBroker(t.Context(), store.Broker{ID: id, Address: fmt.Sprintf("127.0.0.1:%d", id%60000), LeaseExpiresAt: at(time.Hour), RegisteredAt: at(0)})
	require.NoError(t, err)
	f.epochs[id] = b.Epoch
	return b.Epoch
}

func (f *remoteFixture) partition(t *testing.T, n int32) store.Partition {
	t.Helper()
	parts, err := f.s.ListPartitions(t.Context(), f.topic.ID)
	require.NoError(t, err)
	return parts[n]
}

// fence is broker id's fence at its current broker epoch and partition n's
// current leader epoch (whether it leads or not).
func (f *remoteFixture) fence(t *testing.T, id, n int32) store.LeaderFence {
	t.Helper()
	return store.LeaderFence{BrokerID: id, BrokerEpoch: f.epochs[id], LeaderEpoch: f.partition(t, n).LeaderEpoch}
}

// leader is the fence of partition n's current leader.
func (f *remoteFixture) leader(t *testing.T, n int32) store.LeaderFence {
	t.Helper()
	return f.fence(t, f.partition(t, n).Leader, n)
}

// elect makes broker id the leader of partition n at the next leader epoch,
// as the controller would, and returns the new leader's fence.
func (f *remoteFixture) elect(t *testing.T, n, id int32) store.LeaderFence {
	t.Helper()
	p := f.partition(t, n)
	next := p
	next.Leader, next.LeaderEpoch, next.PartitionEpoch = id, p.LeaderEpoch+1, p.PartitionEpoch+1
	require.NoError(t, f.s.UpdatePartition(t.Context(), next, p.PartitionEpoch))
	return store.LeaderFence{BrokerID: id, BrokerEpoch: f.epochs[id], LeaderEpoch: next.LeaderEpoch}
}

// segment returns an unsaved segment [base, end] of partition n copied
// under fence, with a new id and a CreatedAt later than the previous one's.
// Not for concurrent use (segmentAt is).
func (f *remoteFixture) segment(n int32, fence store.LeaderFence, base, end int64) store.RemoteSegment {
	f.created += time.Second
	return f.segmentAt(n, fence, base, end, at(f.created))
}

// segmentAt is segment created at `created`.
func (f *remoteFixture) segmentAt(n int32, fence store.LeaderFence, base, end int64, created time.Time) store.RemoteSegment {
	id := store.NewID()
	return store.RemoteSegment{
		ID:             id,
		TenantID:       f.tenant.ID,
		TopicID:        f.topic.ID,
		Partition:      n,
		BaseOffset:     base,
		EndOffset:      end,
		LeaderEpoch:    fence.LeaderEpoch,
		SizeBytes:      (end - base + 1) * 100,
		MaxTimestampMs: base * 10,
		ObjectKey:      fmt.Sprintf("tenants/%s/topics/%s/%d/%020d-%d-%s", f.tenant.ID, f.topic.ID, n, base, fence.LeaderEpoch, id),
		Epochs:         []store.EpochStart{{Epoch: fence.LeaderEpoch, StartOffset: base}},
		CreatedAt:      created,
	}
}

// add adds segment [base, end] of partition n under fence, which must succeed.
func (f *remoteFixture) add(t *testing.T, fence store.LeaderFence, n int32, base, end int64) store.RemoteSegment {
	t.Helper()
	seg, err := f.s.AddRemoteSegment(t.Context(), fence, f.segment(n, fence, base, end))
	require.NoError(t, err)
	return seg
}

// move moves seg to state `to` under fence, which must succeed.
func (f *remoteFixture) move(t *testing.T, fence store.LeaderFence, seg store.RemoteSegment, to store.RemoteSegmentState) store.RemoteSegment {
	t.Helper()
	got, err := f.s.UpdateRemoteSegmentState(t.Context(), fence, seg.TopicID, seg.Partition, seg.ID, to, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, to, got.State)
	return got
}

func (f *remoteFixture) list(t *testing.T, n int32, states ...store.RemoteSegmentState) []store.RemoteSegment {
	t.Helper()
	segs, err := f.s.ListRemoteSegments(t.Context(), f.topic.ID, n, states)
	require.NoError(t, err)
	return segs
}

// storedSegment is what a store returns for seg added by fence.
func storedSegment(seg store.RemoteSegment, fence store.LeaderFence) store.RemoteSegment {
	seg.State = store.RemoteCopyStarted
	seg.BrokerID = fence.BrokerID
	seg.CreatedAt = ms(seg.CreatedAt)
	seg.UpdatedAt = seg.CreatedAt
	return seg
}

// requireRefused checks err is a *store.RemoteSegmentError for reason
// (which is an ErrConflict) and returns it.
func requireRefused(t *testing.T, err error, reason store.RemoteRefusal) *store.RemoteSegmentError {
	t.Helper()
	require.ErrorIs(t, err, store.ErrConflict)
	var re *store.RemoteSegmentError
	require.ErrorAs(t, err, &re)
	require.Equal(t, reason, re.Reason, "refused for another reason: %v", err)
	require.NotEmpty(t, re.Error())
	return re
}

func ids(segs []store.RemoteSegment) []string {
	var out []string
	for _, s := range segs {
		out = append(out, s.ID)
	}
	return out
}

// testRemoteSegmentAddFinish: the life of segments copied by the leader: a
// copy starts anywhere while none has finished, then each starts right
// after the last finished one; every field survives the round trip.
func testRemoteSegmentAddFinish(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 2)
	require.Empty(t, f.list(t, 0))
	lead := f.leader(t, 0)
	require.Equal(t, f.brokers[0], lead.BrokerID)

	want := f.segment(0, lead, 100, 199)
	s1, err := s.AddRemoteSegment(ctx, lead, want)
	require.NoError(t, err)
	require.Equal(t, storedSegment(want, lead), s1)
	requireUTC(t, s1.CreatedAt, s1.UpdatedAt)
	require.Equal(t, []store.RemoteSegment{s1}, f.list(t, 0))

	fin, err := s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, s1.ID, store.RemoteCopyFinished, at(time.Hour))
	require.NoError(t, err)
	s1.State, s1.UpdatedAt, s1.CopyFinished = store.RemoteCopyFinished, ms(at(time.Hour)), true
	require.Equal(t, s1, fin)
	requireUTC(t, fin.UpdatedAt)

	// The same leader at a later leader epoch: the segment spans both epochs.
	lead = f.elect(t, 0, lead.BrokerID)
	want = f.segment(0, lead, 200, 299)
	want.Epochs = []store.EpochStart{{Epoch: 0, StartOffset: 200}, {Epoch: 1, StartOffset: 250}}
	want.MaxTimestampMs = -1
	s2, err := s.AddRemoteSegment(ctx, lead, want)
	require.NoError(t, err)
	require.Equal(t, storedSegment(want, lead), s2)
	s2 = f.move(t, lead, s2, store.RemoteCopyFinished)

	// Upper-case ids are stored canonical.
	s3 := f.segment(0, lead, 300, 300)
	s3.SizeBytes = 1
	upper := s3
	upper.ID, upper.TopicID = toUpper(s3.ID), toUpper(s3.TopicID)
	got, err := s.AddRemoteSegment(ctx, lead, upper)
	require.NoError(t, err)
	require.Equal(t, storedSegment(s3, lead), got)
	s3 = f.move(t, lead, got, store.RemoteCopyFinished)

	require.Equal(t, []string{s1.ID, s2.ID, s3.ID}, ids(f.list(t, 0)))
	require.Equal(t, []store.RemoteSegment{s1, s2, s3}, f.list(t, 0))
	require.Empty(t, f.list(t, 1), "partitions do not share segments")

	// Partition 1 has its own leader and its own next base offset.
	lead1 := f.leader(t, 1)
	require.Equal(t, f.brokers[1], lead1.BrokerID)
	p1 := f.add(t, lead1, 1, 0, 9)
	f.move(t, lead1, p1, store.RemoteCopyFinished)
	f.add(t, lead, 0, 301, 400)
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// testRemoteSegmentFencing: only the partition's current leader, at its
// current broker epoch and leader epoch, may add, finish or delete; a
// refusal writes nothing.
func testRemoteSegmentFencing(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 2)
	leaderID, followerID := f.brokers[0], f.brokers[1]
	lead := f.leader(t, 0)
	try := func(fence store.LeaderFence, base int64) error {
		_, err := s.AddRemoteSegment(ctx, fence, f.segment(0, fence, base, base+9))
		return err
	}

	stale := lead
	stale.BrokerEpoch--
	re := requireRefused(t, try(stale, 0), store.RemoteStaleBrokerEpoch)
	require.Equal(t, lead.BrokerEpoch, re.BrokerEpoch)
	require.EqualValues(t, -1, re.NextBaseOffset, "nothing finished yet")
	stale.BrokerEpoch += 2
	requireRefused(t, try(stale, 0), store.RemoteStaleBrokerEpoch)

	re = requireRefused(t, try(f.fence(t, followerID, 0), 0), store.RemoteNotLeader)
	require.Equal(t, leaderID, re.Leader)
	require.Zero(t, re.LeaderEpoch)

	stale = lead
	stale.LeaderEpoch = 1
	re = requireRefused(t, try(stale, 0), store.RemoteStaleLeaderEpoch)
	require.Zero(t, re.LeaderEpoch)

	unknown := lead
	unknown.BrokerID = lastBrokerID.Add(1)
	err := try(unknown, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Contains(t, err.Error(), "broker")

	seg := f.segment(0, lead, 0, 9)
	seg.Partition = 2
	_, err = s.AddRemoteSegment(ctx, lead, seg)
	require.ErrorIs(t, err, store.ErrNotFound)
	seg.Partition, seg.TopicID = 0, store.NewID()
	_, err = s.AddRemoteSegment(ctx, lead, seg)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.Empty(t, f.list(t, 0), "refusals write nothing")

	// The leader's copy; then it registers again (a restart): its old
	// broker epoch is fenced, its new one is not (the store leaves moving
	// leadership on re-registration to the API).
	s1 := f.add(t, lead, 0, 0, 9)
	old := lead
	lead.BrokerEpoch = f.register(t, leaderID)
	_, err = s.UpdateRemoteSegmentState(ctx, old, f.topic.ID, 0, s1.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteStaleBrokerEpoch)
	requireRefused(t, try(old, 10), store.RemoteStaleBrokerEpoch)
	f.move(t, lead, s1, store.RemoteCopyFinished)
	s2 := f.add(t, lead, 0, 10, 19)

	// Leadership moves to the follower: the old leader can neither add,
	// finish nor delete; the new one must use its leader epoch.
	newLead := f.elect(t, 0, followerID)
	requireRefused(t, try(lead, 20), store.RemoteNotLeader)
	for _, to := range []store.RemoteSegmentState{store.RemoteCopyFinished, store.RemoteDeleteStarted} {
		_, err = s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, s2.ID, to, at(time.Hour))
		requireRefused(t, err, store.RemoteNotLeader)
	}
	_, err = s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, s1.ID, store.RemoteDeleteStarted, at(time.Hour))
	requireRefused(t, err, store.RemoteNotLeader)
	staleNew := newLead
	staleNew.LeaderEpoch--
	requireRefused(t, try(staleNew, 10), store.RemoteStaleLeaderEpoch)
	_, err = s.UpdateRemoteSegmentState(ctx, staleNew, f.topic.ID, 0, s1.ID, store.RemoteDeleteStarted, at(time.Hour))
	requireRefused(t, err, store.RemoteStaleLeaderEpoch)

	// The new leader cleans up its predecessor's unfinished copy and
	// deletes its finished one (retention is the leader's, whoever copied).
	f.move(t, newLead, s2, store.RemoteDeleteStarted)
	f.move(t, newLead, s1, store.RemoteDeleteStarted)
	f.move(t, newLead, s1, store.RemoteDeleted)
	f.add(t, newLead, 0, 10, 19)

	// An offline partition has no leader to write.
	p := f.partition(t, 0)
	off := p
	off.Leader, off.LeaderEpoch, off.PartitionEpoch = -1, p.LeaderEpoch+1, p.PartitionEpoch+1
	require.NoError(t, s.UpdatePartition(ctx, off, p.PartitionEpoch))
	newLead.LeaderEpoch = off.LeaderEpoch
	re = requireRefused(t, try(newLead, 10), store.RemoteNotLeader)
	require.EqualValues(t, -1, re.Leader)

	// Partition 1 was never touched.
	require.Empty(t, f.list(t, 1))
}

// testRemoteSegmentBaseOffset: a copy starts, and finishes, only at the next
// base offset: end offset + 1 of the highest segment ever finished. Gaps and
// overlaps are refused with that offset; abandoned copies do not move it;
// deleting finished segments does not move it back.
func testRemoteSegmentBaseOffset(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	lead := f.leader(t, 0)
	tryAdd := func(base, end int64) error {
		_, err := s.AddRemoteSegment(ctx, lead, f.segment(0, lead, base, end))
		return err
	}
	tryFinish := func(seg store.RemoteSegment) error {
		_, err := s.UpdateRemoteSegmentState(ctx, lead, seg.TopicID, seg.Partition, seg.ID, store.RemoteCopyFinished, at(time.Hour))
		return err
	}
	requireNext := func(err error, next, base int64) {
		t.Helper()
		re := requireRefused(t, err, store.RemoteBaseOffset)
		require.Equal(t, next, re.NextBaseOffset)
		require.Equal(t, base, re.RequestedBase)
	}

	// Nothing finished: copies may start anywhere (the local log start of a
	// partition that turned tiered late).
	late := f.add(t, lead, 0, 500, 599)
	first := f.add(t, lead, 0, 1000, 1099)
	require.NoError(t, tryFinish(first))
	// The next base offset is 1100 now.
	requireNext(tryFinish(late), 1100, 500)
	for _, base := range []int64{0, 500, 1000, 1050, 1099, 1101, 5000} {
		requireNext(tryAdd(base, base+500), 1100, base)
	}

	// Two copies of one range (a retry after a crash): one finishes, the
	// other cannot, even though it started first.
	a := f.add(t, lead, 0, 1100, 1149)
	b := f.add(t, lead, 0, 1100, 1199)
	require.NoError(t, tryFinish(b))
	requireNext(tryFinish(a), 1200, 1100)
	f.move(t, lead, a, store.RemoteDeleteStarted)

	// A copy abandoned before it finished leaves the next base offset as is.
	c := f.add(t, lead, 0, 1200, 1299)
	f.move(t, lead, c, store.RemoteDeleteStarted)
	f.move(t, lead, c, store.RemoteDeleted)
	requireNext(tryAdd(1300, 1399), 1200, 1300)
	d := f.add(t, lead, 0, 1200, 1249)

	// Deleting finished segments (retention) does not move it back.
	f.move(t, lead, first, store.RemoteDeleteStarted)
	f.move(t, lead, first, store.RemoteDeleted)
	f.move(t, lead, b, store.RemoteDeleteStarted)
	requireNext(tryAdd(1000, 1099), 1200, 1000)
	require.NoError(t, tryFinish(d))
	f.move(t, lead, d, store.RemoteDeleteStarted)
	f.move(t, lead, d, store.RemoteDeleted)
	requireNext(tryAdd(1200, 1249), 1250, 1200)
	f.add(t, lead, 0, 1250, 1250)

	// The finished ranges, whatever their state now, are consecutive.
	var finished []store.RemoteSegment
	for _, seg := range f.list(t, 0) {
		if slices.Contains([]string{first.ID, b.ID, d.ID}, seg.ID) {
			finished = append(finished, seg)
		}
	}
	require.Len(t, finished, 3)
	for i := 1; i < len(finished); i++ {
		require.Equal(t, finished[i-1].EndOffset+1, finished[i].BaseOffset)
	}
}

// testRemoteSegmentDeposedLeader: a copy started by a leader that was
// deposed never finishes, even after it leads again, and in particular not
// after its successor copied the same range.
func testRemoteSegmentDeposedLeader(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	idA, idB := f.brokers[0], f.brokers[1]
	leadA := f.leader(t, 0)
	done := f.add(t, leadA, 0, 0, 99)
	f.move(t, leadA, done, store.RemoteCopyFinished)
	copyA := f.add(t, leadA, 0, 100, 199)

	leadB := f.elect(t, 0, idB)
	copyB := f.add(t, leadB, 0, 100, 149)
	_, err := s.UpdateRemoteSegmentState(ctx, leadA, f.topic.ID, 0, copyA.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteNotLeader)
	// The successor cannot finish its predecessor's copy either: only the
	// copier knows its upload completed.
	_, err = s.UpdateRemoteSegmentState(ctx, leadB, f.topic.ID, 0, copyA.ID, store.RemoteCopyFinished, at(time.Hour))
	re := requireRefused(t, err, store.RemoteNotCopier)
	require.Equal(t, idA, re.CopierBroker)
	require.Equal(t, leadA.LeaderEpoch, re.CopierEpoch)
	f.move(t, leadB, copyB, store.RemoteCopyFinished)

	// A leads again, at a new leader epoch: its old copy stays unfinished.
	leadA = f.elect(t, 0, idA)
	_, err = s.UpdateRemoteSegmentState(ctx, leadA, f.topic.ID, 0, copyA.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteNotCopier)

	// Leadership flips back and forth: a copy finishes only by its copier
	// at its leader epoch, so of two copies of one range at most one does.
	leadB = f.elect(t, 0, idB)
	copyB2 := f.add(t, leadB, 0, 150, 199)
	staleB := leadB
	leadA = f.elect(t, 0, idA)
	copyA2 := f.add(t, leadA, 0, 150, 249)
	f.move(t, leadA, copyA2, store.RemoteCopyFinished)
	_, err = s.UpdateRemoteSegmentState(ctx, staleB, f.topic.ID, 0, copyB2.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteNotLeader)
	leadB = f.elect(t, 0, idB)
	_, err = s.UpdateRemoteSegmentState(ctx, leadB, f.topic.ID, 0, copyB2.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteNotCopier)
	_, err = s.UpdateRemoteSegmentState(ctx, staleB, f.topic.ID, 0, copyB2.ID, store.RemoteCopyFinished, at(time.Hour))
	requireRefused(t, err, store.RemoteStaleLeaderEpoch)

	require.Equal(t, []string{done.ID, copyB.ID, copyA2.ID}, ids(f.list(t, 0, store.RemoteCopyFinished)))
	f.move(t, leadB, copyB2, store.RemoteDeleteStarted)
	f.move(t, leadB, copyA, store.RemoteDeleteStarted)
	f.add(t, leadB, 0, 250, 299)
}

// testRemoteSegmentIdempotent: moving a segment to the state it is in
// succeeds and changes nothing (a retry after a lost response), but only for
// a caller that passes the fence.
func testRemoteSegmentIdempotent(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	lead := f.leader(t, 0)
	seg := f.add(t, lead, 0, 0, 9)
	update := func(fence store.LeaderFence, to store.RemoteSegmentState, when time.Duration) (store.RemoteSegment, error) {
		return s.UpdateRemoteSegmentState(ctx, fence, f.topic.ID, 0, seg.ID, to, at(when))
	}

	got, err := update(lead, store.RemoteCopyStarted, time.Minute)
	require.NoError(t, err)
	require.Equal(t, seg, got, "COPY_STARTED again: nothing changes")

	path := []store.RemoteSegmentState{store.RemoteCopyFinished, store.RemoteDeleteStarted, store.RemoteDeleted}
	for i, to := range path {
		first, err := update(lead, to, time.Duration(i+1)*time.Hour)
		require.NoError(t, err)
		require.Equal(t, to, first.State)
		require.Equal(t, ms(at(time.Duration(i+1)*time.Hour)), first.UpdatedAt)
		again, err := update(lead, to, time.Duration(i+1)*time.Hour+time.Minute)
		require.NoError(t, err)
		require.Equal(t, first, again, "a repeat keeps the first update time")
		require.Equal(t, []store.RemoteSegment{first}, f.list(t, 0))
	}

	// A fenced caller is refused even a repeat.
	stale := lead
	stale.BrokerEpoch++
	_, err = update(stale, store.RemoteDeleted, 5*time.Hour)
	requireRefused(t, err, store.RemoteStaleBrokerEpoch)
	_, err = update(f.fence(t, f.brokers[1], 0), store.RemoteDeleted, 5*time.Hour)
	requireRefused(t, err, store.RemoteNotLeader)
}

// testRemoteSegmentTransitions: every move other than the four of the life
// cycle and the repeats is refused, and changes nothing.
func testRemoteSegmentTransitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	lead := f.leader(t, 0)
	states := []store.RemoteSegmentState{store.RemoteCopyStarted, store.RemoteCopyFinished, store.RemoteDeleteStarted, store.RemoteDeleted}
	// How to reach each state, and whether the segment was finished on the way.
	paths := map[store.RemoteSegmentState][]store.RemoteSegmentState{
		store.RemoteCopyStarted:   nil,
		store.RemoteCopyFinished:  {store.RemoteCopyFinished},
		store.RemoteDeleteStarted: {store.RemoteCopyFinished, store.RemoteDeleteStarted},
		store.RemoteDeleted:       {store.RemoteCopyFinished, store.RemoteDeleteStarted, store.RemoteDeleted},
	}
	legal := map[[2]store.RemoteSegmentState]bool{
		{store.RemoteCopyStarted, store.RemoteCopyFinished}:   true,
		{store.RemoteCopyStarted, store.RemoteDeleteStarted}:  true,
		{store.RemoteCopyFinished, store.RemoteDeleteStarted}: true,
		{store.RemoteDeleteStarted, store.RemoteDeleted}:      true,
	}
	next := int64(0)
	for _, from := range states {
		for _, to := range states {
			seg := f.add(t, lead, 0, next, next+9)
			for _, st := range paths[from] {
				seg = f.move(t, lead, seg, st)
			}
			if slices.Contains(paths[from], store.RemoteCopyFinished) {
				next += 10
			}
			got, err := s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, seg.ID, to, at(48*time.Hour))
			switch {
			case from == to:
				require.NoError(t, err, "%s → %s", from, to)
				require.Equal(t, seg, got)
			case legal[[2]store.RemoteSegmentState{from, to}]:
				require.NoError(t, err, "%s → %s", from, to)
				require.Equal(t, to, got.State)
				if to == store.RemoteCopyFinished {
					next += 10
				}
			default:
				re := requireRefused(t, err, store.RemoteIllegalTransition)
				require.Equal(t, from, re.State, "%s → %s", from, to)
				require.Equal(t, to, re.Requested)
				after := f.list(t, 0)
				i := slices.IndexFunc(after, func(x store.RemoteSegment) bool { return x.ID == seg.ID })
				require.Equal(t, seg, after[i], "a refused move changes nothing")
			}
		}
	}

	// Not a state at all.
	seg := f.add(t, lead, 0, next, next)
	_, err := s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, seg.ID, "archived", at(0))
	require.Error(t, err)
	require.False(t, isSentinel(err), "%v", err)
}

// testRemoteSegmentList: segments come in base-offset order (then creation
// order), filtered by state on request, per partition.
func testRemoteSegmentList(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 2)
	lead := f.leader(t, 0)
	// Added out of order: three copies at base 0 (the first and last are
	// retries), then one at 500 and one at 10 while none is finished.
	c500 := f.add(t, lead, 0, 500, 509)
	a := f.add(t, lead, 0, 0, 9)
	c10 := f.add(t, lead, 0, 10, 19)
	b := f.add(t, lead, 0, 0, 4)
	c := f.add(t, lead, 0, 0, 9)
	a = f.move(t, lead, a, store.RemoteCopyFinished)
	b = f.move(t, lead, b, store.RemoteDeleteStarted)
	c10 = f.move(t, lead, c10, store.RemoteCopyFinished)
	c10 = f.move(t, lead, c10, store.RemoteDeleteStarted)
	c10 = f.move(t, lead, c10, store.RemoteDeleted)
	other := f.add(t, f.leader(t, 1), 1, 0, 9)

	require.Equal(t, []store.RemoteSegment{a, b, c, c10, c500}, f.list(t, 0))
	require.Equal(t, []store.RemoteSegment{a}, f.list(t, 0, store.RemoteCopyFinished))
	require.Equal(t, []store.RemoteSegment{c, c500}, f.list(t, 0, store.RemoteCopyStarted))
	require.Equal(t, []store.RemoteSegment{b, c10}, f.list(t, 0, store.RemoteDeleted, store.RemoteDeleteStarted))
	require.Equal(t, []store.RemoteSegment{a, b, c, c10, c500}, f.list(t, 0, store.RemoteCopyStarted, store.RemoteCopyFinished, store.RemoteDeleteStarted, store.RemoteDeleted))
	require.Equal(t, []store.RemoteSegment{other}, f.list(t, 1))
	require.Empty(t, f.list(t, 1, store.RemoteDeleted))
	require.Empty(t, f.list(t, 2))

	for _, topicID := range []string{store.NewID(), "not-a-uuid"} {
		segs, err := s.ListRemoteSegments(ctx, topicID, 0, nil)
		require.NoError(t, err)
		require.Empty(t, segs)
	}
}

// testRemoteSegmentNotFound: updates name the segment by topic, partition
// and id; anything else is not found.
func testRemoteSegmentNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 2)
	lead := f.leader(t, 0)
	seg := f.add(t, lead, 0, 0, 9)
	update := func(fence store.LeaderFence, topicID string, n int32, id string) error {
		_, err := s.UpdateRemoteSegmentState(ctx, fence, topicID, n, id, store.RemoteCopyFinished, at(0))
		return err
	}
	require.ErrorIs(t, update(lead, f.topic.ID, 0, store.NewID()), store.ErrNotFound)
	require.ErrorIs(t, update(lead, f.topic.ID, 0, "not-a-uuid"), store.ErrNotFound)
	require.ErrorIs(t, update(f.leader(t, 1), f.topic.ID, 1, seg.ID), store.ErrNotFound, "another partition's id")
	require.ErrorIs(t, update(lead, store.NewID(), 0, seg.ID), store.ErrNotFound)
	require.ErrorIs(t, update(lead, "not-a-uuid", 0, seg.ID), store.ErrNotFound)
	require.ErrorIs(t, update(lead, f.topic.ID, 7, seg.ID), store.ErrNotFound)
	unknown := lead
	unknown.BrokerID = lastBrokerID.Add(1)
	require.ErrorIs(t, update(unknown, f.topic.ID, 0, seg.ID), store.ErrNotFound)
	require.Equal(t, []store.RemoteSegment{seg}, f.list(t, 0))
}

// testRemoteSegmentInvalid: malformed segments are refused with an error
// that is none of the sentinels, and nothing is stored.
func testRemoteSegmentInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	lead := f.elect(t, 0, f.brokers[0]) // leader epoch 1
	other, _ := createTenant(t, s)
	cases := map[string]func(seg *store.RemoteSegment){
		"id not a UUID":          func(seg *store.RemoteSegment) { seg.ID = "seg-1" },
		"tenant not a UUID":      func(seg *store.RemoteSegment) { seg.TenantID = "acme" },
		"topic not a UUID":       func(seg *store.RemoteSegment) { seg.TopicID = "orders" },
		"another tenant's topic": func(seg *store.RemoteSegment) { seg.TenantID = other.ID },
		"negative partition":     func(seg *store.RemoteSegment) { seg.Partition = -1 },
		"negative base":          func(seg *store.RemoteSegment) { seg.BaseOffset, seg.Epochs[0].StartOffset = -1, -1 },
		"end below base":         func(seg *store.RemoteSegment) { seg.EndOffset = seg.BaseOffset - 1 },
		"zero size":              func(seg *store.RemoteSegment) { seg.SizeBytes = 0 },
		"negative size":          func(seg *store.RemoteSegment) { seg.SizeBytes = -5 },
		"timestamp below -1":     func(seg *store.RemoteSegment) { seg.MaxTimestampMs = -2 },
		"no object key":          func(seg *store.RemoteSegment) { seg.ObjectKey = "" },
		"other leader epoch":     func(seg *store.RemoteSegment) { seg.LeaderEpoch = 0 },
		"no epochs":              func(seg *store.RemoteSegment) { seg.Epochs = nil },
		"first epoch after base": func(seg *store.RemoteSegment) { seg.Epochs[0].StartOffset++ },
		"epoch above the leader's": func(seg *store.RemoteSegment) {
			seg.Epochs = append(seg.Epochs, store.EpochStart{Epoch: 2, StartOffset: seg.BaseOffset + 1})
		},
		"negative epoch": func(seg *store.RemoteSegment) { seg.Epochs[0].Epoch = -1 },
		"epochs not increasing": func(seg *store.RemoteSegment) {
			seg.Epochs = []store.EpochStart{{Epoch: 1, StartOffset: seg.BaseOffset}, {Epoch: 1, StartOffset: seg.BaseOffset + 1}}
		},
		"epoch starts not increasing": func(seg *store.RemoteSegment) {
			seg.Epochs = []store.EpochStart{{Epoch: 0, StartOffset: seg.BaseOffset}, {Epoch: 1, StartOffset: seg.BaseOffset}}
		},
		"epoch after the end": func(seg *store.RemoteSegment) {
			seg.Epochs = append([]store.EpochStart{{Epoch: 0, StartOffset: seg.BaseOffset}}, store.EpochStart{Epoch: 1, StartOffset: seg.EndOffset + 1})
		},
	}
	for name, mutate := range cases {
		seg := f.segment(0, lead, 100, 199)
		mutate(&seg)
		_, err := s.AddRemoteSegment(ctx, lead, seg)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	require.Empty(t, f.list(t, 0))
	// The valid shapes at the edges.
	seg := f.segment(0, lead, 0, 0)
	seg.MaxTimestampMs = -1
	seg.Epochs = []store.EpochStart{{Epoch: 0, StartOffset: 0}}
	_, err := s.AddRemoteSegment(ctx, lead, seg)
	require.NoError(t, err)
}

// testRemoteSegmentTopicDelete: a topic's remote segments go with it; a new
// topic of the same name starts with none.
func testRemoteSegmentTopicDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 2)
	lead := f.leader(t, 0)
	seg := f.add(t, lead, 0, 0, 9)
	f.move(t, lead, seg, store.RemoteCopyFinished)
	f.add(t, f.leader(t, 1), 1, 0, 9)

	_, err := s.DeleteTopic(ctx, f.tenant.ID, f.topic.Name)
	require.NoError(t, err)
	require.Empty(t, f.list(t, 0))
	require.Empty(t, f.list(t, 1))
	_, err = s.UpdateRemoteSegmentState(ctx, lead, f.topic.ID, 0, seg.ID, store.RemoteDeleteStarted, at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AddRemoteSegment(ctx, lead, f.segment(0, lead, 10, 19))
	require.ErrorIs(t, err, store.ErrNotFound)

	again, parts := newTopicValue(f.tenant.ID, f.topic.Name, 1)
	parts[0].Replicas, parts[0].Leader, parts[0].ISR = f.brokers, f.brokers[0], f.brokers
	require.NoError(t, s.CreateTopic(ctx, again, parts, store.CountLimits{}))
	segs, err := s.ListRemoteSegments(ctx, again.ID, 0, nil)
	require.NoError(t, err)
	require.Empty(t, segs)
	f.topic = again
	f.add(t, f.leader(t, 0), 0, 500, 509) // anywhere: nothing finished in this topic
}

// isRemoteRefusal reports whether err is a *store.RemoteSegmentError for one
// of reasons.
func isRemoteRefusal(err error, reasons ...store.RemoteRefusal) bool {
	var re *store.RemoteSegmentError
	return errors.As(err, &re) && slices.Contains(reasons, re.Reason)
}

// testConcurrentRemoteSegmentSameBase: rounds of two leaders racing to copy
// the range at the next base offset. In each round the current leader's
// goroutines and the next leader's (elected concurrently, and retrying
// until their attempts run after the election) add and finish copies of
// different lengths at the same base: exactly one copy finishes per round,
// and the finished ranges stay consecutive.
func testConcurrentRemoteSegmentSameBase(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	first := f.add(t, f.leader(t, 0), 0, 0, 99)
	first = f.move(t, f.leader(t, 0), first, store.RemoteCopyFinished)
	finished := []store.RemoteSegment{first}
	const (
		rounds    = 5
		perLeader = 8
	)
	for round := range rounds {
		p := f.partition(t, 0)
		cur := f.leader(t, 0)
		nextID := p.Replicas[(slices.Index(p.Replicas, p.Leader)+1)%len(p.Replicas)]
		next := store.LeaderFence{BrokerID: nextID, BrokerEpoch: f.epochs[nextID], LeaderEpoch: p.LeaderEpoch + 1}
		base := finished[len(finished)-1].EndOffset + 1
		type attempt struct {
			fence store.LeaderFence
			seg   store.RemoteSegment
		}
		var attempts []attempt
		for i := range perLeader {
			end := base + int64(10*i) + 9
			attempts = append(attempts, attempt{cur, f.segment(0, cur, base, end)}, attempt{next, f.segment(0, next, base, end)})
		}
		var (
			elected atomic.Bool
			wins    atomic.Int32
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		wg.Go(func() {
			<-start
			up := p
			up.Leader, up.LeaderEpoch, up.PartitionEpoch = nextID, p.LeaderEpoch+1, p.PartitionEpoch+1
			assertNoError(t, s.UpdatePartition(ctx, up, p.PartitionEpoch))
			elected.Store(true)
		})
		for _, a := range attempts {
			wg.Go(func() {
				<-start
				for {
					after := elected.Load()
					seg, err := s.AddRemoteSegment(ctx, a.fence, a.seg)
					if err == nil {
						_, err = s.UpdateRemoteSegmentState(ctx, a.fence, f.topic.ID, 0, seg.ID, store.RemoteCopyFinished, at(time.Hour))
						if err == nil {
							wins.Add(1)
							return
						}
					}
					fenced := isRemoteRefusal(err, store.RemoteNotLeader, store.RemoteStaleLeaderEpoch)
					if !fenced && !isRemoteRefusal(err, store.RemoteBaseOffset) {
						t.Errorf("round %d: broker %d: unexpected error: %v", round, a.fence.BrokerID, err)
						return
					}
					if fenced && a.fence == next && !after {
						continue // not elected yet: try again
					}
					return
				}
			})
		}
		close(start)
		wg.Wait()
		require.False(t, t.Failed())
		require.EqualValues(t, 1, wins.Load(), "round %d: exactly one copy finishes", round)

		got := f.list(t, 0, store.RemoteCopyFinished)
		require.Len(t, got, len(finished)+1, "round %d", round)
		require.Equal(t, finished, got[:len(finished)])
		win := got[len(finished)]
		require.Equal(t, base, win.BaseOffset)
		require.True(t, win.BrokerID == cur.BrokerID && win.LeaderEpoch == cur.LeaderEpoch ||
			win.BrokerID == next.BrokerID && win.LeaderEpoch == next.LeaderEpoch, "round %d: finished by %d at leader epoch %d", round, win.BrokerID, win.LeaderEpoch)
		finished = got
		t.Logf("round %d: won by broker %d at leader epoch %d", round, win.BrokerID, win.LeaderEpoch)
	}
}

// testConcurrentRemoteSegmentLeaderChange: every replica's uploaders copy
// from where they read the remote log ends, at the leader epoch they read,
// while the controller moves leadership around. Only the leader of a leader
// epoch ever adds a segment under it, and the finished ranges are
// consecutive from offset 0 without overlap.
func testConcurrentRemoteSegmentLeaderChange(t *testing.T, s store.Store) {
	ctx := t.Context()
	f := newRemoteFixture(t, s, 1)
	p0 := f.partition(t, 0)
	const (
		elections        = 20
		workersPerBroker = 2
		attemptsEach     = 30
	)
	var (
		mu       sync.Mutex
		leaderAt = map[int32]int32{p0.LeaderEpoch: p0.Leader}
		created  atomic.Int64
		progress = make(chan struct{}) // unbuffered: elections follow the workers' pace
		stop     = make(chan struct{})
		workers  sync.WaitGroup
		ctl      sync.WaitGroup
		start    = make(chan struct{})
	)
	ctl.Go(func() {
		<-start
		p := p0
		for i := range elections {
			for range 6 {
				select {
				case <-progress:
				case <-stop:
					return
				}
			}
			next := p
			next.Leader = p.Replicas[(i+1)%len(p.Replicas)]
			next.LeaderEpoch, next.PartitionEpoch = p.LeaderEpoch+1, p.PartitionEpoch+1
			mu.Lock()
			leaderAt[next.LeaderEpoch] = next.Leader
			mu.Unlock()
			if !assertNoError(t, s.UpdatePartition(ctx, next, p.PartitionEpoch)) {
				return
			}
			p = next
		}
	})
	for w, id := range slices.Repeat(f.brokers, workersPerBroker) {
		epoch := f.epochs[id]
		workers.Go(func() {
			<-start
			for i := range attemptsEach {
				select {
				case progress <- struct{}{}:
				default:
				}
				parts, err := s.ListPartitions(ctx, f.topic.ID)
				if !assertNoError(t, err) {
					return
				}
				fence := store.LeaderFence{BrokerID: id, BrokerEpoch: epoch, LeaderEpoch: parts[0].LeaderEpoch}
				done, err := s.ListRemoteSegments(ctx, f.topic.ID, 0, []store.RemoteSegmentState{store.RemoteCopyFinished})
				if !assertNoError(t, err) {
					return
				}
				var base int64
				if n := len(done); n > 0 {
					base = done[n-1].EndOffset + 1
				}
				end := base + int64((w*7+i*3)%20)
				seg := f.segmentAt(0, fence, base, end, at(time.Duration(created.Add(1))*time.Millisecond))
				added, err := s.AddRemoteSegment(ctx, fence, seg)
				if err == nil {
					_, err = s.UpdateRemoteSegmentState(ctx, fence, f.topic.ID, 0, added.ID, store.RemoteCopyFinished, at(time.Hour))
				}
				if err != nil && !isRemoteRefusal(err, store.RemoteNotLeader, store.RemoteStaleLeaderEpoch, store.RemoteBaseOffset) {
					t.Errorf("broker %d: unexpected error: %v", id, err)
					return
				}
			}
		})
	}
	close(start)
	workers.Wait()
	close(stop)
	ctl.Wait()
	require.False(t, t.Failed())

	all := f.list(t, 0)
	for _, seg := range all {
		require.Equal(t, leaderAt[seg.LeaderEpoch], seg.BrokerID, "segment [%d, %d] added at leader epoch %d by a broker that did not lead it", seg.BaseOffset, seg.EndOffset, seg.LeaderEpoch)
	}
	finished := f.list(t, 0, store.RemoteCopyFinished)
	require.NotEmpty(t, finished)
	require.Zero(t, finished[0].BaseOffset)
	epochs := map[int32]bool{}
	for i, seg := range finished {
		epochs[seg.LeaderEpoch] = true
		if i > 0 {
			require.Equal(t, finished[i-1].EndOffset+1, seg.BaseOffset, "finished ranges are consecutive")
		}
	}
	t.Logf("%d segments added, %d finished, under %d leader epochs (%d elections)", len(all), len(finished), len(epochs), len(leaderAt)-1)
}
