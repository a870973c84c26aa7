package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicemq/sluice/dataplane/replica"

	"connectrpc.com/connect"
	"github.com/google/uuid"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// applyMetadata installs a new cluster view and brings every local replica
// to the role it now has: leader, follower, or none (closed).
func (b *Broker) applyMetadata(m *clusterMeta) {
	b.meta.Store(m)
	b.mu.Lock()
	ctx := b.runCtx
	b.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	want := map[partKey]bool{}
	for _, t := range m.byID {
		for _, pm := range t.partitions {
			if !pm.hasReplica(b.cfg.ID) {
				continue
			}
			k := partKey{t.id, pm.partition}
			want[k] = true
			p, err := b.openPartition(t, pm)
			if err != nil {
				b.logger.Error("open partition", "topic", t.id, "partition", pm.partition, "err", err)
				continue
			}
			p.update(ctx, pm, t.config)
		}
	}
	if !b.assigned.Swap(true) {
		b.healthChanged()
	}
	b.mu.Lock()
	var drop []*partition
	for k, p := range b.parts {
		if !want[k] {
			drop = append(drop, p)
			delete(b.parts, k)
		}
	}
	sweep := !b.swept
	b.swept = true
	b.mu.Unlock()
	if sweep {
		b.deleteStrayPartitions(ctx, m)
	}
	for _, p := range drop {
		p.stop()
		if err := p.log.Close(); err != nil {
			b.logger.Warn("close partition log", "topic", p.topicID, "partition", p.id, "err", err)
		}
		if _, exists := m.byID[p.topicID]; exists {
			// The replica moved to other brokers: keep the data until
			// reassignment (later work) says it may go.
			continue
		}
		// The topic was deleted (topic ids are never reused): its data goes.
		if err := os.RemoveAll(p.dir); err != nil {
			b.logger.Warn("delete partition data", "topic", p.topicID, "partition", p.id, "err", err)
			continue
		}
		b.logger.Info("deleted partition data of a deleted topic", "topic", p.topicID, "partition", p.id)
		if p.tiered {
			go b.deleteRemotePartition(ctx, p.tenantID, p.topicID, p.id)
		}
	}
}

// deleteStrayPartitions deletes the data of partitions whose topic was
// deleted while this broker was down (or before it first heard its
// assignments): a running broker deletes a deleted topic's data when the
// topic leaves its assignments, but one that was not running never sees
// that happen. m is the first full view this process applied; a partition
// directory whose topic id it does not name belongs to a deleted topic
// (topic ids are never reused). The directories are listed now, before any
// later view can open a partition, and removed in the background.
func (b *Broker) deleteStrayPartitions(ctx context.Context, m *clusterMeta) {
	type stray struct {
		dir, tenantID, topicID string
		partition              int32
	}
	var strays []stray
	tenants, err := os.ReadDir(b.cfg.DataDir)
	if err != nil {
		b.logger.Warn("list the data dir for partitions of deleted topics", "dir", b.cfg.DataDir, "err", err)
		return
	}
	for _, td := range tenants {
		if !td.IsDir() || !isUUID(td.Name()) {
			continue // .lock, .tier-cache, checkpoints
		}
		parts, err := os.ReadDir(filepath.Join(b.cfg.DataDir, td.Name()))
		if err != nil {
			b.logger.Warn("list the data dir for partitions of deleted topics", "dir", td.Name(), "err", err)
			continue
		}
		for _, pd := range parts {
			topicID, partition, ok := parsePartitionDir(pd.Name())
			if !pd.IsDir() || !ok {
				continue
			}
			if _, exists := m.byID[topicID]; exists {
				continue
			}
			strays = append(strays, stray{filepath.Join(b.cfg.DataDir, td.Name(), pd.Name()), td.Name(), topicID, partition})
		}
	}
	if len(strays) == 0 {
		return
	}
	go func() {
		for _, s := range strays {
			if err := os.RemoveAll(s.dir); err != nil {
				b.logger.Warn("delete partition data of a deleted topic", "topic", s.topicID, "partition", s.partition, "err", err)
				continue
			}
			b.logger.Info("deleted partition data of a topic deleted while the broker was down", "topic", s.topicID, "partition", s.partition)
			if b.tier != nil && s.tenantID != systemTenantID {
				b.deleteRemotePartition(ctx, s.tenantID, s.topicID, s.partition)
			}
		}
	}()
}

// parsePartitionDir splits a partition directory name, "<topic id>-<n>".
func parsePartitionDir(name string) (topicID string, partition int32, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !isUUID(name[:i]) {
		return "", 0, false
	}
	n, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return name[:i], int32(n), true
}

// isUUID reports whether s is a UUID in its canonical text form.
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return len(s) == 36 && err == nil
}

func (b *Broker) openPartition(t *topicMeta, pm partMeta) (*partition, error) {
	k := partKey{t.id, pm.partition}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.parts[k]; ok {
		return p, nil
	}
	dir := b.partitionDir(t.tenantID, t.id, pm.partition)
	// Retention never deletes records above this replica's HW (set under
	// the partition lock before each ApplyRetention).
	retainBelow := new(atomic.Int64)
	isTiered := b.tier != nil && t.tenantID != systemTenantID
	lt, lb := localRetention(t.config, isTiered)
	var self *partition // set before retention first runs
	l, err := log.Open(dir, log.Config{
		SegmentBytes:   b.cfg.SegmentBytes,
		Flush:          b.flush,
		FlushInterval:  b.cfg.FlushInterval,
		RetentionTime:  lt,
		RetentionBytes: lb,
		SegmentAge:     b.segmentAge(t.config, isTiered),
		CanDelete: func(si log.SegmentInfo) bool {
			return si.NextOffset <= retainBelow.Load() && self.tierAllowsDelete(si)
		},
	})
	if err != nil {
		return nil, err
	}
	hw, err := readHW(dir)
	if err != nil {
		b.logger.Warn("ignoring high watermark checkpoint", "dir", dir, "err", err)
		hw = 0
	}
	hw = min(hw, l.LEO())
	ps, err := producerstate.Rebuild(dir, l)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("rebuild producer state: %w", err)
	}
	ps.Touch(time.Now().UnixMilli())
	p := &partition{b: b, tenantID: t.tenantID, topicID: t.id, id: pm.partition, dir: dir, log: l, roleHW: hw, savedHW: hw,
		hwCh: make(chan struct{}), meta: partMeta{leader: -1, leaderEpoch: -1},
		pstate: ps, snapOffset: ps.Offset(), snapAt: time.Now(), retainBelow: retainBelow, tiered: isTiered}
	p.remoteThrough.Store(-1)
	self = p
	b.parts[k] = p
	return p, nil
}

// update moves the replica to the role pm gives it. A new leader epoch
// always restarts the role (KAFKA-7164: a follower's next fetch carries its
// last epoch to the new leadership, which checks it for divergence even when
// the leader id stays the same).
func (p *partition) update(ctx context.Context, pm partMeta, cfg topicConfig) {
	self := p.b.cfg.ID
	p.mu.Lock()
	defer p.mu.Unlock()
	if pm.leaderEpoch < p.meta.leaderEpoch || (pm.leaderEpoch == p.meta.leaderEpoch && pm.partitionEpoch < p.meta.partitionEpoch) {
		return // an older snapshot than what this replica already knows
	}
	newEpoch := pm.leaderEpoch != p.meta.leaderEpoch
	prev, prevCfg := p.meta, p.cfg
	p.meta, p.cfg = pm, cfg
	switch {
	case pm.leader == self && (p.role != roleLeader || newEpoch || p.lead == nil):
		p.endRoleLocked()
		lead, err := p.newLeaderLocked(pm, cfg, time.Now())
		if err != nil {
			p.b.logger.Error("cannot lead partition", "topic", p.topicID, "partition", p.id, "leader_epoch", pm.leaderEpoch, "err", err)
			p.role = roleNone
			break
		}
		p.startLeadingLocked(ctx, lead)
		p.b.logger.Log(ctx, roleLogLevel(pm), "leading partition", "topic", p.topicID, "partition", p.id, "leader_epoch", pm.leaderEpoch, "isr", pm.isr, "leo", p.log.LEO(), "hw", lead.HW())
	case pm.leader == self:
		if cfg.minISR != prevCfg.minISR {
			if err := p.lead.SetMinISR(max(1, int(cfg.minISR))); err != nil {
				p.b.logger.Warn("apply min.insync.replicas", "topic", p.topicID, "partition", p.id, "err", err)
			}
		}
		if pm.partitionEpoch > p.lead.PartitionEpoch() {
			if err := p.lead.ISRChanged(pm.partitionEpoch, pm.isr); err != nil && !errors.Is(err, replica.ErrStalePartitionEpoch) {
				p.b.logger.Warn("apply ISR", "topic", p.topicID, "partition", p.id, "isr", pm.isr, "err", err)
			}
		}
		p.settleAcksLocked()
	case p.role != roleFollower || newEpoch || prev.leader != pm.leader:
		p.endRoleLocked()
		p.role = roleFollower
		if pm.leader < 0 {
			break // offline: nobody to follow until a leader is elected
		}
		fol, err := replica.NewFollower(replica.FollowerParams{
			Self: self, BrokerEpoch: p.b.brokerEpoch.Load(), Leader: pm.leader, LeaderEpoch: pm.leaderEpoch,
			HW: min(p.roleHW, p.log.LEO()), Unclean: cfg.unclean,
		})
		if err != nil {
			p.b.logger.Error("cannot follow partition", "topic", p.topicID, "partition", p.id, "leader", pm.leader, "leader_epoch", pm.leaderEpoch, "err", err)
			break
		}
		p.fol = fol
		fctx, cancel := context.WithCancel(ctx)
		p.stopF = cancel
		go p.follow(fctx, fol)
		p.b.logger.Log(ctx, roleLogLevel(pm), "following partition", "topic", p.topicID, "partition", p.id, "leader", pm.leader, "leader_epoch", pm.leaderEpoch)
	case p.fol != nil:
		p.fol.SetUnclean(cfg.unclean)
	}
	p.notifyLocked()
}

// startLeadingLocked makes lead the replica's leadership. When the log's
// tail (what it fetched last as a follower) is not durable yet, no producer
// of this leadership waits for it, so it is synced in the background:
// otherwise the HW could not reach the epoch's start before the next
// produce.
func (p *partition) startLeadingLocked(ctx context.Context, lead *replica.Leader) {
	p.lead, p.role = lead, roleLeader
	if leo := p.log.LEO(); lead.Durable() < leo {
		go func() {
			if err := p.makeDurable(ctx, lead, leo); err != nil {
				p.b.logger.Warn("sync the log tail of a new leadership", "topic", p.topicID, "partition", p.id, "err", err)
			}
		}()
	}
}

// endRoleLocked ends the replica's current role, if any: it stops the
// follower's fetching, closes a leadership (its pending acks=all waits fail
// with ErrNotLeader), and keeps the state machine's HW in roleHW for the
// next role.
func (p *partition) endRoleLocked() {
	p.stopLocked()
	p.roleHW = p.hwLocked()
	if p.lead != nil {
		p.lead.Close()
		p.settleAcksLocked()
	}
	p.lead, p.fol, p.ackWaiters = nil, nil, nil
}

// roleLogLevel is the level of a replica's "leading"/"following" line:
// debug for a partition's first leader (leader epoch 0: a new partition's
// placement, one line per replica of every partition created), info once
// the leadership moved (an election: worth an operator's eye).
func roleLogLevel(pm partMeta) slog.Level {
	if pm.leaderEpoch == 0 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func (p *partition) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endRoleLocked()
	p.role = roleNone
	p.notifyLocked()
}

func (p *partition) stopLocked() {
	if p.stopF != nil {
		p.stopF()
		p.stopF = nil
	}
}

// follow copies the leader's log until ctx ends, as the follower state
// machine fol says: fetch from the local LEO with the last batch's epoch,
// append the bytes unchanged, or truncate first when the leader reports a
// divergence (KIP-101/279/320).
func (p *partition) follow(ctx context.Context, fol *replica.Follower) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		sent, err := p.fetchOnce(ctx, fol, p.b.peer(fol.Leader()).replica.FetchReplica)
		switch {
		case errors.Is(err, errNotFollowing) || ctx.Err() != nil:
			return
		case !sent:
			p.b.logger.Debug("fetch from leader", "topic", p.topicID, "partition", p.id, "leader", fol.Leader(), "err", err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
		case err != nil:
			backoff = 50 * time.Millisecond
			if ferr := p.log.Failed(); ferr != nil {
				p.b.failStop(p, ferr)
				return
			}
			p.b.logger.Error("apply leader's batches", "topic", p.topicID, "partition", p.id, "err", err)
			sleep(ctx, time.Second)
		default:
			backoff = 50 * time.Millisecond
		}
	}
}

// errNotFollowing: fol is no longer this replica's follower state machine.
var errNotFollowing = errors.New("no longer following")

// fetchOnce is one step of follow: the fetch fol says to send, sent with
// send, and its answer applied. sent reports whether the leader answered;
// err is then the failure to apply the answer.
func (p *partition) fetchOnce(ctx context.Context, fol *replica.Follower,
	send func(context.Context, *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error),
) (sent bool, err error) {
	// What the last fetch appended becomes durable before this fetch
	// reports it (outside the lock: fetches of this replica and the ISR
	// loop go on meanwhile). The leader counts only durable offsets toward
	// the HW. Only this goroutine writes the log while it follows.
	if err := p.log.MakeDurable(ctx, p.log.LEO()); err != nil {
		return true, fmt.Errorf("sync fetched batches: %w", err)
	}
	p.mu.Lock()
	if p.fol != fol {
		p.mu.Unlock()
		return false, errNotFollowing
	}
	fol.SetBrokerEpoch(p.b.brokerEpoch.Load())
	q := fol.Next(logState(p.log))
	p.mu.Unlock()
	res, err := send(ctx, connect.NewRequest(&sluicev1.FetchReplicaRequest{
		FollowerId:          q.Replica,
		FollowerBrokerEpoch: q.BrokerEpoch,
		TopicId:             p.topicID,
		Partition:           p.id,
		LeaderEpoch:         q.LeaderEpoch,
		FetchOffset:         q.FetchOffset,
		LastFetchedEpoch:    q.LastFetchedEpoch,
		DurableOffset:       &q.Durable,
		MaxBytes:            4 << 20,
		MaxWaitMs:           500,
	}))
	if err != nil {
		return false, err
	}
	return true, p.applyFetch(fol, q, res.Msg)
}

// applyFetch applies the leader's answer res to fetch q of follower fol:
// the truncation or the HW that fol decides, and the records appended.
func (p *partition) applyFetch(fol *replica.Follower, q replica.FetchRequest, res *sluicev1.FetchReplicaResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fol != fol || p.role != roleFollower || fol.CheckAnswer(logState(p.log), q) != nil {
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
			p.b.logger.Error("truncating committed records after an unclean leader election",
				"topic", p.topicID, "partition", p.id, "to", to, "hw", hw, "lost", hw-to)
		}
		defer func() { fol.Truncated(p.log.LEO()) }()
		if to < p.log.LogStartOffset() {
			// Nothing in common: start over at the leader's log start.
			if err := p.resetProducerStateLocked(); err != nil {
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
		p.b.logger.Info("truncated divergent tail", "topic", p.topicID, "partition", p.id, "to", p.log.LEO(), "leader_epoch_end", d.GetEpoch())
		return nil
	}
	if p.log.LEO() < res.GetLogStartOffset() {
		// The leader no longer has what we need (retention): start over
		// at its log start, then fetch from there. (Such an answer carries
		// no records.)
		if err := p.resetProducerStateLocked(); err != nil {
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

// replicaService serves followers' fetches on the leader.
type replicaService struct{ b *Broker }

func (s *replicaService) FetchReplica(ctx context.Context, req *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error) {
	m := req.Msg
	p := s.b.partition(m.GetTopicId(), m.GetPartition())
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("partition %s/%d is not on broker %d", m.GetTopicId(), m.GetPartition(), s.b.cfg.ID))
	}
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
				res = &sluicev1.FetchReplicaResponse{HighWatermark: p.highWatermark(), LogStartOffset: p.log.LogStartOffset(), CopiedEndOffset: p.remoteThrough.Load() + 1}
			}
			return connect.NewResponse(res), nil
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
func (p *partition) serveReplica(m *sluicev1.FetchReplicaRequest, maxBytes int) (*sluicev1.FetchReplicaResponse, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.role != roleLeader || p.lead == nil {
		return nil, nil, toConnect(p.b.notLeader(p.meta))
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
		return nil, nil, toConnect(err)
	}
	return &sluicev1.FetchReplicaResponse{Batches: data, HighWatermark: d.HW, LogStartOffset: start, CopiedEndOffset: p.remoteThrough.Load() + 1}, nil, nil
}
