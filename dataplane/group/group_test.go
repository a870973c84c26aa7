package group_test

import (
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"
)

// fleet drives a group with ideal clients through the public API and
// records every response.
type fleet struct {
	t      *testing.T
	g      *group.Group
	now    time.Time
	topics group.Topics
	next   int
	epochs map[string]int32
	owned  map[string]group.TopicPartitions
	// onResponse sees every successful response.
	onResponse func(id string, resp group.HeartbeatResponse)
}

func newFleet(t *testing.T, topics map[string]int32) *fleet {
	f := &fleet{t: t, now: epoch0, topics: group.TopicMap(topics), epochs: map[string]int32{}, owned: map[string]group.TopicPartitions{}}
	g, err := group.New("g", group.Config{NewMemberID: func() string {
		f.next++
		return fmt.Sprintf("m%03d", f.next-1)
	}})
	require.NoError(t, err)
	f.g = g
	return f
}

func (f *fleet) join(subs ...string) string {
	f.t.Helper()
	resp, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberEpoch: group.JoinEpoch, Subscriptions: subs}, f.topics)
	require.NoError(f.t, err)
	f.record(resp.MemberID, resp)
	return resp.MemberID
}

func (f *fleet) heartbeat(id string) {
	f.t.Helper()
	resp, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: id, MemberEpoch: f.epochs[id], Owned: f.owned[id]}, f.topics)
	require.NoError(f.t, err)
	f.record(id, resp)
}

func (f *fleet) record(id string, resp group.HeartbeatResponse) {
	f.epochs[id] = resp.MemberEpoch
	f.owned[id] = resp.Assignment
	if f.onResponse != nil {
		f.onResponse(id, resp)
	}
}

func (f *fleet) leave(id string) {
	f.t.Helper()
	_, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: id, MemberEpoch: group.LeaveEpoch}, f.topics)
	require.NoError(f.t, err)
	delete(f.epochs, id)
	delete(f.owned, id)
}

// converge heartbeats every member in id order until the group is stable.
func (f *fleet) converge() group.GroupDescription {
	f.t.Helper()
	for range 10 {
		f.now = f.now.Add(time.Second)
		ids := make([]string, 0, len(f.epochs))
		for id := range f.epochs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			f.heartbeat(id)
		}
		if d := f.g.Describe(f.now); d.State == group.StateStable {
			return d
		}
	}
	f.t.Fatalf("group not stable after 10 rounds: %+v", f.g.Describe(f.now))
	return group.GroupDescription{}
}

func assignments(d group.GroupDescription) map[string]group.TopicPartitions {
	out := map[string]group.TopicPartitions{}
	for _, m := range d.Members {
		out[m.MemberID] = m.Assignment
	}
	return out
}

// holders maps "topic:partition" to the member holding it.
func holders(a map[string]group.TopicPartitions) map[string]string {
	out := map[string]string{}
	for id, tps := range a {
		for t, ps := range tps {
			for _, p := range ps {
				out[fmt.Sprintf("%s:%d", t, p)] = id
			}
		}
	}
	return out
}

// TestGroupChurn20x60: in a stable group of 20 members over 60 partitions
// one member leaves and one joins. Only the partitions that change member
// are revoked, and a member never gets a response that omits a partition it
// holds both before and after.
func TestGroupChurn20x60(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// settle lets the group converge between the leave and the join.
		settle bool
	}{
		{name: "leave and join at once"},
		{name: "leave, settle, join", settle: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, map[string]int32{"a": 20, "b": 20, "c": 20})
			for range 20 {
				f.join("a", "b", "c")
			}
			before := f.converge()
			require.Len(t, before.Members, 20)
			a0 := assignments(before)
			for _, tps := range a0 {
				require.Equal(t, 3, tps.Len())
			}
			revoked0 := before.RevokedPartitions

			var responses []struct {
				id   string
				resp group.HeartbeatResponse
			}
			f.onResponse = func(id string, resp group.HeartbeatResponse) {
				responses = append(responses, struct {
					id   string
					resp group.HeartbeatResponse
				}{id, resp})
			}
			f.leave("m007")
			if tc.settle {
				f.converge()
			}
			joiner := f.join("a", "b", "c")
			after := f.converge()
			a1 := assignments(after)
			require.Len(t, after.Members, 20)
			for id, tps := range a1 {
				require.Equal(t, 3, tps.Len(), id)
			}

			// Every partition either stayed, or came from the leaver, or
			// (after settling) was taken from the member that took a
			// leaver's partition.
			h0, h1 := holders(a0), holders(a1)
			movedFromStayers := 0
			for p, id := range h1 {
				if h0[p] != id && h0[p] != "m007" {
					movedFromStayers++
					require.Equal(t, joiner, id, "%s moved from %s to %s", p, h0[p], id)
				}
			}
			// Every partition a member held before and after was in every
			// response it got in between.
			for _, r := range responses {
				for t0, ps := range a0[r.id] {
					for _, p := range ps {
						if a1[r.id].Contains(t0, p) {
							require.True(t, r.resp.Assignment.Contains(t0, p),
								"%s's response %v omits %s:%d, which it keeps", r.id, r.resp.Assignment, t0, p)
						}
					}
				}
			}
			revoked := after.RevokedPartitions - revoked0
			if tc.settle {
				// The three members that took the leaver's partitions
				// each give one up to the joiner, which is all that moves.
				require.Equal(t, int64(3), revoked)
				require.Equal(t, 3, a1[joiner].Len())
				require.LessOrEqual(t, movedFromStayers, 3)
			} else {
				// The leaver's partitions go straight to the joiner:
				// nobody revokes anything.
				require.Zero(t, revoked)
				require.Zero(t, movedFromStayers)
				require.Equal(t, a0["m007"], a1[joiner])
			}
		})
	}
}

// TestGroupRandomOperations drives the scenario world with random commands
// (joins, heartbeats, leaves, static leaves and rejoins, crashes, stalled
// clients, topic growth and time) and checks its invariants after each:
// no two clients own a partition at once, and a client owns only partitions
// its member holds. Then the live clients heartbeat until the group is
// stable, which must happen one round after a session timeout has removed
// the members nobody heartbeats for, with a balanced assignment.
func TestGroupRandomOperations(t *testing.T) {
	t.Parallel()
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 848))
			w := newWorld(t)
			run := func(cmd string) {
				t.Helper()
				require.NoError(t, w.run(cmd), cmd)
				if !strings.HasPrefix(cmd, "tick ") {
					require.NoError(t, w.check(), "after %q:\n%s", cmd, w.out.String())
				}
			}
			run("topic t 8")
			run("topic u 5")
			names := 0
			members := func() []*client {
				var out []*client
				for _, n := range sortedNames(w) {
					if c := w.clients[n]; c.id != "" {
						out = append(out, c)
					}
				}
				return out
			}
			for range 300 {
				ms := members()
				var pick *client
				if len(ms) > 0 {
					pick = ms[rng.IntN(len(ms))]
				}
				switch r := rng.IntN(100); {
				case r < 8 || pick == nil:
					names++
					inst := ""
					if rng.IntN(2) == 0 {
						inst = fmt.Sprintf(" instance=i%d", rng.IntN(4))
					}
					run(fmt.Sprintf("join c%d sub=t,u%s timeout=20s", names, inst))
				case r < 70:
					run("hb " + pick.name)
				case r < 74:
					run("leave " + pick.name)
				case r < 78 && pick.instance != "":
					run("leave-static " + pick.name)
				case r < 80:
					run("crash " + pick.name)
				case r < 82:
					run("stall " + pick.name)
				case r < 84:
					run(fmt.Sprintf("topic t %d", 8+rng.IntN(4)))
				default:
					run(fmt.Sprintf("tick %ds", 1+rng.IntN(6)))
				}
			}
			// Quiesce: the stalled clients give up and the live ones
			// heartbeat every 5 s. After a session timeout the members of
			// crashed clients and departed static members are gone, and
			// a round later the group must be stable.
			for _, c := range w.clients {
				c.stalled = false
			}
			var d group.GroupDescription
			for round := range 12 {
				run("tick 5s")
				for _, c := range members() {
					run("hb " + c.name)
				}
				d = w.g.Describe(w.now)
				if round >= 9 {
					require.Contains(t, []group.State{group.StateStable, group.StateEmpty}, d.State, "%+v", d)
				}
			}
			lo, hi := -1, 0
			for _, m := range d.Members {
				require.Equal(t, m.Target, m.Assignment)
				n := m.Target.Len()
				if lo < 0 || n < lo {
					lo = n
				}
				hi = max(hi, n)
			}
			require.LessOrEqual(t, hi-lo, 1, "%+v", d)
		})
	}
}

func sortedNames(w *world) []string {
	names := make([]string, 0, len(w.clients))
	for n := range w.clients {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func TestGroupHeartbeatValidation(t *testing.T) {
	t.Parallel()
	topics := group.TopicMap(map[string]int32{"t": 3})
	tests := []struct {
		name   string
		req    group.HeartbeatRequest
		topics group.Topics
		substr string
	}{
		{name: "join without subscriptions", req: group.HeartbeatRequest{}, substr: "subscribe"},
		{name: "join with empty subscriptions", req: group.HeartbeatRequest{Subscriptions: []string{}}, substr: "subscribe"},
		{name: "empty topic name", req: group.HeartbeatRequest{Subscriptions: []string{"t", ""}}, substr: "empty topic name"},
		{name: "bad epoch", req: group.HeartbeatRequest{MemberID: "x", MemberEpoch: -3}, substr: "member epoch -3"},
		{name: "heartbeat without id", req: group.HeartbeatRequest{MemberEpoch: 4}, substr: "member id required"},
		{name: "static leave without instance", req: group.HeartbeatRequest{MemberID: "x", MemberEpoch: group.StaticLeaveEpoch}, substr: "instance id required"},
		{name: "negative rebalance timeout", req: group.HeartbeatRequest{Subscriptions: []string{"t"}, RebalanceTimeout: -time.Second}, substr: "rebalance timeout"},
		{name: "negative owned partition", req: group.HeartbeatRequest{Subscriptions: []string{"t"}, Owned: group.TopicPartitions{"t": {-1}}}, substr: "owned partition t:-1"},
		{name: "negative partition count", req: group.HeartbeatRequest{Subscriptions: []string{"t"}},
			topics: group.TopicMap(map[string]int32{"t": -2}), substr: `topic "t" has -2 partitions`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := group.New("g", group.Config{})
			require.NoError(t, err)
			if tt.topics == nil {
				tt.topics = topics
			}
			_, err = g.Heartbeat(epoch0, tt.req, tt.topics)
			require.ErrorIs(t, err, group.ErrInvalid)
			require.ErrorContains(t, err, tt.substr)
			require.True(t, g.Empty(epoch0), "a refused request must not change the group")
			require.Zero(t, g.Describe(epoch0).GroupEpoch)
		})
	}
}

func TestGroupConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg    group.Config
		substr string
	}{
		{group.Config{Assignor: "sticky"}, `assignor "sticky"`},
		{group.Config{SessionTimeout: -1}, "session timeout"},
		{group.Config{HeartbeatInterval: -1}, "heartbeat interval"},
		{group.Config{SessionTimeout: 5 * time.Second}, "must be below the session timeout"},
		{group.Config{HeartbeatInterval: time.Minute}, "must be below the session timeout"},
	} {
		_, err := group.New("g", tc.cfg)
		require.ErrorIs(t, err, group.ErrInvalid)
		require.ErrorContains(t, err, tc.substr)
	}
	_, err := group.New("", group.Config{})
	require.ErrorIs(t, err, group.ErrInvalid)

	g, err := group.New("g", group.Config{Assignor: group.AssignorRange, SessionTimeout: 10 * time.Second, HeartbeatInterval: time.Second})
	require.NoError(t, err)
	require.Equal(t, "g", g.ID())
	resp, err := g.Heartbeat(epoch0, group.HeartbeatRequest{Subscriptions: []string{"t"}}, group.TopicMap(map[string]int32{"t": 1}))
	require.NoError(t, err)
	require.Equal(t, time.Second, resp.HeartbeatInterval)
	require.Equal(t, group.AssignorRange, g.Describe(epoch0).Assignor)

	// Default member ids: 22 base64url characters, 128 random bits.
	require.Len(t, resp.MemberID, 22)
	raw, err := base64.RawURLEncoding.DecodeString(resp.MemberID)
	require.NoError(t, err)
	require.Len(t, raw, 16)
	resp2, err := g.Heartbeat(epoch0, group.HeartbeatRequest{Subscriptions: []string{"t"}}, nil)
	require.NoError(t, err)
	require.NotEqual(t, resp.MemberID, resp2.MemberID)

	// An injected generator that repeats itself is refused, not merged.
	g, err = group.New("g", group.Config{NewMemberID: func() string { return "same" }})
	require.NoError(t, err)
	_, err = g.Heartbeat(epoch0, group.HeartbeatRequest{Subscriptions: []string{"t"}}, nil)
	require.NoError(t, err)
	_, err = g.Heartbeat(epoch0, group.HeartbeatRequest{Subscriptions: []string{"t"}}, nil)
	require.ErrorIs(t, err, group.ErrInvalid)
	require.Len(t, g.Describe(epoch0).Members, 1)
}

// TestGroupLifecycle checks Empty, Expire, Leave and Describe's fields.
func TestGroupLifecycle(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]int32{"t": 4})
	require.True(t, f.g.Empty(f.now))
	require.Equal(t, group.StateEmpty, f.g.Describe(f.now).State)

	a := f.join("t")
	f.now = f.now.Add(time.Second)
	b := f.join("t", "t") // duplicates are ignored
	require.False(t, f.g.Empty(f.now))
	d := f.g.Describe(f.now)
	require.Equal(t, group.StateReconciling, d.State)
	require.Equal(t, "g", d.GroupID)
	require.Equal(t, []string{"t"}, d.Members[1].Subscriptions)
	require.Equal(t, epoch0, d.Members[0].LastHeartbeat)
	require.Equal(t, epoch0.Add(time.Second), d.Members[1].LastHeartbeat)
	require.Equal(t, group.DefaultRebalanceTimeout, d.Members[0].RebalanceTimeout)

	f.converge()
	d = f.g.Describe(f.now)
	require.Equal(t, group.StateStable, d.State)
	require.Equal(t, int64(2), d.Rebalances)
	require.Equal(t, int64(2), d.RevokedPartitions)

	// Leave by member id; errors for unknown or mismatched names.
	require.ErrorIs(t, f.g.Leave(f.now, "", ""), group.ErrInvalid)
	require.ErrorIs(t, f.g.Leave(f.now, "nope", ""), group.ErrUnknownMember)
	require.ErrorIs(t, f.g.Leave(f.now, "", "nope"), group.ErrUnknownMember)
	require.ErrorIs(t, f.g.Leave(f.now, a, "inst"), group.ErrFencedInstanceID)
	require.NoError(t, f.g.Leave(f.now, a, ""))
	_, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: a, MemberEpoch: f.epochs[a]}, f.topics)
	require.ErrorIs(t, err, group.ErrUnknownMember)
	delete(f.epochs, a)
	f.converge()
	require.Equal(t, 4, f.owned[b].Len())

	// Expire: nothing before the session timeout, b at it.
	last := f.now
	require.Empty(t, f.g.Expire(last.Add(group.DefaultSessionTimeout-time.Nanosecond)))
	require.Equal(t, []string{b}, f.g.Expire(last.Add(group.DefaultSessionTimeout)))
	require.True(t, f.g.Empty(f.now))
	require.ErrorIs(t, f.g.Owns(f.now, b, "", f.epochs[b], "t", 0), group.ErrUnknownMember)
}

// TestGroupDeterministic: the same calls give the same group, member ids
// aside.
func TestGroupDeterministic(t *testing.T) {
	t.Parallel()
	run := func() group.GroupDescription {
		f := newFleet(t, map[string]int32{"a": 7, "b": 5})
		var ids []string
		for i := range 6 {
			if i%2 == 0 {
				ids = append(ids, f.join("a", "b"))
			} else {
				ids = append(ids, f.join("b"))
			}
		}
		f.converge()
		f.leave(ids[2])
		f.join("a")
		return f.converge()
	}
	require.Equal(t, run(), run())
}

// RestoreInstance names an instance id's latest incarnation in a group
// rebuilt after a failover; it never overrides a member that joined here.
func TestGroupRestoreInstance(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]int32{"t": 2})
	require.ErrorIs(t, f.g.RestoreInstance("", "m1"), group.ErrInvalid)
	require.ErrorIs(t, f.g.RestoreInstance("pod-x", ""), group.ErrInvalid)
	require.NoError(t, f.g.RestoreInstance("pod-x", "old"))
	require.True(t, f.g.Empty(f.now), "a restored incarnation is not a member")
	_, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: "older", InstanceID: "pod-x", MemberEpoch: 1}, f.topics)
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
	_, err = f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: "old", InstanceID: "pod-x", MemberEpoch: 1}, f.topics)
	require.ErrorIs(t, err, group.ErrUnknownMember)

	resp, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{InstanceID: "pod-x", Subscriptions: []string{"t"}}, f.topics)
	require.NoError(t, err)
	require.NoError(t, f.g.RestoreInstance("pod-x", "old"), "a member has the instance id: nothing changes")
	require.NoError(t, f.g.Owns(f.now, resp.MemberID, "pod-x", resp.MemberEpoch, "t", 0))
	require.ErrorIs(t, f.g.Owns(f.now, "old", "pod-x", resp.MemberEpoch, "t", 0), group.ErrFencedInstanceID)
}

// TestClientMemberIDs: with ClientMemberID (KIP-848 v1) a join names the
// member with the client's id; a join under a known id resets that
// member, as without; a static member's new process takes its slot under
// its own id, fencing the old one. Without ClientMemberID a join with an
// id the group does not know is ErrUnknownMember.
func TestClientMemberIDs(t *testing.T) {
	f := newFleet(t, map[string]int32{"t": 4})
	_, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: "client-a", MemberEpoch: group.JoinEpoch, Subscriptions: []string{"t"}}, f.topics)
	require.ErrorIs(t, err, group.ErrUnknownMember)

	join := func(id, instance string) group.HeartbeatResponse {
		t.Helper()
		resp, err := f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: id, InstanceID: instance, MemberEpoch: group.JoinEpoch, Subscriptions: []string{"t"}, ClientMemberID: true}, f.topics)
		require.NoError(t, err)
		require.Equal(t, id, resp.MemberID)
		f.record(id, resp)
		return resp
	}
	join("client-a", "")
	join("client-b", "static-b")
	d := f.converge()
	require.Len(t, d.Members, 2)
	require.Equal(t, "client-a", d.Members[0].MemberID)
	require.Equal(t, 2, d.Members[0].Assignment.Len())

	// client-a rejoins under its id: the same member, reset.
	join("client-a", "")
	require.Len(t, f.g.Describe(f.now).Members, 2)

	// A new process of static-b joins as client-c: it has b's slot and
	// partitions at once, and b is fenced.
	held := f.owned["client-b"]
	resp := join("client-c", "static-b")
	require.Equal(t, held, resp.Assignment)
	_, err = f.g.Heartbeat(f.now, group.HeartbeatRequest{MemberID: "client-b", InstanceID: "static-b", MemberEpoch: f.epochs["client-b"]}, f.topics)
	require.ErrorIs(t, err, group.ErrFencedInstanceID)
}
