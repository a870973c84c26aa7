package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Open opens the replica s names: its log (recovered up to the last
// intact batch), its producer state (rebuilt from the snapshots and the
// log) and its HW (s.HW from the broker's checkpoint, or the legacy
// per-partition file; capped at the LEO). It has no role until the first
// Update.
func Open(h *Host, s Spec) (*Replica, error) {
	// Retention never deletes records above this replica's HW (set under
	// the replica lock before each ApplyRetention).
	retainBelow := new(atomic.Int64)
	lt, lb := localRetention(s.Config, s.Tiered)
	var self *Replica // set before retention first runs
	l, err := log.Open(s.Dir, log.Config{
		SegmentBytes:   h.SegmentBytes,
		Flush:          h.Flush,
		FlushInterval:  h.FlushInterval,
		Files:          h.Files,
		RetentionTime:  lt,
		RetentionBytes: lb,
		SegmentAge:     h.segmentAge(s.Config, s.Tiered),
		CanDelete: func(si log.SegmentInfo) bool {
			return si.NextOffset <= retainBelow.Load() && self.tierAllowsDelete(si)
		},
	})
	if err != nil {
		return nil, err
	}
	hw, legacy, err := readLegacyHW(s.Dir)
	if err != nil && !s.HWKnown {
		h.Logger.Warn("ignoring high watermark checkpoint", "dir", s.Dir, "err", err)
		hw = 0
	}
	if s.HWKnown {
		hw = s.HW
	}
	hw = min(hw, l.LEO())
	ps, snapOffset, err := producerstate.Rebuild(s.Dir, l)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("rebuild producer state: %w", err)
	}
	ps.Touch(time.Now().UnixMilli())
	p := &Replica{h: h, tenantID: s.TenantID, topicID: s.TopicID, id: s.Partition, dir: s.Dir, log: l, roleHW: hw,
		hwCh: make(chan struct{}), meta: Assignment{Leader: -1, LeaderEpoch: -1},
		pstate: ps, snapOffset: snapOffset, expiredAt: time.Now(), retainBelow: retainBelow, tiered: s.Tiered}
	p.remoteThrough.Store(-1)
	p.legacyHW.Store(legacy)
	if p.abortedKnown, err = readAbortedKnown(s.Dir); err != nil {
		// Written atomically, so a disk's damage: assume the least, that
		// nothing below the local log is known.
		h.Logger.Warn("producer state: unreadable aborted-transactions bound", "dir", s.Dir, "err", err)
		p.abortedKnown = -1
		p.noteRebuiltFromLogLocked()
	} else if snapOffset == 0 {
		p.noteRebuiltFromLogLocked()
	}
	self = p
	return p, nil
}

// Update moves the replica to the role assignment pm gives it, with the
// topic's configuration cfg: leader (a new leader state machine, or the
// current one told of a new ISR or min ISR), follower (registered with
// the Host's fetcher of its leader, whose goroutine runs with ctx, until
// the role ends), or neither. An assignment
// older than the last one applied is ignored. A new leader epoch always
// restarts the role (KAFKA-7164: a follower's next fetch carries its last
// epoch to the new leadership, which checks it for divergence even when
// the leader id stays the same).
func (p *Replica) Update(ctx context.Context, pm Assignment, cfg TopicConfig) {
	self := p.h.ID
	p.mu.Lock()
	defer p.mu.Unlock()
	if pm.LeaderEpoch < p.meta.LeaderEpoch || (pm.LeaderEpoch == p.meta.LeaderEpoch && pm.PartitionEpoch < p.meta.PartitionEpoch) {
		return // an older snapshot than what this replica already knows
	}
	newEpoch := pm.LeaderEpoch != p.meta.LeaderEpoch
	prev, prevCfg := p.meta, p.cfg
	p.meta, p.cfg = pm, cfg
	switch {
	case pm.Leader == self && (p.role != RoleLeader || newEpoch || p.lead == nil):
		p.endRoleLocked()
		lead, err := p.newLeaderLocked(pm, cfg, time.Now())
		if err != nil {
			p.h.Logger.Error("cannot lead partition", "topic", p.topicID, "partition", p.id, "leader_epoch", pm.LeaderEpoch, "err", err)
			p.role = RoleNone
			break
		}
		p.startLeadingLocked(ctx, lead)
		p.h.Logger.Log(ctx, roleLogLevel(pm), "leading partition", "topic", p.topicID, "partition", p.id, "leader_epoch", pm.LeaderEpoch, "isr", pm.ISR, "leo", p.log.LEO(), "hw", lead.HW())
	case pm.Leader == self:
		if cfg.MinISR != prevCfg.MinISR {
			if err := p.lead.SetMinISR(max(1, int(cfg.MinISR))); err != nil {
				p.h.Logger.Warn("apply min.insync.replicas", "topic", p.topicID, "partition", p.id, "err", err)
			}
		}
		if pm.PartitionEpoch > p.lead.PartitionEpoch() {
			if err := p.lead.ISRChanged(pm.PartitionEpoch, pm.ISR); err != nil && !errors.Is(err, replica.ErrStalePartitionEpoch) {
				p.h.Logger.Warn("apply ISR", "topic", p.topicID, "partition", p.id, "isr", pm.ISR, "err", err)
			}
		}
		p.settleAcksLocked()
	case p.role != RoleFollower || newEpoch || prev.Leader != pm.Leader:
		p.endRoleLocked()
		p.role = RoleFollower
		if pm.Leader < 0 {
			break // offline: nobody to follow until a leader is elected
		}
		fol, err := replica.NewFollower(replica.FollowerParams{
			Self: self, BrokerEpoch: p.h.BrokerEpoch(), Leader: pm.Leader, LeaderEpoch: pm.LeaderEpoch,
			HW: min(p.roleHW, p.log.LEO()), Unclean: cfg.Unclean,
		})
		if err != nil {
			p.h.Logger.Error("cannot follow partition", "topic", p.topicID, "partition", p.id, "leader", pm.Leader, "leader_epoch", pm.LeaderEpoch, "err", err)
			break
		}
		p.fol = fol
		p.h.fetcherSet().Follow(ctx, follower{p}, fol)
		p.h.Logger.Log(ctx, roleLogLevel(pm), "following partition", "topic", p.topicID, "partition", p.id, "leader", pm.Leader, "leader_epoch", pm.LeaderEpoch)
	case p.fol != nil:
		p.fol.SetUnclean(cfg.Unclean)
	}
	p.notifyLocked()
}

// startLeadingLocked makes lead the replica's leadership. When the log's
// tail (what it fetched last as a follower) is not durable yet, no producer
// of this leadership waits for it, so it is synced in the background:
// otherwise the HW could not reach the epoch's start before the next
// produce.
func (p *Replica) startLeadingLocked(ctx context.Context, lead *replica.Leader) {
	p.lead, p.role = lead, RoleLeader
	if leo := p.log.LEO(); lead.Durable() < leo {
		go func() {
			if err := p.makeDurable(ctx, lead, leo); err != nil {
				p.h.Logger.Warn("sync the log tail of a new leadership", "topic", p.topicID, "partition", p.id, "err", err)
			}
		}()
	}
}

// endRoleLocked ends the replica's current role, if any: it unregisters
// the follower from its fetcher, closes a leadership (its pending acks=all waits fail
// with ErrNotLeader), and keeps the state machine's HW in roleHW for the
// next role.
func (p *Replica) endRoleLocked() {
	if p.fol != nil {
		p.h.fetcherSet().Unfollow(follower{p}, p.fol.Leader())
	}
	p.roleHW = p.hwLocked()
	if p.lead != nil {
		p.lead.Close()
		p.settleAcksLocked()
	}
	p.lead, p.fol, p.ackWaiters = nil, nil, nil
	p.verified = nil // a new leadership verifies afresh
}

// roleLogLevel is the level of a replica's "leading"/"following" line:
// debug for a partition's first leader (leader epoch 0: a new partition's
// placement, one line per replica of every partition created), info once
// the leadership moved (an election: worth an operator's eye).
func roleLogLevel(pm Assignment) slog.Level {
	if pm.LeaderEpoch == 0 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// Stop ends the replica's role: its fetching stops, a leadership closes
// (its acks=all waits fail). The log stays open.
func (p *Replica) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endRoleLocked()
	p.role = RoleNone
	p.notifyLocked()
}

// applyFetch applies the leader's answer res to fetch q of follower fol:
// the truncation or the HW that fol decides, and the records appended.
func (p *Replica) applyFetch(fol *replica.Follower, q replica.FetchRequest, res *sluicev1.FetchReplicaResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fol != fol || p.role != RoleFollower || fol.CheckAnswer(logState(p.log), q) != nil {
		return nil // an answer for a leadership this replica no longer follows
	}
	if p.tiered {
		p.remoteThrough.Store(res.GetCopiedEndOffset() - 1)
	}
	if d := res.GetDivergingEpoch(); d != nil {
		hw := fol.HW()
		to, err := fol.HandleFetch(logState(p.log), q, replica.FetchDecision{
			HW: res.GetHighWatermark(), Diverging: true,
			DivergingEpoch: replica.EpochEndOffset{Epoch: d.GetEpoch(), EndOffset: d.GetEndOffset()},
		})
		switch {
		case err != nil:
			// Records below the HW are committed: a leader elected from the
			// ISR has them all and never asks for this. Only an unclean
			// election (an opt-in that accepts the loss) can; otherwise the
			// follower refuses rather than destroy committed data.
			return fmt.Errorf("refusing to truncate: %w", err)
		case to < hw:
			p.h.Logger.Error("truncating committed records after an unclean leader election",
				"topic", p.topicID, "partition", p.id, "to", to, "hw", hw, "lost", hw-to)
		}
		defer func() { fol.Truncated(p.log.LEO()) }()
		if to < p.log.LogStartOffset() {
			// Nothing in common: start over at the leader's log start.
			if err := p.resetProducerStateLocked(res.GetLogStartOffset()); err != nil {
				return err
			}
			if err := p.log.Reset(res.GetLogStartOffset()); err != nil {
				return fmt.Errorf("reset log: %w", err)
			}
		} else {
			if err := p.log.TruncateTo(to); err != nil {
				return fmt.Errorf("truncate to %d: %w", to, err)
			}
			if err := p.rebuildProducerStateLocked(); err != nil {
				return err
			}
		}
		p.h.Logger.Info("truncated divergent tail", "topic", p.topicID, "partition", p.id, "to", p.log.LEO(), "leader_epoch_end", d.GetEpoch())
		return nil
	}
	if p.log.LEO() < res.GetLogStartOffset() {
		// The leader no longer has what we need (retention): start over
		// at its log start, then fetch from there. (Such an answer carries
		// no records.)
		if err := p.resetProducerStateLocked(res.GetLogStartOffset()); err != nil {
			return err
		}
		if err := p.log.Reset(res.GetLogStartOffset()); err != nil {
			return fmt.Errorf("reset log: %w", err)
		}
	}
	if len(res.GetBatches()) > 0 {
		if _, err := p.log.AppendFollower(res.GetBatches()); err != nil {
			return fmt.Errorf("append follower: %w", err)
		}
		p.applyAppendedLocked(res.GetBatches())
	}
	if _, err := fol.HandleFetch(logState(p.log), q, replica.FetchDecision{HW: res.GetHighWatermark()}); err != nil {
		return err
	}
	p.notifyLocked()
	return nil
}
