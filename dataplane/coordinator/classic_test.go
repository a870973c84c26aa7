package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/runtime"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func classicJoin(id string) group.JoinRequest {
	return group.JoinRequest{
		MemberID: id, ClientID: "c", SessionTimeout: 10 * time.Second, RebalanceTimeout: 20 * time.Second,
		ProtocolType: "consumer", Protocols: []group.Protocol{{Name: "range", Metadata: []byte("orders")}},
	}
}

// TestCoordinatorClassicGroup: a lone member's JoinGroup ends its join
// phase at once (no initial delay here); a newcomer's JoinGroup waits
// until the members rejoined, a follower's SyncGroup until the leader's;
// a JoinGroup whose caller gives up is answered to nobody. A classic
// group with members refuses consumer-protocol members and the reverse;
// its members commit at their generation; leaving empties it.
func TestCoordinatorClassicGroup(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c := s.ctx, s.now, s.c

	a, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
	require.NoError(t, err)
	require.Equal(t, int32(1), a.Generation)
	require.Equal(t, a.MemberID, a.Leader)
	_, err = c.SyncClassic(ctx, now, "t", "g", group.SyncRequest{MemberID: a.MemberID, Generation: 1, Assignments: map[string][]byte{a.MemberID: []byte("all")}})
	require.NoError(t, err)

	// b joins and waits for a to rejoin; c gives up waiting.
	type joined struct {
		r   group.JoinResponse
		err error
	}
	bJoin := make(chan joined, 1)
	go func() {
		r, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
		bJoin <- joined{r, err}
	}()
	require.Eventually(t, func() bool {
		return errors.Is(c.HeartbeatClassic(now, "t", "g", a.MemberID, "", 1), group.ErrRebalanceInProgress)
	}, 10*time.Second, 5*time.Millisecond)
	gone, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.JoinClassic(gone, now, "t", "g", classicJoin(""))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ra, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(a.MemberID))
	require.NoError(t, err, "every member joined: the phase ends")
	rb := <-bJoin
	require.NoError(t, rb.err)
	require.Equal(t, int32(2), ra.Generation)
	require.Equal(t, ra.Generation, rb.r.Generation)
	require.Equal(t, a.MemberID, ra.Leader, "the leader that rejoined stays leader")
	require.Len(t, ra.Members, 3, "the member that gave up is in until it fails to sync")

	synced := make(chan group.SyncResponse, 1)
	go func() {
		r, _ := c.SyncClassic(ctx, now, "t", "g", group.SyncRequest{MemberID: rb.r.MemberID, Generation: 2})
		synced <- r
	}()
	require.Eventually(t, func() bool {
		d, _ := c.DescribeClassic(now, "t", "g")
		return d.State == group.ClassicCompletingRebalance
	}, 10*time.Second, 5*time.Millisecond)
	_, err = c.SyncClassic(ctx, now, "t", "g", group.SyncRequest{MemberID: a.MemberID, Generation: 2,
		Assignments: map[string][]byte{a.MemberID: []byte("p0"), rb.r.MemberID: []byte("p1")}})
	require.NoError(t, err)
	require.Equal(t, []byte("p1"), (<-synced).Assignment)
	d, _ := c.DescribeClassic(now, "t", "g")
	require.Equal(t, group.ClassicStable, d.State)

	// One protocol at a time.
	_, err = c.Heartbeat(ctx, now, "t", "g", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.ErrorIs(t, err, group.ErrInconsistentProtocol)
	_, err = c.Heartbeat(ctx, now, "t", "kip848", "", topics, group.HeartbeatRequest{Subscriptions: []string{"orders"}})
	require.NoError(t, err)
	_, err = c.JoinClassic(ctx, now, "t", "kip848", classicJoin(""))
	require.ErrorIs(t, err, group.ErrInconsistentProtocol)

	// Commits: at the generation, by a member.
	offs := []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 1}}
	require.NoError(t, c.CheckCommitter("t", "g", a.MemberID, "", 2, offs))
	require.ErrorIs(t, c.CheckCommitter("t", "g", a.MemberID, "", 1, offs), group.ErrIllegalGeneration)
	require.ErrorIs(t, c.CheckCommitter("t", "g", "", "", -1, offs), group.ErrIllegalGeneration)
	require.True(t, c.Active(now, "t", "g"))

	for _, m := range d.Members {
		require.NoError(t, c.LeaveClassic(now, "t", "g", m.MemberID, ""))
	}
	require.False(t, c.Active(now, "t", "g"))
	require.NoError(t, c.CheckCommitter("t", "g", "", "", -1, offs))
}

// TestCoordinatorClassicJoinReplaced: a member's second JoinGroup while
// its first waits answers the first REBALANCE_IN_PROGRESS and waits
// itself, until the phase ends.
func TestCoordinatorClassicJoinReplaced(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c := s.ctx, s.now, s.c
	a, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
	require.NoError(t, err)
	_, err = c.SyncClassic(ctx, now, "t", "g", group.SyncRequest{MemberID: a.MemberID, Generation: 1})
	require.NoError(t, err)
	// b's join starts a phase that waits for a.
	type joined struct {
		r   group.JoinResponse
		err error
	}
	bJoin := make(chan joined, 1)
	go func() {
		r, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
		bJoin <- joined{r, err}
	}()
	require.Eventually(t, func() bool {
		return errors.Is(c.HeartbeatClassic(now, "t", "g", a.MemberID, "", 1), group.ErrRebalanceInProgress)
	}, 10*time.Second, 5*time.Millisecond)
	d, _ := c.DescribeClassic(now, "t", "g")
	b := otherMember(d, a.MemberID)
	// b joins again while its first join waits.
	second := make(chan joined, 1)
	go func() {
		r, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(b))
		second <- joined{r, err}
	}()
	first := <-bJoin
	require.NoError(t, first.err)
	require.ErrorIs(t, first.r.Err, group.ErrRebalanceInProgress)
	select {
	case j := <-second:
		t.Fatalf("the second join was answered before a rejoined: %+v", j)
	default:
	}
	ra, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(a.MemberID))
	require.NoError(t, err)
	j := <-second
	require.NoError(t, j.err)
	require.NoError(t, j.r.Err)
	require.Equal(t, ra.Generation, j.r.Generation)
}

// otherMember is the member of d that is not id.
func otherMember(d group.ClassicDescription, id string) string {
	for _, m := range d.Members {
		if m.MemberID != id {
			return m.MemberID
		}
	}
	return ""
}

// TestCoordinatorClassicWaitEndsWithTheCoordinator: a JoinGroup waiting
// for other members is answered ErrNotCoordinator when its coordinator
// closes (the offsets partition moved), not left waiting.
func TestCoordinatorClassicWaitEndsWithTheCoordinator(t *testing.T) {
	t.Parallel()
	s := setup(t, nil)
	ctx, now, c := s.ctx, s.now, s.c
	a, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
	require.NoError(t, err)
	_, err = c.SyncClassic(ctx, now, "t", "g", group.SyncRequest{MemberID: a.MemberID, Generation: 1})
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := c.JoinClassic(ctx, now, "t", "g", classicJoin(""))
		waited <- err
	}()
	require.Eventually(t, func() bool {
		return errors.Is(c.HeartbeatClassic(now, "t", "g", a.MemberID, "", 1), group.ErrRebalanceInProgress)
	}, 10*time.Second, 5*time.Millisecond)
	c.Close()
	require.ErrorIs(t, <-waited, runtime.ErrNotCoordinator)
}
