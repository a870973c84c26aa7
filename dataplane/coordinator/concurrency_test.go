package coordinator

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"
	coordinatorv1 "github.com/sluicemq/sluice/gen/sluice/coordinator/v1"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// waitFor polls cond until it holds (testenv.Wait), failing the test
// after 10 s with what.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Wait(t, 10*time.Second, what, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// logRecords describes the records of p's log in log order: "offset
// <partition>=<offset>", "delete", "static <instance>", ...
func logRecords(t *testing.T, p *logPartition) []string {
	t.Helper()
	var out []string
	for off := p.LogStartOffset(); off < p.LEO(); {
		data, err := p.Read(off, 1<<20)
		require.NoError(t, err)
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			require.NoError(t, err)
			data = rest
			require.NoError(t, eachGroupRecord(b, func(_ int64, k *coordinatorv1.GroupRecordKey, v *coordinatorv1.GroupRecordValue) {
				switch {
				case k.GetOffset() != nil:
					out = append(out, fmt.Sprintf("offset %d=%d", k.GetOffset().GetPartition(), v.GetOffset().GetOffset()))
				case k.GetGroupDeleted():
					out = append(out, "delete")
				case k.GetStaticMember() != nil:
					out = append(out, "static "+k.GetStaticMember().GetInstanceId())
				default:
					out = append(out, k.String())
				}
			}))
			hd := b.Header()
			off = hd.LastOffset() + 1
		}
	}
	return out
}

// join is a dynamic member's join of group g (tenant-a).
func join(t *testing.T, s fixture) group.HeartbeatResponse {
	t.Helper()
	m, err := s.c.Heartbeat(s.ctx, s.now, "tenant-a", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	return m
}

// commitAsync commits offset of orders' partition in group g (tenant-a)
// and sends the outcome once it answers, checking that the commit was
// applied (and written) by then.
func commitAsync(t *testing.T, s fixture, partition int32, offset int64) chan error {
	done := make(chan error, 1)
	go func() {
		err := s.c.CommitOffsets(s.ctx, s.now, "tenant-a", "g", []OffsetCommit{commit("id-1", "orders", partition, offset)})
		if err == nil {
			_, ok := offsetsOf(s.c, "tenant-a", "g")[TopicPartition{"id-1", partition}]
			assert.True(t, ok, "partition %d answered before its offset was applied", partition)
			assert.Positive(t, s.p.LEO(), "answered before it was written")
		}
		done <- err
	}()
	return done
}

// TestCoordinatorHeartbeatsNotBehindCommits: while a commit of a group
// waits for its append (a slow ISR), the group's heartbeats, a new
// member's join, a leave, the expiry and the reads (CheckCommitter,
// Offsets) answer at once, against the state before the commit, which
// has not answered yet; the commit answers once its record is written and
// applied.
func TestCoordinatorHeartbeatsNotBehindCommits(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c, p := s.ctx, s.now, s.c, s.p
	a, b := join(t, s), join(t, s)
	release := p.hold()
	committed := commitAsync(t, s, 0, 10)
	waitFor(t, "the commit's append to start", func() bool { return p.appendsStarted() == 1 })

	for _, m := range []group.HeartbeatResponse{a, b} {
		_, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{MemberID: m.MemberID, MemberEpoch: m.MemberEpoch})
		require.NoError(t, err)
	}
	m := join(t, s)
	require.NoError(t, c.Leave(now, "tenant-a", "g", m.MemberID, ""))
	c.Expire(now)
	require.True(t, c.Active(now, "tenant-a", "g"))
	require.NoError(t, c.CheckCommitter("tenant-a", "g", a.MemberID, "", a.MemberEpoch, nil))
	require.ErrorIs(t, c.CheckCommitter("tenant-a", "g", "", "", 0, nil), ErrGroupActive)
	require.Empty(t, offsetsOf(c, "tenant-a", "g"), "the commit is not applied while its append waits")
	select {
	case err := <-committed:
		t.Fatalf("the commit answered (%v) before its append returned", err)
	default:
	}
	require.Equal(t, 1, p.appendsStarted(), "the heartbeats wrote nothing")

	release()
	require.NoError(t, <-committed)
	require.Equal(t, map[TopicPartition]int64{{"id-1", 0}: 10}, offsetsOf(c, "tenant-a", "g"))
}

// TestCoordinatorCommitsOfAGroupAtOnce: two members' commits of different
// partitions of one group have their appends in flight at once (sharing
// the partition's syncs, as different groups' do); a commit of a
// partition whose commit is in flight runs after it, so the log and the
// offsets hold them in the order they were made, here and after a load.
func TestCoordinatorCommitsOfAGroupAtOnce(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	p := s.p
	join(t, s)
	join(t, s)
	release := p.hold()
	first, other := commitAsync(t, s, 0, 10), commitAsync(t, s, 1, 20)
	waitFor(t, "both members' commits to be in flight at once", func() bool { return p.appendsStarted() == 2 })
	again := commitAsync(t, s, 0, 11)
	release()
	for _, ch := range []chan error{first, other, again} {
		require.NoError(t, <-ch)
	}
	want := map[TopicPartition]int64{{"id-1", 0}: 11, {"id-1", 1}: 20}
	require.Equal(t, want, offsetsOf(s.c, "tenant-a", "g"))
	recs := logRecords(t, p)
	require.ElementsMatch(t, []string{"offset 0=10", "offset 1=20", "offset 0=11"}, recs)
	require.Less(t, indexOf(recs, "offset 0=10"), indexOf(recs, "offset 0=11"), "commits of one partition in the order made: %v", recs)

	p2 := openPartition(t, -1)
	p2.replicate(t, p, 2)
	require.Equal(t, want, offsetsOf(newCoordinator(t, p2, 2, nil), "tenant-a", "g"), "a load rebuilds the same offsets")
}

// TestCoordinatorExclusiveWritesAfterCommitsInFlight: a group's deletion
// and a static member's join made while its commits wait for their
// appends run after them: they are written after the commits, and the
// deletion removes the offsets, here and after a load.
func TestCoordinatorExclusiveWritesAfterCommitsInFlight(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c, p := s.ctx, s.now, s.c, s.p
	release := p.hold()
	first, other := commitAsync(t, s, 0, 10), commitAsync(t, s, 1, 20)
	waitFor(t, "both commits to be in flight", func() bool { return p.appendsStarted() == 2 })
	static := make(chan error, 1)
	go func() {
		_, err := c.Heartbeat(ctx, now, "tenant-a", "g", "", topics, group.HeartbeatRequest{InstanceID: "pod-x", Subscriptions: []string{"orders"}})
		static <- err
	}()
	deleted := make(chan error, 1)
	go func() { deleted <- c.DeleteGroup(ctx, "tenant-a", "g") }()
	release()
	for _, ch := range []chan error{first, other, static, deleted} {
		require.NoError(t, <-ch)
	}
	recs := logRecords(t, p)
	require.Len(t, recs, 4)
	require.ElementsMatch(t, []string{"offset 0=10", "offset 1=20"}, recs[:2], "the commits first: %v", recs)
	require.ElementsMatch(t, []string{"static pod-x", "delete"}, recs[2:])
	require.Empty(t, c.Offsets("tenant-a", "g"), "deleted after the commits")
	p2 := openPartition(t, -1)
	p2.replicate(t, p, 2)
	require.Empty(t, newCoordinator(t, p2, 2, nil).Offsets("tenant-a", "g"), "deleted after the commits, after a load too")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
