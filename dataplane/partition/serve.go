package partition

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// FetchReplica serves a follower's fetch m on the leader (the
// ReplicaService's FetchReplica for this replica): the follower's progress
// goes to the leader state machine (which may move the HW and complete
// acks=all waits), and the answer carries the records from its fetch
// offset, a diverging epoch to truncate to, or, with nothing new, nothing
// once m's wait (at most 5 s) has passed. The errors are Connect errors.
func (p *Replica) FetchReplica(ctx context.Context, m *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	maxBytes := int(m.GetMaxBytes())
	if maxBytes <= 0 || maxBytes > 64<<20 {
		maxBytes = 4 << 20
	}
	wait := min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, 5*time.Second)
	var timer *time.Timer
	for {
		res, ch, err := p.serveReplica(m, maxBytes)
		if err != nil || res != nil || wait <= 0 {
			if err != nil {
				return nil, err
			}
			if res == nil {
				res = &sluicev1.FetchReplicaResponse{HighWatermark: p.HighWatermark(), LogStartOffset: p.log.LogStartOffset(), CopiedEndOffset: p.remoteThrough.Load() + 1}
			}
			return res, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// serveReplica answers one follower fetch, or returns a channel to wait on
// when the follower is caught up and nothing is new.
func (p *Replica) serveReplica(m *sluicev1.FetchReplicaRequest, maxBytes int) (*sluicev1.FetchReplicaResponse, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return nil, nil, ToConnect(p.h.notLeader(p.meta))
	}
	off := m.GetFetchOffset()
	start := p.log.LogStartOffset()
	if off < start {
		// The follower needs history the leader no longer has: restart it at the log start.
		return &sluicev1.FetchReplicaResponse{HighWatermark: p.lead.HW(), LogStartOffset: start, CopiedEndOffset: p.remoteThrough.Load() + 1}, nil, nil
	}
	hw := p.lead.HW()
	durable := off // a follower that does not say synced before fetching
	if m.DurableOffset != nil {
		durable = m.GetDurableOffset()
	}
	d, err := p.lead.FollowerFetch(replica.FetchRequest{
		Replica: m.GetFollowerId(), BrokerEpoch: m.GetFollowerBrokerEpoch(), LeaderEpoch: m.GetLeaderEpoch(),
		FetchOffset: off, LastFetchedEpoch: m.GetLastFetchedEpoch(), Durable: durable,
	}, time.Now())
	if err != nil {
		return nil, nil, p.replicaError(err)
	}
	if d.Diverging {
		return &sluicev1.FetchReplicaResponse{
			HighWatermark: d.HW, LogStartOffset: start, CopiedEndOffset: p.remoteThrough.Load() + 1,
			DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: d.DivergingEpoch.Epoch, EndOffset: d.DivergingEpoch.EndOffset},
		}, nil, nil
	}
	if d.HW != hw {
		p.settleAcksLocked()
		p.notifyLocked() // wakes readers waiting for the HW
	}
	if off >= d.LEO {
		return nil, p.hwCh, nil
	}
	data, err := p.log.Read(off, maxBytes)
	if err != nil {
		return nil, nil, ToConnect(err)
	}
	return &sluicev1.FetchReplicaResponse{Batches: data, HighWatermark: d.HW, LogStartOffset: start, CopiedEndOffset: p.remoteThrough.Load() + 1}, nil, nil
}
