package group

import (
	"slices"
	"time"
)

// State is the state of a group as DescribeGroup reports it.
type State string

// Group states, Kafka's ConsumerGroupState names in lower case.
const (
	// StateEmpty: no members.
	StateEmpty State = "empty"
	// StateAssigning: the group has members and, before its
	// Config.HoldUntil, holds back target partitions that nobody holds
	// (for members of the previous coordinator that have not rejoined).
	// A rebuilt group whose partitions are all held again is stable or
	// reconciling as usual.
	// (In Kafka the state of a target assignment being computed; here the
	// target is computed within the call that bumps the group epoch.)
	StateAssigning State = "assigning"
	// StateReconciling: some member has not reached the target assignment:
	// it is behind the target epoch, has partitions to revoke, or waits
	// for partitions that others still hold.
	StateReconciling State = "reconciling"
	// StateStable: every member holds exactly its target at the target
	// epoch.
	StateStable State = "stable"
)

// GroupDescription is a snapshot of a group for DescribeGroup and metrics.
type GroupDescription struct {
	GroupID  string
	State    State
	Assignor string
	// GroupEpoch increases with every membership, subscription or
	// partition count change; TargetEpoch is the epoch of the target
	// assignment (always equal here: targets are computed synchronously).
	GroupEpoch, TargetEpoch int32
	Members                 []MemberDescription // by member id
	// Rebalances counts group epoch bumps (each computes a new target);
	// RevokedPartitions counts partitions members were asked to revoke.
	// Both start at 0 with New.
	Rebalances, RevokedPartitions int64
}

// MemberDescription is one member of a GroupDescription. Its partition sets
// are never nil.
type MemberDescription struct {
	MemberID, InstanceID string
	// MemberEpoch is StaticLeaveEpoch for a static member that departed.
	MemberEpoch   int32
	Subscriptions []string
	// Assignment are the partitions the member may own now (as its last
	// response said, or will say at its next heartbeat after a rebalance).
	Assignment TopicPartitions
	// Target is the member's part of the target assignment.
	Target TopicPartitions
	// Pending are target partitions not yet given to the member, because
	// another member still holds them or the member has partitions to
	// revoke first.
	Pending TopicPartitions
	// Revoking are partitions the member must give up and has not yet
	// acknowledged; they are not in Assignment but nobody else gets them.
	Revoking TopicPartitions
	// RevocationDeadline is when the member is removed if it still has not
	// revoked them; zero when it has nothing to revoke. (Partitions that a
	// newer target takes away are still in Assignment until the member's
	// next heartbeat asks for them.)
	RevocationDeadline time.Time
	LastHeartbeat      time.Time
	RebalanceTimeout   time.Duration
}

// Describe returns a snapshot of the group after expiring members at now.
func (g *Group) Describe(now time.Time) GroupDescription {
	g.expire(now)
	d := GroupDescription{
		GroupID:           g.id,
		State:             StateStable,
		Assignor:          g.cfg.Assignor,
		GroupEpoch:        g.epoch,
		TargetEpoch:       g.targetEpoch,
		Rebalances:        g.rebalances,
		RevokedPartitions: g.revoked,
	}
	heldBack := false // a target partition nobody holds is held back
	hold := now.Before(g.holdUntil)
	for _, id := range g.memberIDs() {
		m := g.members[id]
		target := g.target[id]
		pending := partSet{}
		for p := range target {
			if h := m.held[p]; h == nil || h.revoking {
				pending[p] = struct{}{}
			}
			if _, held := g.owner[p]; hold && !held {
				heldBack = true
			}
		}
		md := MemberDescription{
			MemberID:           m.id,
			InstanceID:         m.instanceID,
			MemberEpoch:        m.epoch,
			Subscriptions:      slices.Clone(m.subs),
			Assignment:         topicPartitions(m.held, func(h *holding) bool { return !h.revoking }),
			Target:             topicPartitions(target, nil),
			Pending:            topicPartitions(pending, nil),
			Revoking:           topicPartitions(m.held, func(h *holding) bool { return h.revoking }),
			RevocationDeadline: m.revokeDeadline,
			LastHeartbeat:      m.lastSeen,
			RebalanceTimeout:   m.rebalanceTimeout,
		}
		if m.departed {
			md.MemberEpoch = StaticLeaveEpoch
		}
		inSync := len(pending) == 0 && md.Revoking.Len() == 0 && md.Assignment.Len() == len(target)
		if !inSync || (!m.departed && m.epoch != g.targetEpoch) {
			d.State = StateReconciling
		}
		d.Members = append(d.Members, md)
	}
	switch {
	case len(g.members) == 0:
		d.State = StateEmpty
	case heldBack:
		d.State = StateAssigning
	}
	return d
}

// Counters returns the group's cumulative rebalance and revoked-partition
// counts (as in Describe), cheaply, for metrics.
func (g *Group) Counters() (rebalances, revokedPartitions int64) {
	return g.rebalances, g.revoked
}
