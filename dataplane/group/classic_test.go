package group_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"
)

func newClassic(t *testing.T) *group.Classic {
	t.Helper()
	n := 0
	g, err := group.NewClassic("g", group.ClassicConfig{
		NewMemberID:           func(client string) string { n++; return fmt.Sprintf("%s-%d", client, n) },
		InitialRebalanceDelay: 3 * time.Second,
	})
	require.NoError(t, err)
	return g
}

func joinReq(id, client string, meta string) group.JoinRequest {
	return group.JoinRequest{
		MemberID: id, ClientID: client, SessionTimeout: 10 * time.Second, RebalanceTimeout: 30 * time.Second,
		ProtocolType: "consumer", Protocols: []group.Protocol{{Name: "cooperative-sticky", Metadata: []byte(meta)}, {Name: "range", Metadata: []byte(meta)}},
		RequireKnownMemberID: true,
	}
}

// TestClassicJoinSyncHeartbeat: two members join (each first told its
// member id, KIP-394), the empty group's first join phase waits out the
// initial delay, both get generation 1 with the first member as leader,
// which alone sees the members; followers' syncs wait for the leader's,
// which gives each its assignment. Then a follower's rejoin with the same
// metadata changes nothing, the leader's leave starts a join phase
// (heartbeats say REBALANCE_IN_PROGRESS) that the remaining member ends
// by rejoining: generation 2, itself the leader.
func TestClassicJoinSyncHeartbeat(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)

	res, wait, _ := g.Join(now, joinReq("", "a", "sub-a"))
	require.False(t, wait)
	require.ErrorIs(t, res.Err, group.ErrMemberIDRequired)
	a := res.MemberID
	res, wait, ans := g.Join(now, joinReq(a, "a", "sub-a"))
	require.True(t, wait, "the initial delay holds the first join phase")
	require.True(t, ans.Empty())
	require.Equal(t, group.ClassicPreparingRebalance, g.State())

	res, _, _ = g.Join(now.Add(time.Second), joinReq("", "b", "sub-b"))
	b := res.MemberID
	_, wait, _ = g.Join(now.Add(time.Second), joinReq(b, "b", "sub-b"))
	require.True(t, wait)
	require.True(t, g.Tick(now.Add(3*time.Second)).Empty(), "b's join extended the delay")

	ans = g.Tick(now.Add(4 * time.Second))
	require.Len(t, ans.Joins, 2)
	la, lb := ans.Joins[a], ans.Joins[b]
	require.NoError(t, la.Err)
	require.Equal(t, int32(1), la.Generation)
	require.Equal(t, "cooperative-sticky", la.Protocol)
	require.Equal(t, a, la.Leader)
	require.Equal(t, []group.JoinMember{{MemberID: a, Metadata: []byte("sub-a")}, {MemberID: b, Metadata: []byte("sub-b")}}, la.Members)
	require.Empty(t, lb.Members, "only the leader sees the members")
	require.Equal(t, group.ClassicCompletingRebalance, g.State())

	now = now.Add(5 * time.Second)
	sres, wait, _ := g.Sync(now, group.SyncRequest{MemberID: b, Generation: 1})
	require.True(t, wait, "a follower waits for the leader's assignment")
	_, err := g.Heartbeat(now, b, "", 1)
	require.NoError(t, err, "heartbeats at the generation are fine while the leader assigns")
	sres, wait, ans = g.Sync(now, group.SyncRequest{MemberID: a, Generation: 1, ProtocolType: "consumer", Protocol: "cooperative-sticky",
		Assignments: map[string][]byte{a: []byte("to-a"), b: []byte("to-b")}})
	require.False(t, wait)
	require.Equal(t, []byte("to-a"), sres.Assignment)
	require.Equal(t, []byte("to-b"), ans.Syncs[b].Assignment)
	require.Equal(t, group.ClassicStable, g.State())

	// Stable: a sync answers at once; wrong generations are refused.
	sres, _, _ = g.Sync(now, group.SyncRequest{MemberID: b, Generation: 1})
	require.Equal(t, []byte("to-b"), sres.Assignment)
	_, err = g.Heartbeat(now, b, "", 0)
	require.ErrorIs(t, err, group.ErrIllegalGeneration)
	_, err = g.CheckCommit(now, b, "", 1)
	require.NoError(t, err)
	_, err = g.CheckCommit(now, "", "", -1)
	require.ErrorIs(t, err, group.ErrIllegalGeneration, "a commit from outside needs the group empty")
	_, err = g.CheckCommit(now, "", "", 0)
	require.ErrorIs(t, err, group.ErrIllegalGeneration, "no member id is from outside, whatever the generation")

	// A follower rejoining with the same metadata: the same generation.
	res, wait, _ = g.Join(now, joinReq(b, "b", "sub-b"))
	require.False(t, wait)
	require.Equal(t, int32(1), res.Generation)
	require.Equal(t, group.ClassicStable, g.State())

	// The leader leaves: a join phase for b.
	ans, err = g.Leave(now, a, "")
	require.NoError(t, err)
	require.True(t, ans.Empty())
	_, err = g.Heartbeat(now, b, "", 1)
	require.ErrorIs(t, err, group.ErrRebalanceInProgress)
	_, err = g.CheckCommit(now, b, "", 1)
	require.NoError(t, err, "a commit at the generation during its join phase: a revoke callback's (Kafka accepts it)")
	_, err = g.CheckCommit(now, b, "", 0)
	require.ErrorIs(t, err, group.ErrIllegalGeneration)
	res, wait, _ = g.Join(now, joinReq(b, "b", "sub-b"))
	require.False(t, wait, "the only member rejoined: no delay outside an empty group")
	require.Equal(t, int32(2), res.Generation)
	require.Equal(t, b, res.Leader)
	require.Equal(t, group.ClassicCompletingRebalance, g.State())
	_, err = g.CheckCommit(now, b, "", 2)
	require.ErrorIs(t, err, group.ErrRebalanceInProgress, "the new generation has no assignment yet")
	_, err = g.Heartbeat(now, a, "", 2)
	require.ErrorIs(t, err, group.ErrUnknownMember)
}

// TestClassicTimeouts: a member that does not rejoin within the rebalance
// timeout is removed when the join phase ends; one that does not sync in
// time is removed and the group rebalances; one that stops heartbeating
// is removed at its session timeout.
func TestClassicTimeouts(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)
	join := func(id, client string) group.JoinResponse {
		t.Helper()
		req := joinReq(id, client, client)
		req.RequireKnownMemberID = false
		res, _, _ := g.Join(now, req)
		return res
	}
	a, b := join("", "a").MemberID, join("", "b").MemberID
	ans := g.Tick(now.Add(3 * time.Second))
	require.Len(t, ans.Joins, 2)
	now = now.Add(3 * time.Second)
	_, _, ans = g.Sync(now, group.SyncRequest{MemberID: a, Generation: 1, Assignments: map[string][]byte{a: nil, b: nil}})
	require.True(t, ans.Empty())
	require.Equal(t, group.ClassicStable, g.State())

	// a rejoins with new metadata: a join phase that b, alive (it
	// heartbeats) but busy, misses.
	req := joinReq(a, "a", "new")
	req.RequireKnownMemberID = false
	_, wait, _ := g.Join(now, req)
	require.True(t, wait)
	for s := 5; s < 30; s += 5 {
		ans, err := g.Heartbeat(now.Add(time.Duration(s)*time.Second), b, "", 1)
		require.ErrorIs(t, err, group.ErrRebalanceInProgress)
		require.True(t, ans.Empty())
	}
	ans = g.Tick(now.Add(30 * time.Second))
	require.NoError(t, ans.Joins[a].Err)
	require.Equal(t, int32(2), ans.Joins[a].Generation)
	require.Equal(t, []group.JoinMember{{MemberID: a, Metadata: []byte("new")}}, ans.Joins[a].Members, "b was removed")
	now = now.Add(30 * time.Second)

	// c joins; a (leader) never syncs: removed after its rebalance
	// timeout, and c's sync is told to rejoin.
	c := join("", "c").MemberID
	_, wait, _ = g.Join(now, req)
	require.False(t, wait, "both joined: the phase ends")
	_, wait, _ = g.Sync(now, group.SyncRequest{MemberID: c, Generation: 3})
	require.True(t, wait)
	ans = g.Tick(now.Add(31 * time.Second))
	require.ErrorIs(t, ans.Syncs[c].Err, group.ErrRebalanceInProgress)
	require.Equal(t, group.ClassicPreparingRebalance, g.State())
	now = now.Add(31 * time.Second)
	res := join(c, "c")
	require.NoError(t, res.Err)
	require.Equal(t, c, res.Leader)
	_, _, _ = g.Sync(now, group.SyncRequest{MemberID: c, Generation: res.Generation})
	require.Equal(t, group.ClassicStable, g.State())

	// c stops heartbeating: gone after its session timeout, the group
	// empty.
	require.True(t, g.Tick(now.Add(10*time.Second)).Empty())
	require.Equal(t, group.ClassicStable, g.State())
	g.Tick(now.Add(11 * time.Second))
	require.Equal(t, group.ClassicEmpty, g.State())
	_, err := g.CheckCommit(now, "", "", -1)
	require.NoError(t, err, "an empty group takes commits from outside")
}

// TestClassicStaticMember: a restarted static member (same instance id,
// no member id) takes its slot in a Stable group without a rebalance and
// gets its assignment; the old member id is fenced. A restarted static
// leader is told to skip the assignment (JoinGroup v9+) or, before v9,
// starts a rebalance.
func TestClassicStaticMember(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)
	static := func(instance string) group.JoinRequest {
		r := joinReq("", instance, "sub")
		r.InstanceID = instance
		return r
	}
	res, wait, _ := g.Join(now, static("i-a"))
	require.True(t, wait, "a static member is known by its instance id: no member id round trip")
	a := res.MemberID
	res, _, _ = g.Join(now, static("i-b"))
	b := res.MemberID
	ans := g.Tick(now.Add(3 * time.Second))
	require.Equal(t, a, ans.Joins[b].Leader)
	_, _, _ = g.Sync(now, group.SyncRequest{MemberID: a, InstanceID: "i-a", Generation: 1, Assignments: map[string][]byte{a: []byte("pa"), b: []byte("pb")}})
	require.Equal(t, group.ClassicStable, g.State())

	res, wait, _ = g.Join(now, static("i-b"))
	require.False(t, wait)
	require.NotEqual(t, b, res.MemberID)
	require.Equal(t, int32(1), res.Generation, "no rebalance")
	sres, _, _ := g.Sync(now, group.SyncRequest{MemberID: res.MemberID, InstanceID: "i-b", Generation: 1})
	require.Equal(t, []byte("pb"), sres.Assignment)
	_, err := g.Heartbeat(now, b, "i-b", 1)
	require.ErrorIs(t, err, group.ErrFencedInstanceID)

	leader := static("i-a")
	leader.SkipAssignment = true
	res, _, _ = g.Join(now, leader)
	require.True(t, res.SkipAssignment)
	require.Equal(t, res.MemberID, res.Leader)
	require.Len(t, res.Members, 2)
	require.Equal(t, group.ClassicStable, g.State())

	res, wait, _ = g.Join(now, static("i-a"))
	require.True(t, wait, "a leader that cannot skip the assignment rebalances")
	require.Equal(t, group.ClassicPreparingRebalance, g.State())
}

// TestClassicRefusals: bad session timeouts, protocol types and protocols
// no member shares are refused; a member id the group never gave is
// unknown.
func TestClassicRefusals(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)
	req := joinReq("", "a", "m")
	req.SessionTimeout = time.Second
	res, _, _ := g.Join(now, req)
	require.ErrorIs(t, res.Err, group.ErrInvalidSessionTimeout)
	res, _, _ = g.Join(now, joinReq("made-up", "a", "m"))
	require.ErrorIs(t, res.Err, group.ErrUnknownMember)

	req = joinReq("", "a", "m")
	req.RequireKnownMemberID = false
	res, _, _ = g.Join(now, req)
	require.NoError(t, res.Err)
	other := joinReq("", "b", "m")
	other.ProtocolType = "connect"
	res, _, _ = g.Join(now, other)
	require.ErrorIs(t, res.Err, group.ErrInconsistentProtocol)
	other = joinReq("", "b", "m")
	other.Protocols = []group.Protocol{{Name: "roundrobin"}}
	res, _, _ = g.Join(now, other)
	require.ErrorIs(t, res.Err, group.ErrInconsistentProtocol)
}

// TestClassicPendingMembersBounded: member ids handed out with
// MEMBER_ID_REQUIRED and never used are bounded (1,000 at a time) and
// forgotten after their session timeout.
func TestClassicPendingMembersBounded(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)
	for i := range 1000 {
		res, _, _ := g.Join(now, joinReq("", "c", "m"))
		require.ErrorIs(t, res.Err, group.ErrMemberIDRequired, "join %d", i)
	}
	res, _, _ := g.Join(now, joinReq("", "c", "m"))
	require.ErrorIs(t, res.Err, group.ErrGroupFull)
	later := now.Add(11 * time.Second) // past the 10 s session timeout
	res, _, _ = g.Join(later, joinReq("", "c", "m"))
	require.ErrorIs(t, res.Err, group.ErrMemberIDRequired)
}

// TestClassicDeadMemberExpiresInAJoinPhase: a member that stopped (no
// heartbeat, no rejoin) while another joins is removed at its session
// timeout, and the join phase ends then with the one that joined, long
// before the rebalance timeout.
func TestClassicDeadMemberExpiresInAJoinPhase(t *testing.T) {
	g := newClassic(t)
	now := time.Unix(1000, 0)
	res, _, _ := g.Join(now, joinReq("", "a", "sub-a"))
	a := res.MemberID
	_, wait, _ := g.Join(now, joinReq(a, "a", "sub-a"))
	require.True(t, wait)
	ans := g.Tick(now.Add(4 * time.Second)) // the initial delay
	require.Len(t, ans.Joins, 1)
	gen := ans.Joins[a].Generation
	_, wait, _ = g.Sync(now.Add(4*time.Second), group.SyncRequest{MemberID: a, Generation: gen, Assignments: map[string][]byte{a: []byte("all")}})
	require.False(t, wait)
	require.Equal(t, group.ClassicStable, g.State())

	// a stops; b joins a second later.
	res, _, _ = g.Join(now.Add(5*time.Second), joinReq("", "b", "sub-b"))
	b := res.MemberID
	_, wait, _ = g.Join(now.Add(5*time.Second), joinReq(b, "b", "sub-b"))
	require.True(t, wait)
	require.True(t, g.Tick(now.Add(10*time.Second)).Empty(), "a's session (10 s) runs until 14 s")
	ans = g.Tick(now.Add(15 * time.Second))
	require.Len(t, ans.Joins, 1, "a expired: the phase ends with b")
	require.NoError(t, ans.Joins[b].Err)
	require.Equal(t, gen+1, ans.Joins[b].Generation)
	require.Equal(t, 1, g.Members())
}
