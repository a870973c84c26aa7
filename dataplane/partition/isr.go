package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// MaxAlterISRItems bounds the proposals of one AlterPartitions call, as
// the control plane does (api.MaxAlterPartitionsItems).
const MaxAlterISRItems = 1000

// alterTimeout bounds one call to the controller.
const alterTimeout = 5 * time.Second

// ISRProposal is a leader's ISR proposal taken by TakeISRProposal: sent to
// the controller, and its answer applied with Apply.
type ISRProposal struct {
	p    *Replica
	lead *replica.Leader
	prop replica.Proposal
}

// TakeISRProposal returns the leader's pending ISR proposal, or a new one
// (a follower out of sync for Host.ReplicaLagTimeMax leaves, a caught-up
// one joins once it fetched since it left the ISR or was last refused). A
// definitive refusal of an expansion is not retried before the refused
// follower fetches again, so a dead broker costs no AlterPartition calls. A
// proposal whose outcome is unknown stays pending and is taken again
// next round: until the answer is known the leader keeps counting added
// replicas for the HW. It returns false on a replica that does not lead or
// has nothing to propose.
func (p *Replica) TakeISRProposal() (*ISRProposal, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return nil, false
	}
	prop, ok := p.lead.Pending()
	if !ok {
		prop, ok = p.lead.Tick(time.Now())
	}
	if !ok {
		return nil, false
	}
	return &ISRProposal{p: p, lead: p.lead, prop: prop}, true
}

// Item is the proposal as an AlterPartitions item.
func (x *ISRProposal) Item() *sluicev1.AlterPartitionsItem {
	it := &sluicev1.AlterPartitionsItem{
		TopicId: x.p.topicID, Partition: x.p.id,
		LeaderEpoch: x.prop.LeaderEpoch, PartitionEpoch: x.prop.PartitionEpoch, NewIsr: x.prop.ISR,
	}
	for _, be := range x.prop.BrokerEpochs {
		it.AddedBrokerEpochs = append(it.AddedBrokerEpochs, &sluicev1.BrokerEpoch{BrokerId: be.Broker, BrokerEpoch: be.Epoch})
	}
	return it
}

// send is the proposal's own AlterPartition call (Host.AlterPartition),
// answered as Apply takes it.
func (x *ISRProposal) send(ctx context.Context) (*sluicev1.PartitionAssignment, error) {
	it := x.Item()
	req := &sluicev1.AlterPartitionRequest{
		BrokerId: x.p.h.ID, BrokerEpoch: x.p.h.BrokerEpoch(), TopicId: it.TopicId, Partition: it.Partition,
		LeaderEpoch: it.LeaderEpoch, PartitionEpoch: it.PartitionEpoch, NewIsr: it.NewIsr, AddedBrokerEpochs: it.AddedBrokerEpochs,
	}
	callCtx, cancel := context.WithTimeout(ctx, alterTimeout)
	defer cancel()
	return x.p.h.AlterPartition(callCtx, req)
}

// Apply applies the controller's answer to the proposal: err nil and
// current the partition's new state when it was accepted; a refusal (a
// domain error, as Host.AlterPartition describes it) and, when the
// refusal was about the partition, its current state; or the call's
// failure (current nil), which leaves the outcome unknown and the proposal
// pending.
func (x *ISRProposal) Apply(ctx context.Context, current *sluicev1.PartitionAssignment, err error) {
	p, lead, prop := x.p, x.lead, x.prop
	if err != nil && ctx.Err() == nil {
		p.h.Logger.Warn("alter ISR", "topic", p.topicID, "partition", p.id, "proposal", prop.String(), "err", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lead != lead || p.role != RoleLeader {
		return // leadership changed meanwhile; the assignment stream rules
	}
	// The controller checks the partition epoch before anything else, so
	// only a stale partition epoch (InvalidUpdateVersion, a typed detail
	// of its answer) can hide an applied proposal; every other refusal
	// means it was not applied.
	switch {
	case err == nil:
	case errors.Is(err, derr.InvalidUpdateVersion):
		lead.ProposalRejected(prop.ID, replica.ErrStalePartitionEpoch)
	case errors.Is(err, derr.FailedPrecondition) || errors.Is(err, derr.InvalidRequest):
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

// MaybeAlterISR takes the replica's ISR proposal (TakeISRProposal), sends
// it alone through Host.AlterPartition, and applies the answer. It does
// nothing on a replica that does not lead.
func (p *Replica) MaybeAlterISR(ctx context.Context) {
	x, ok := p.TakeISRProposal()
	if !ok {
		return
	}
	current, err := x.send(ctx)
	x.Apply(ctx, current, err)
}

// AlterISRs is the ISR round of a broker's leaders: it takes the ISR
// proposal of every replica in reps that has one and sends them together,
// MaxAlterISRItems per Host.AlterPartitions call, applying each item's
// answer as MaybeAlterISR applies its own. A call that fails leaves all
// its proposals' outcomes unknown (pending, resent next round). Without
// Host.AlterPartitions, or against a control plane that does not know it
// (Unimplemented), each proposal goes alone through Host.AlterPartition.
// The broker's ISR loop calls it every half second.
func AlterISRs(ctx context.Context, h *Host, reps []*Replica) {
	var props []*ISRProposal
	for _, r := range reps {
		if x, ok := r.TakeISRProposal(); ok {
			props = append(props, x)
		}
	}
	for chunk := range slices.Chunk(props, MaxAlterISRItems) {
		if h.AlterPartitions == nil {
			sendEach(ctx, chunk)
			continue
		}
		req := &sluicev1.AlterPartitionsRequest{BrokerId: h.ID, BrokerEpoch: h.BrokerEpoch()}
		for _, x := range chunk {
			req.Items = append(req.Items, x.Item())
		}
		callCtx, cancel := context.WithTimeout(ctx, alterTimeout)
		res, err := h.AlterPartitions(callCtx, req)
		cancel()
		if errors.Is(err, derr.UnsupportedVersion) {
			sendEach(ctx, chunk)
			continue
		}
		if err == nil && len(res) != len(chunk) {
			err = fmt.Errorf("alter partitions: %d results for %d items", len(res), len(chunk))
		}
		for i, x := range chunk {
			if err != nil {
				x.Apply(ctx, nil, err)
				continue
			}
			x.Apply(ctx, res[i].Partition, res[i].Err)
		}
	}
}

func sendEach(ctx context.Context, props []*ISRProposal) {
	for _, x := range props {
		current, err := x.send(ctx)
		x.Apply(ctx, current, err)
	}
}

// assignmentOf reads the controller's answer about the partition.
func assignmentOf(pa *sluicev1.PartitionAssignment) Assignment {
	return Assignment{
		Replicas: slices.Clone(pa.GetReplicas()), Leader: pa.GetLeader(), LeaderEpoch: pa.GetLeaderEpoch(),
		ISR: slices.Clone(pa.GetIsr()), PartitionEpoch: pa.GetPartitionEpoch(),
	}
}
