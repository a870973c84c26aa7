package partition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// The follower side of replication: one fetcher per leader broker, which
// owns the broker's fetch session with that leader (Sessions on its side)
// and carries every replica here that follows a partition it leads.
// Replica.Update registers a follower (Host.follow) and the role's end
// unregisters it; the fetcher's goroutine starts with its first
// registration and ends when it has none left or its context ends.

// Fetch settings: the long-poll wait, the answer's byte limits, and how
// many replicas sync their fetched batches at once before a request.
const (
	fetchWait         = 500 * time.Millisecond
	fetchMaxBytes     = 16 << 20
	fetchPartMaxBytes = 4 << 20
	fetchSyncs        = 8
)

// fetchers are a Host's fetchers, by leader broker (the zero value has
// none). Lock order: Replica.mu, fetchers.mu, fetcher.mu.
type fetchers struct {
	mu       sync.Mutex
	byLeader map[int32]*fetcher
}

// following is a replica registered with a fetcher and the follower state
// machine it follows with.
type following struct {
	p   *Replica
	fol *replica.Follower
}

// fetcher fetches every partition this broker follows from one leader
// broker.
type fetcher struct {
	h      *Host
	leader int32

	mu      sync.Mutex
	reg     map[sessionKey]following
	running bool // its goroutine runs

	// roundMu is held by the round in progress, which owns what follows.
	roundMu      sync.Mutex
	sessionID    int64 // 0: the next request starts a session
	sessionEpoch int32
	parts        map[sessionKey]*fetchPart
}

// fetchPart is one partition of the fetcher's session, as the round sees
// it.
type fetchPart struct {
	following
	// inSession: the leader holds pos as this partition's position.
	inSession bool
	pos       replica.FetchRequest
	// A partition whose answer failed (an error, a refused truncation)
	// stays out of the session until retryAt.
	retryAt time.Time
	backoff time.Duration
}

// follow registers replica p, following with fol, with the fetcher of
// fol's leader, starting its goroutine (with ctx) unless it runs. Called
// under p.mu.
func (h *Host) follow(ctx context.Context, p *Replica, fol *replica.Follower) {
	fs := &h.fetchers
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.byLeader[fol.Leader()]
	if f == nil {
		if fs.byLeader == nil {
			fs.byLeader = map[int32]*fetcher{}
		}
		f = &fetcher{h: h, leader: fol.Leader(), reg: map[sessionKey]following{}, parts: map[sessionKey]*fetchPart{}}
		fs.byLeader[fol.Leader()] = f
	}
	f.mu.Lock()
	f.reg[sessionKey{p.topicID, p.id}] = following{p, fol}
	start := !f.running && ctx.Err() == nil
	f.running = f.running || start
	f.mu.Unlock()
	if start {
		go f.run(ctx)
	}
}

// unfollow unregisters replica p from the fetcher of leader. Called under
// p.mu.
func (h *Host) unfollow(p *Replica, leader int32) {
	fs := &h.fetchers
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.byLeader[leader]
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := sessionKey{p.topicID, p.id}
	if f.reg[k].p == p {
		delete(f.reg, k)
	}
	if len(f.reg) == 0 && !f.running {
		delete(fs.byLeader, leader)
	}
}

// fetcher returns the fetcher of leader, nil when no replica follows it.
func (h *Host) fetcher(leader int32) *fetcher {
	fs := &h.fetchers
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.byLeader[leader]
}

// Fetchers counts the leader brokers this broker's replicas fetch from:
// one fetcher (and one goroutine, while its context lives) each.
func (h *Host) Fetchers() int {
	fs := &h.fetchers
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.byLeader)
}

// run fetches until no replica is registered or ctx ends. A leader that
// answers FetchReplicas with Unimplemented predates fetch sessions (a
// rolling upgrade): for a minute at a time the fetcher then fetches its
// partitions one by one with FetchReplica (legacyRound).
func (f *fetcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	var legacyUntil time.Time
	for f.keepRunning(ctx) {
		client := f.h.ReplicaClient(f.leader)
		var r roundResult
		if time.Now().Before(legacyUntil) {
			r = f.legacyRound(ctx, client.FetchReplica)
		} else {
			r = f.round(ctx, client.FetchReplicas, fetchWait, fetchMaxBytes, fetchPartMaxBytes)
			if errors.Is(r.err, derr.UnsupportedVersion) {
				f.h.Logger.Info("the leader predates fetch sessions: fetching its partitions one by one", "leader", f.leader)
				legacyUntil = time.Now().Add(time.Minute)
				continue
			}
		}
		switch {
		case ctx.Err() != nil:
		case r.err != nil:
			f.h.Logger.Debug("fetch from leader", "leader", f.leader, "err", r.err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
		default:
			backoff = 50 * time.Millisecond
		}
	}
}

// keepRunning reports whether the goroutine goes on; when not, it marks
// the fetcher stopped (dropping it when nothing is registered).
func (f *fetcher) keepRunning(ctx context.Context) bool {
	fs := &f.h.fetchers
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() == nil && len(f.reg) > 0 {
		return true
	}
	f.running = false
	if len(f.reg) == 0 && fs.byLeader[f.leader] == f {
		delete(fs.byLeader, f.leader)
	}
	return false
}

type sendFunc func(context.Context, *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error)

// roundResult is what one round did: err is the request's failure (the
// next round starts a new session); applyErr joins the partitions'
// failures to apply their answers (each backs off alone).
type roundResult struct {
	err      error
	applyErr error
}

// round is one request of the session and its answers applied: the
// registered replicas are reconciled with the session, the batches each
// fetched since its last report are made durable (fetchSyncs at a time,
// outside every lock), each replica's follower state machine builds its
// position (listed only when the leader does not hold it yet), and each
// answer is applied as its state machine decides (applyFetch).
func (f *fetcher) round(ctx context.Context, send sendFunc, wait time.Duration, maxBytes, partMaxBytes int32) roundResult {
	f.roundMu.Lock()
	defer f.roundMu.Unlock()
	now := time.Now()
	f.mu.Lock()
	reg := maps.Clone(f.reg)
	f.mu.Unlock()

	full := f.sessionID == 0
	req := &sluicev1.FetchReplicasRequest{
		FollowerId: f.h.ID, FollowerBrokerEpoch: f.h.BrokerEpoch(), SessionId: f.sessionID, SessionEpoch: f.sessionEpoch,
		MaxWaitMs: wait.Milliseconds(), MaxBytes: maxBytes, PartitionMaxBytes: partMaxBytes,
	}
	leave := func(k sessionKey, fp *fetchPart) {
		if fp.inSession && !full {
			req.Removed = append(req.Removed, &sluicev1.ReplicaPartition{TopicId: k.topicID, Partition: k.partition})
		}
		fp.inSession = false
	}
	for k, fp := range f.parts {
		r, ok := reg[k]
		switch {
		case !ok:
			leave(k, fp)
			delete(f.parts, k)
		case r != fp.following:
			// A new role: the leader replaces the position it holds.
			f.parts[k] = &fetchPart{following: r, inSession: fp.inSession, pos: replica.FetchRequest{FetchOffset: -1}}
		}
	}
	var active []sessionKey
	for k, r := range reg {
		fp := f.parts[k]
		if fp == nil {
			fp = &fetchPart{following: r}
			f.parts[k] = fp
		}
		if now.Before(fp.retryAt) {
			leave(k, fp)
			continue
		}
		active = append(active, k)
	}
	if err := f.syncFetched(ctx, active); err != nil {
		return roundResult{err: err}
	}

	type entry struct {
		k   sessionKey
		fp  *fetchPart
		pos replica.FetchRequest
	}
	var entries []entry
	for _, k := range active {
		fp := f.parts[k]
		if time.Now().Before(fp.retryAt) {
			leave(k, fp) // its sync failed
			continue
		}
		p := fp.p
		p.mu.Lock()
		if p.fol != fp.fol {
			p.mu.Unlock()
			leave(k, fp) // its role ended: it is being unregistered
			continue
		}
		fp.fol.SetBrokerEpoch(req.FollowerBrokerEpoch)
		q := fp.fol.Next(logState(p.log))
		p.mu.Unlock()
		if full || !fp.inSession || !samePosition(q, fp.pos) {
			req.Partitions = append(req.Partitions, &sluicev1.ReplicaFetchPosition{
				TopicId: k.topicID, Partition: k.partition, LeaderEpoch: q.LeaderEpoch, FetchOffset: q.FetchOffset,
				LastFetchedEpoch: q.LastFetchedEpoch, DurableOffset: q.Durable,
			})
			entries = append(entries, entry{k, fp, q})
		}
	}

	rctx, cancel := context.WithTimeout(ctx, wait+30*time.Second)
	defer cancel()
	res, err := send(rctx, req)
	if err != nil {
		f.sessionID, f.sessionEpoch = 0, 0
		for _, fp := range f.parts {
			fp.inSession = false
		}
		return roundResult{err: err}
	}
	if full {
		// Only what this request listed is in the new session.
		for _, fp := range f.parts {
			fp.inSession = false
		}
	}
	f.sessionID, f.sessionEpoch = res.GetSessionId(), f.sessionEpoch+1
	for _, e := range entries {
		e.fp.inSession, e.fp.pos = true, e.pos
	}
	var errs []error
	for _, a := range res.GetPartitions() {
		k := sessionKey{a.GetTopicId(), a.GetPartition()}
		fp := f.parts[k]
		if fp == nil || !fp.inSession {
			continue // it left the session meanwhile
		}
		if e := a.GetError(); e != nil {
			// The leader dropped it from the session: it comes back with
			// its position after a backoff.
			fp.inSession = false
			fp.backOff(now)
			f.h.Logger.Debug("fetch from leader", "topic", k.topicID, "partition", k.partition, "leader", f.leader,
				"code", e.GetCode(), "err", e.GetMessage())
			continue
		}
		if err := fp.p.applyFetch(fp.fol, fp.pos, a.GetFetch()); err != nil {
			fp.backOff(now)
			if ferr := fp.p.log.Failed(); ferr != nil {
				f.h.failStop(fp.p, ferr)
			} else {
				f.h.Logger.Error("apply leader's batches", "topic", k.topicID, "partition", k.partition, "err", err)
			}
			errs = append(errs, fmt.Errorf("partition %s/%d: %w", k.topicID, k.partition, err))
			continue
		}
		fp.backoff = 0
	}
	return roundResult{applyErr: errors.Join(errs...)}
}

// backOff keeps the partition out of the session for a while: 50 ms after
// its first failure, doubling up to 1 s while it keeps failing.
func (fp *fetchPart) backOff(now time.Time) {
	fp.backoff = min(max(2*fp.backoff, 50*time.Millisecond), time.Second)
	fp.retryAt = now.Add(fp.backoff)
}

func samePosition(a, b replica.FetchRequest) bool {
	return a.LeaderEpoch == b.LeaderEpoch && a.FetchOffset == b.FetchOffset &&
		a.LastFetchedEpoch == b.LastFetchedEpoch && a.Durable == b.Durable
}

// syncFetched makes what the replicas keys appended since their last
// report durable before the request reports it (the leader counts only
// durable offsets toward the HW), fetchSyncs fsyncs at a time so that
// they overlap, outside every lock. Only this round writes their logs
// while they follow. A failed log stops the broker (Host.FailStop) and
// its partition backs off.
func (f *fetcher) syncFetched(ctx context.Context, keys []sessionKey) error {
	var todo []*fetchPart
	for _, k := range keys {
		if l := f.parts[k].p.log; l.DurableOffset() < l.LEO() {
			todo = append(todo, f.parts[k])
		}
	}
	if len(todo) == 0 {
		return nil
	}
	limit := fetchSyncs
	if f.h.Flush == log.FlushInterval {
		limit = len(todo) // waits for the interval flush, no disk work of their own
	}
	sem := make(chan struct{}, limit)
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, fp := range todo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = fp.p.log.MakeDurable(ctx, fp.p.log.LEO())
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	now := time.Now()
	for i, err := range errs {
		if err == nil {
			continue
		}
		fp := todo[i]
		fp.backOff(now)
		switch ferr := fp.p.log.Failed(); {
		case ferr != nil:
			f.h.failStop(fp.p, ferr)
		case errors.Is(err, log.ErrClosed): // the replica was dropped meanwhile
		default:
			f.h.Logger.Error("sync fetched batches", "topic", fp.p.topicID, "partition", fp.p.id, "err", err)
		}
	}
	return nil
}

type legacySendFunc func(context.Context, *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error)

// legacyRound fetches every registered partition once with FetchReplica,
// for a leader that predates fetch sessions: the same syncs, positions and
// answers as round, one request per partition without waiting (fetchSyncs
// at a time), then, when no partition got records, a pause of fetchWait.
func (f *fetcher) legacyRound(ctx context.Context, send legacySendFunc) roundResult {
	f.roundMu.Lock()
	defer f.roundMu.Unlock()
	f.sessionID, f.sessionEpoch = 0, 0
	now := time.Now()
	f.mu.Lock()
	reg := maps.Clone(f.reg)
	f.mu.Unlock()
	for k, fp := range f.parts {
		if r, ok := reg[k]; !ok || r != fp.following {
			delete(f.parts, k)
		}
	}
	var keys []sessionKey
	for k, r := range reg {
		fp := f.parts[k]
		if fp == nil {
			fp = &fetchPart{following: r}
			f.parts[k] = fp
		}
		fp.inSession = false
		if !now.Before(fp.retryAt) {
			keys = append(keys, k)
		}
	}
	if err := f.syncFetched(ctx, keys); err != nil {
		return roundResult{err: err}
	}
	var mu sync.Mutex
	var errs []error
	got := false
	sem := make(chan struct{}, fetchSyncs)
	var wg sync.WaitGroup
	epoch := f.h.BrokerEpoch()
	for _, k := range keys {
		fp := f.parts[k]
		if time.Now().Before(fp.retryAt) {
			continue // its sync failed
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := fp.p
			p.mu.Lock()
			if p.fol != fp.fol {
				p.mu.Unlock()
				return
			}
			fp.fol.SetBrokerEpoch(epoch)
			q := fp.fol.Next(logState(p.log))
			p.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			res, err := send(rctx, &sluicev1.FetchReplicaRequest{
				FollowerId: q.Replica, FollowerBrokerEpoch: q.BrokerEpoch, TopicId: k.topicID, Partition: k.partition,
				LeaderEpoch: q.LeaderEpoch, FetchOffset: q.FetchOffset, LastFetchedEpoch: q.LastFetchedEpoch,
				DurableOffset: &q.Durable, MaxBytes: fetchPartMaxBytes,
			})
			if err != nil {
				fp.backOff(now)
				return
			}
			aerr := p.applyFetch(fp.fol, q, res)
			mu.Lock()
			defer mu.Unlock()
			got = got || len(res.GetBatches()) > 0 || res.GetDivergingEpoch() != nil
			if aerr != nil {
				fp.backOff(now)
				if ferr := p.log.Failed(); ferr != nil {
					f.h.failStop(p, ferr)
				} else {
					f.h.Logger.Error("apply leader's batches", "topic", k.topicID, "partition", k.partition, "err", aerr)
				}
				errs = append(errs, fmt.Errorf("partition %s/%d: %w", k.topicID, k.partition, aerr))
				return
			}
			fp.backoff = 0
		})
	}
	wg.Wait()
	if !got {
		sleep(ctx, fetchWait)
	}
	return roundResult{applyErr: errors.Join(errs...)}
}
