package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

var t0 = time.Date(2025, time.June, 1, 12, 0, 0, 0, time.UTC)

// brokers returns brokers with the given ids live at t0 and the others
// (listed in dead) expired.
func brokers(liveIDs, dead []int32) []store.Broker {
	var out []store.Broker
	for _, id := range liveIDs {
		out = append(out, store.Broker{ID: id, Epoch: 1, LeaseExpiresAt: t0.Add(time.Second)})
	}
	for _, id := range dead {
		out = append(out, store.Broker{ID: id, Epoch: 1, LeaseExpiresAt: t0})
	}
	return out
}

// part is a partition "t"/0 at partition epoch 5, leader epoch 3.
func part(replicas []int32, leader int32, isr []int32) store.Partition {
	return store.Partition{TopicID: "t", Replicas: replicas, Leader: leader, LeaderEpoch: 3, ISR: isr, PartitionEpoch: 5}
}

func TestControllerDecide(t *testing.T) {
	t.Parallel()
	longAgo := map[int32]time.Time{1: t0.Add(-time.Minute), 2: t0.Add(-time.Minute), 3: t0.Add(-time.Minute)}
	r123 := []int32{1, 2, 3}
	for _, tt := range []struct {
		name      string
		live      []int32
		dead      []int32
		liveSince map[int32]time.Time
		unclean   bool
		p         store.Partition
		// want: leader, leader epoch, ISR of the change; reason "" = no change.
		reason      Reason
		leader      int32
		leaderEpoch int32
		isr         []int32
	}{
		{name: "all live, preferred leads: nothing", live: r123, p: part(r123, 1, r123)},
		{name: "leader dead: first live ISR replica in replicas order", live: []int32{2, 3}, dead: []int32{1},
			p: part(r123, 1, []int32{3, 1, 2}), reason: ReasonLeaderFailover, leader: 2, leaderEpoch: 4, isr: []int32{3, 2}},
		{name: "leader dead: a live replica outside the ISR is skipped", live: []int32{2, 3}, dead: []int32{1},
			p: part(r123, 1, []int32{1, 3}), reason: ReasonLeaderFailover, leader: 3, leaderEpoch: 4, isr: []int32{3}},
		{name: "leader dead, leader and follower dead: both leave the ISR", live: []int32{3}, dead: []int32{1, 2},
			p: part(r123, 1, r123), reason: ReasonLeaderFailover, leader: 3, leaderEpoch: 4, isr: []int32{3}},
		{name: "leader unknown to the store counts as dead", live: []int32{2, 3},
			p: part(r123, 1, r123), reason: ReasonLeaderFailover, leader: 2, leaderEpoch: 4, isr: []int32{2, 3}},
		{name: "no live ISR member: offline, last ISR kept", live: []int32{3}, dead: []int32{1, 2},
			p: part(r123, 1, []int32{1, 2}), reason: ReasonOffline, leader: -1, leaderEpoch: 4, isr: []int32{1, 2}},
		{name: "all dead: offline", dead: r123,
			p: part(r123, 2, r123), reason: ReasonOffline, leader: -1, leaderEpoch: 4, isr: r123},
		{name: "dead follower leaves the ISR, leader stays", live: []int32{1, 2}, dead: []int32{3},
			p: part(r123, 1, r123), reason: ReasonISRShrink, leader: 1, leaderEpoch: 3, isr: []int32{1, 2}},
		{name: "dead follower already out of the ISR: nothing", live: []int32{1, 2}, dead: []int32{3},
			p: part(r123, 1, []int32{1, 2})},
		{name: "offline, still no live ISR member: nothing (no unclean election)", live: []int32{3}, dead: []int32{1, 2},
			p: part(r123, -1, []int32{1, 2})},
		{name: "offline, an ISR member is back: elected, dead members leave", live: []int32{2, 3}, dead: []int32{1},
			p: part(r123, -1, []int32{1, 2}), reason: ReasonOfflineRecovery, leader: 2, leaderEpoch: 4, isr: []int32{2}},
		{name: "offline, all of the ISR back: first in replicas order", live: r123,
			p: part(r123, -1, []int32{3, 2}), reason: ReasonOfflineRecovery, leader: 2, leaderEpoch: 4, isr: []int32{3, 2}},
		{name: "preferred live long enough and in ISR: leadership moves back", live: r123, liveSince: longAgo,
			p: part(r123, 2, r123), reason: ReasonPreferredLeader, leader: 1, leaderEpoch: 4, isr: r123},
		{name: "preferred live too shortly: not yet", live: r123,
			liveSince: map[int32]time.Time{1: t0.Add(-9 * time.Second), 2: t0.Add(-time.Minute)},
			p:         part(r123, 2, r123)},
		{name: "preferred live exactly the delay: moves", live: r123,
			liveSince: map[int32]time.Time{1: t0.Add(-10 * time.Second)},
			p:         part(r123, 2, r123), reason: ReasonPreferredLeader, leader: 1, leaderEpoch: 4, isr: r123},
		{name: "preferred not in the ISR: not yet", live: r123, liveSince: longAgo,
			p: part(r123, 2, []int32{2, 3})},
		{name: "preferred live but unseen (no live-since): not yet", live: r123,
			p: part(r123, 2, r123)},
		{name: "dead follower first, preferred restore later", live: []int32{1, 2}, dead: []int32{3}, liveSince: longAgo,
			p: part(r123, 2, r123), reason: ReasonISRShrink, leader: 2, leaderEpoch: 3, isr: []int32{1, 2}},
		{name: "unclean opt-in, leader dead, no live ISR member: first live replica leads alone", live: []int32{3}, dead: []int32{1, 2}, unclean: true,
			p: part(r123, 1, []int32{1, 2}), reason: ReasonUncleanElection, leader: 3, leaderEpoch: 4, isr: []int32{3}},
		{name: "unclean opt-in, offline, a non-ISR replica is back: elected", live: []int32{3}, dead: []int32{1, 2}, unclean: true,
			p: part(r123, -1, []int32{1, 2}), reason: ReasonUncleanElection, leader: 3, leaderEpoch: 4, isr: []int32{3}},
		{name: "unclean opt-in but an ISR member is live: clean failover", live: []int32{2, 3}, dead: []int32{1}, unclean: true,
			p: part(r123, 1, []int32{1, 2}), reason: ReasonLeaderFailover, leader: 2, leaderEpoch: 4, isr: []int32{2}},
		{name: "unclean opt-in, nobody live: offline", dead: r123, unclean: true,
			p: part(r123, 1, r123), reason: ReasonOffline, leader: -1, leaderEpoch: 4, isr: r123},
		{name: "RF 1, leader dead: offline", dead: []int32{1},
			p: part([]int32{1}, 1, []int32{1}), reason: ReasonOffline, leader: -1, leaderEpoch: 4, isr: []int32{1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := tt.p
			before.Replicas = append([]int32(nil), tt.p.Replicas...)
			before.ISR = append([]int32(nil), tt.p.ISR...)
			changes := Decide(Input{
				Now: t0, Brokers: brokers(tt.live, tt.dead), Partitions: []store.Partition{tt.p},
				LiveSince: tt.liveSince, PreferredLeaderDelay: 10 * time.Second,
				Unclean: map[string]bool{"t": tt.unclean},
			})
			require.Equal(t, before, tt.p, "input modified")
			if tt.reason == "" {
				require.Empty(t, changes)
				return
			}
			require.Len(t, changes, 1)
			ch := changes[0]
			require.Equal(t, tt.reason, ch.Reason)
			require.Equal(t, tt.p, ch.Before)
			want := tt.p
			want.Leader, want.LeaderEpoch, want.ISR, want.PartitionEpoch = tt.leader, tt.leaderEpoch, tt.isr, tt.p.PartitionEpoch+1
			require.Equal(t, want, ch.After)
			if ch.Reason != ReasonUncleanElection { // the one change that may leave the ISR
				requireInvariants(t, ch, brokers(tt.live, tt.dead))
			}
		})
	}
}

// requireInvariants checks what holds for every change: epochs move by the
// rules, the ISR is never empty nor grows, leaders come from the old ISR.
func requireInvariants(t *testing.T, ch Change, bs []store.Broker) {
	t.Helper()
	b, a := ch.Before, ch.After
	require.Equal(t, b.PartitionEpoch+1, a.PartitionEpoch)
	require.NotEmpty(t, a.ISR)
	for _, id := range a.ISR {
		require.Contains(t, b.ISR, id, "ISR grew")
	}
	require.Equal(t, b.Replicas, a.Replicas)
	if a.Leader != b.Leader {
		require.Equal(t, b.LeaderEpoch+1, a.LeaderEpoch)
	} else {
		require.Equal(t, b.LeaderEpoch, a.LeaderEpoch)
	}
	if a.Leader >= 0 {
		require.Contains(t, b.ISR, a.Leader, "leader from outside the ISR")
		require.Contains(t, a.ISR, a.Leader)
		live := false
		for _, br := range bs {
			live = live || (br.ID == a.Leader && br.Live(t0))
		}
		require.True(t, live, "dead leader elected")
	}
	require.Equal(t, ch.Reason.Elects(), a.Leader >= 0 && a.Leader != b.Leader)
}

// TestControllerDecideManyPartitions: one round handles every partition, in
// order, at most one change each.
func TestControllerDecideManyPartitions(t *testing.T) {
	t.Parallel()
	parts := []store.Partition{
		part([]int32{1, 2, 3}, 1, []int32{1, 2, 3}),
		part([]int32{2, 3, 1}, 2, []int32{2, 3, 1}),
		part([]int32{3, 1, 2}, 3, []int32{3, 1, 2}),
		part([]int32{2, 3}, 2, []int32{2, 3}),
	}
	for i := range parts {
		parts[i].Partition = int32(i)
	}
	changes := Decide(Input{Now: t0, Brokers: brokers([]int32{2, 3}, []int32{1}), Partitions: parts, PreferredLeaderDelay: 10 * time.Second})
	require.Len(t, changes, 3)
	require.Equal(t, []Reason{ReasonLeaderFailover, ReasonISRShrink, ReasonISRShrink}, []Reason{changes[0].Reason, changes[1].Reason, changes[2].Reason})
	require.Equal(t, []int32{0, 1, 2}, []int32{changes[0].After.Partition, changes[1].After.Partition, changes[2].After.Partition})
	require.EqualValues(t, 2, changes[0].After.Leader)
	for _, ch := range changes {
		requireInvariants(t, ch, brokers([]int32{2, 3}, []int32{1}))
	}
}
