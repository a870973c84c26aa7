package partition

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// MaybeAlterISR sends the leader's pending ISR proposal, or a new one (a
// follower out of sync for Host.ReplicaLagTimeMax leaves, a caught-up one
// joins once it fetched since it left the ISR or was last refused), to the
// controller through Host.AlterPartition, and applies the answer. A
// definitive refusal of an expansion is not retried before the refused
// follower fetches again, so a dead broker costs no AlterPartition calls. A proposal whose outcome is unknown (network error) stays
// pending and is resent next round: until the answer is known the leader
// keeps counting added replicas for the HW. It does nothing on a replica
// that does not lead. The broker's ISR loop calls it every half second.
func (p *Replica) MaybeAlterISR(ctx context.Context) {
	p.mu.Lock()
	if p.role != RoleLeader || p.lead == nil {
		p.mu.Unlock()
		return
	}
	prop, ok := p.lead.Pending()
	if !ok {
		prop, ok = p.lead.Tick(time.Now())
	}
	if !ok {
		p.mu.Unlock()
		return
	}
	lead := p.lead
	req := &sluicev1.AlterPartitionRequest{
		BrokerId: p.h.ID, BrokerEpoch: p.h.BrokerEpoch(), TopicId: p.topicID, Partition: p.id,
		LeaderEpoch: prop.LeaderEpoch, PartitionEpoch: prop.PartitionEpoch, NewIsr: prop.ISR,
	}
	for _, be := range prop.BrokerEpochs {
		req.AddedBrokerEpochs = append(req.AddedBrokerEpochs, &sluicev1.BrokerEpoch{BrokerId: be.Broker, BrokerEpoch: be.Epoch})
	}
	p.mu.Unlock()

	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res, err := p.h.AlterPartition(callCtx, connect.NewRequest(req))
	cancel()
	var current *sluicev1.PartitionAssignment
	if err == nil {
		current = res.Msg.GetPartition()
	} else if ctx.Err() == nil {
		p.h.Logger.Warn("alter ISR", "topic", p.topicID, "partition", p.id, "proposal", prop.String(), "err", err)
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		// A refusal about the partition carries its current state.
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if pa, ok := v.(*sluicev1.PartitionAssignment); ok {
					current = pa
				}
			}
		}
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lead != lead || p.role != RoleLeader {
		return // leadership changed meanwhile; the assignment stream rules
	}
	// The controller checks the partition epoch before anything else, so
	// only "stale partition epoch" can hide an applied proposal; every
	// other refusal means it was not applied.
	switch {
	case err == nil:
	case connect.CodeOf(err) == connect.CodeFailedPrecondition && strings.Contains(err.Error(), "stale partition epoch"):
		lead.ProposalRejected(prop.ID, replica.ErrStalePartitionEpoch)
	case connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeInvalidArgument:
		lead.ProposalRejected(prop.ID, err) // definitive: propose afresh later
	default:
		return // unknown outcome: resend Pending next round
	}
	if current == nil {
		return
	}
	pm := assignmentOf(current)
	if pm.LeaderEpoch > lead.LeaderEpoch() {
		// Deposed: stop acknowledging now rather than when the assignment
		// stream catches up.
		_ = lead.Resign(pm.LeaderEpoch)
		p.settleAcksLocked()
		p.notifyLocked()
		return
	}
	if pm.Leader != p.h.ID || pm.LeaderEpoch != lead.LeaderEpoch() || pm.PartitionEpoch <= lead.PartitionEpoch() {
		return
	}
	cerr := lead.ISRChanged(pm.PartitionEpoch, pm.ISR)
	p.settleAcksLocked()
	if cerr != nil && !errors.Is(cerr, replica.ErrStalePartitionEpoch) {
		p.h.Logger.Warn("apply ISR", "topic", p.topicID, "partition", p.id, "isr", pm.ISR, "err", cerr)
		return
	}
	if err == nil {
		if m := p.h.Metrics; m != nil {
			if prop.Kind == replica.Expand {
				m.ISRExpands.Inc()
			} else {
				m.ISRShrinks.Inc()
			}
		}
		p.h.Logger.Info("ISR changed", "topic", p.topicID, "partition", p.id, "change", prop.String(), "partition_epoch", pm.PartitionEpoch, "hw", lead.HW())
	}
	p.notifyLocked()
}

// assignmentOf reads the controller's answer about the partition.
func assignmentOf(pa *sluicev1.PartitionAssignment) Assignment {
	return Assignment{
		Replicas: slices.Clone(pa.GetReplicas()), Leader: pa.GetLeader(), LeaderEpoch: pa.GetLeaderEpoch(),
		ISR: slices.Clone(pa.GetIsr()), PartitionEpoch: pa.GetPartitionEpoch(),
	}
}
