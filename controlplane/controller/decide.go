package controller

import (
	"maps"
	"slices"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Reason says why a partition changes.
type Reason string

// Reasons of a change. The electing ones are counted as leader elections.
const (
	ReasonLeaderFailover  Reason = "leader_failover"  // the leader died; an ISR member takes over
	ReasonOffline         Reason = "offline"          // the leader died and no ISR member is live
	ReasonOfflineRecovery Reason = "offline_recovery" // an ISR member of an offline partition is back
	ReasonISRShrink       Reason = "isr_shrink"       // dead followers leave the ISR
	ReasonPreferredLeader Reason = "preferred_leader" // leadership moves back to replicas[0]
	// ReasonUncleanElection: no ISR member is live and the topic opted in
	// (unclean.leader.election.enable): a live replica outside the ISR
	// leads, and the acknowledged records it lacks are lost.
	ReasonUncleanElection Reason = "unclean_election"
)

// Reasons lists every Reason.
var Reasons = []Reason{ReasonLeaderFailover, ReasonOffline, ReasonOfflineRecovery, ReasonISRShrink, ReasonPreferredLeader, ReasonUncleanElection}

// Elects reports whether a change for this reason elects a leader.
func (r Reason) Elects() bool {
	return r == ReasonLeaderFailover || r == ReasonOfflineRecovery || r == ReasonPreferredLeader || r == ReasonUncleanElection
}

// Input is what one decision round sees.
type Input struct {
	Now        time.Time
	Brokers    []store.Broker
	Partitions []store.Partition
	// LiveSince maps each live broker to the time since when it has been
	// seen live without interruption (under its current epoch).
	LiveSince map[int32]time.Time
	// PreferredLeaderDelay is how long replicas[0] must have been live
	// before leadership moves back to it.
	PreferredLeaderDelay time.Duration
	// Unclean holds the topic ids that opted in to unclean leader election.
	Unclean map[string]bool
}

// Change is one partition write: After replaces Before, whose partition
// epoch is the compare-and-set's expected epoch.
type Change struct {
	Before, After store.Partition
	Reason        Reason
}

// Liveness is everything Decide reads of the brokers and the clock
// (in.Now, in.Brokers, in.LiveSince and in.PreferredLeaderDelay): Decide
// is a function of in.Partitions, in.Unclean and in.Liveness() alone, so
// over the same partitions and topics, equal livenesses decide the same
// changes.
type Liveness struct {
	// Live holds the brokers live at Now.
	Live map[int32]bool
	// Settled holds the live brokers that have been live for at least
	// PreferredLeaderDelay: the ones leadership may move back to.
	Settled map[int32]bool
}

// Liveness returns what Decide reads of in's brokers and clock.
func (in Input) Liveness() Liveness {
	l := Liveness{Live: make(map[int32]bool, len(in.Brokers)), Settled: map[int32]bool{}}
	for _, b := range in.Brokers {
		if !b.Live(in.Now) {
			continue
		}
		l.Live[b.ID] = true
		if since, ok := in.LiveSince[b.ID]; ok && in.Now.Sub(since) >= in.PreferredLeaderDelay {
			l.Settled[b.ID] = true
		}
	}
	return l
}

// Equal reports whether l and o hold the same brokers.
func (l Liveness) Equal(o Liveness) bool {
	return maps.Equal(l.Live, o.Live) && maps.Equal(l.Settled, o.Settled)
}

// Decide returns the changes the controller should make, at most one per
// partition, in the order of in.Partitions. It does not modify its input.
func Decide(in Input) []Change {
	l := in.Liveness()
	var out []Change
	for _, p := range in.Partitions {
		if ch, ok := decide(l, in.Unclean, p); ok {
			out = append(out, ch)
		}
	}
	return out
}

func decide(l Liveness, unclean map[string]bool, p store.Partition) (Change, bool) {
	live := func(id int32) bool { return l.Live[id] }
	liveISR := func() []int32 { return slices.DeleteFunc(slices.Clone(p.ISR), func(b int32) bool { return !live(b) }) }
	// change is p with the ISR isr and, when elect, the leader leader; it
	// copies only when there is a change, so an idle round allocates nothing.
	change := func(r Reason, isr []int32, elect bool, leader int32) (Change, bool) {
		next := p
		next.Replicas = slices.Clone(p.Replicas)
		next.ISR = isr
		next.PartitionEpoch = p.PartitionEpoch + 1
		if elect {
			next.Leader = leader
			next.LeaderEpoch = p.LeaderEpoch + 1
		}
		return Change{Before: p, After: next, Reason: r}, true
	}

	switch {
	case p.Leader >= 0 && !live(p.Leader):
		if c, ok := candidate(p, live); ok {
			return change(ReasonLeaderFailover, liveISR(), true, c)
		}
		if u, ok := uncleanCandidate(unclean, p, live); ok {
			return change(ReasonUncleanElection, []int32{u}, true, u)
		}
		return change(ReasonOffline, slices.Clone(p.ISR), true, -1)

	case p.Leader >= 0 && slices.ContainsFunc(p.ISR, func(b int32) bool { return !live(b) }):
		return change(ReasonISRShrink, liveISR(), false, 0)

	case p.Leader < 0:
		if c, ok := candidate(p, live); ok {
			return change(ReasonOfflineRecovery, liveISR(), true, c)
		}
		if u, ok := uncleanCandidate(unclean, p, live); ok {
			return change(ReasonUncleanElection, []int32{u}, true, u)
		}
		return Change{}, false // still offline

	case len(p.Replicas) > 0 && p.Leader != p.Replicas[0]:
		pref := p.Replicas[0]
		if !l.Settled[pref] || !slices.Contains(p.ISR, pref) {
			return Change{}, false
		}
		return change(ReasonPreferredLeader, slices.Clone(p.ISR), true, pref)
	}
	return Change{}, false
}

// candidate returns the first replica, in replicas order, that is in the ISR
// and live.
func candidate(p store.Partition, live func(int32) bool) (int32, bool) {
	for _, r := range p.Replicas {
		if slices.Contains(p.ISR, r) && live(r) {
			return r, true
		}
	}
	return 0, false
}

// uncleanCandidate returns the first live replica, in replicas order, when
// the partition's topic opted in to unclean leader election.
func uncleanCandidate(unclean map[string]bool, p store.Partition, live func(int32) bool) (int32, bool) {
	if !unclean[p.TopicID] {
		return 0, false
	}
	for _, r := range p.Replicas {
		if live(r) {
			return r, true
		}
	}
	return 0, false
}
