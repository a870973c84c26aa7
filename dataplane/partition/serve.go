package partition

import (
	"context"
	"time"

	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// FetchReplica serves a follower's fetch m on the leader (the
// ReplicaService's FetchReplica for this replica, which followers that
// predate fetch sessions still send): the follower's progress goes to the
// leader state machine (which may move the HW and complete acks=all
// waits), and the answer carries the records from its fetch offset, a
// diverging epoch to truncate to, or, with nothing new, nothing once m's
// wait (at most 5 s) has passed. The errors are domain errors.
func (p *Replica) FetchReplica(ctx context.Context, m *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	maxBytes := int(m.GetMaxBytes())
	if maxBytes <= 0 || maxBytes > 64<<20 {
		maxBytes = 4 << 20
	}
	wait := min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, 5*time.Second)
	var timer *time.Timer
	for {
		sv, err := p.serveReplica(m, maxBytes)
		if err != nil {
			return nil, err
		}
		if sv.wait == nil || wait <= 0 {
			return sv.res, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-sv.wait:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// served is one follower fetch served by serveReplica.
type served struct {
	// res is the answer: records, a diverging epoch, a log start to reset
	// to, or only the HW, log start and copied end.
	res *sluicev1.FetchReplicaResponse
	// wait is set when the follower is caught up and nothing is new: it is
	// closed when something changes (an append, the HW, the role).
	wait <-chan struct{}
	// more: records are there but maxBytes was ≤ 0, so none were read.
	more bool
}

// serveReplica answers one follower fetch m, reading at most maxBytes of
// records (at least one batch when maxBytes > 0, none otherwise). Every
// call counts as a fetch of the follower at m's position for the ISR
// (Leader.FollowerFetch). The errors are domain errors.
func (p *Replica) serveReplica(m *sluicev1.FetchReplicaRequest, maxBytes int) (served, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != RoleLeader || p.lead == nil {
		return served{}, p.notLeader(p.meta)
	}
	off := m.GetFetchOffset()
	start := p.log.LogStartOffset()
	copied := p.remoteThrough.Load() + 1
	if off < start {
		// The follower needs history the leader no longer has: restart it at the log start.
		return served{res: &sluicev1.FetchReplicaResponse{HighWatermark: p.lead.HW(), LogStartOffset: start, CopiedEndOffset: copied}}, nil
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
		return served{}, p.replicaError(err)
	}
	if d.Diverging {
		return served{res: &sluicev1.FetchReplicaResponse{
			HighWatermark: d.HW, LogStartOffset: start, CopiedEndOffset: copied,
			DivergingEpoch: &sluicev1.DivergingEpoch{Epoch: d.DivergingEpoch.Epoch, EndOffset: d.DivergingEpoch.EndOffset},
		}}, nil
	}
	if d.HW != hw {
		p.settleAcksLocked()
		p.notifyLocked() // wakes readers waiting for the HW
	}
	res := &sluicev1.FetchReplicaResponse{HighWatermark: d.HW, LogStartOffset: start, CopiedEndOffset: copied}
	switch {
	case off >= d.LEO:
		return served{res: res, wait: p.hwCh}, nil
	case maxBytes <= 0:
		return served{res: res, more: true}, nil
	}
	data, err := p.log.Read(off, maxBytes)
	if err != nil {
		return served{}, logError(err)
	}
	res.Batches = data
	return served{res: res}, nil
}

// NewSessions returns the fetch sessions (fetchsession.Sessions) of the
// followers of this broker's leaders, configured by c, whose partitions
// are the replicas lookup finds (nil: none on this broker); c.Lookup is
// set from lookup.
func NewSessions(lookup func(topicID string, partition int32) *Replica, c fetchsession.Config) *fetchsession.Sessions {
	c.Lookup = func(topicID string, partition int32) fetchsession.Replica {
		if p := lookup(topicID, partition); p != nil {
			return sessionReplica{p}
		}
		return nil
	}
	return fetchsession.New(c)
}

// sessionReplica is a replica as the fetch sessions serve it
// (fetchsession.Replica): serveReplica, and the watchers notifyLocked
// signals.
type sessionReplica struct{ p *Replica }

func (r sessionReplica) TopicID() string  { return r.p.topicID }
func (r sessionReplica) Partition() int32 { return r.p.id }

func (r sessionReplica) Fetch(pos *sluicev1.FetchReplicaRequest, maxBytes int) (*sluicev1.FetchReplicaResponse, bool, error) {
	sv, err := r.p.serveReplica(pos, maxBytes)
	return sv.res, sv.more, err
}

// Watch makes w a watcher of the replica: notifyLocked signals it.
func (r sessionReplica) Watch(w fetchsession.Watcher) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watchers == nil {
		p.watchers = map[fetchsession.Watcher]struct{}{}
	}
	p.watchers[w] = struct{}{}
}

func (r sessionReplica) Unwatch(w fetchsession.Watcher) {
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watchers, w)
}
