package fetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Fetch settings: Wait is the long-poll wait of a session's request; the
// answer's byte limits, and how many replicas sync their fetched batches
// at once before a request.
const (
	Wait              = 500 * time.Millisecond
	fetchMaxBytes     = 16 << 20
	fetchPartMaxBytes = 4 << 20
	fetchSyncs        = 8
)

// Config is what the fetchers need of their broker.
type Config struct {
	// ID is this broker's id; BrokerEpoch the epoch of its current
	// registration, sent with every fetch.
	ID          int32
	BrokerEpoch func() int64
	// Client returns the client of broker leader's replica service.
	Client func(leader int32) LeaderClient
	// Logger logs the fetchers' failures.
	Logger *slog.Logger
	// Flush is the replicas' flush policy: with log.FlushInterval a sync
	// waits for the interval's flush, so every replica's waits at once.
	Flush log.FlushPolicy
	// FailStop stops the broker after the log of a replica failed.
	FailStop func(topicID string, partition int32, err error)
}

// Fetchers are a broker's fetchers, by leader broker (Kafka's
// ReplicaFetcherManager). Lock order: the replica's lock (Follow and
// Unfollow are called under it), Fetchers.mu, Fetcher.mu.
type Fetchers struct {
	c        Config
	mu       sync.Mutex
	byLeader map[int32]*Fetcher
}

// New returns a broker's fetchers, none running.
func New(c Config) *Fetchers { return &Fetchers{c: c} }

// following is a replica registered with a fetcher and the follower state
// machine it follows with.
type following struct {
	p   Replica
	fol *replica.Follower
}

type sessionKey struct {
	topicID   string
	partition int32
}

// Fetcher fetches every partition this broker follows from one leader
// broker (Kafka's ReplicaFetcherThread).
type Fetcher struct {
	fs     *Fetchers
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

// Follow registers replica p, following with fol, with the fetcher of
// fol's leader, starting its goroutine (with ctx) unless it runs. Called
// under p's lock.
func (fs *Fetchers) Follow(ctx context.Context, p Replica, fol *replica.Follower) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.byLeader[fol.Leader()]
	if f == nil {
		if fs.byLeader == nil {
			fs.byLeader = map[int32]*Fetcher{}
		}
		f = &Fetcher{fs: fs, leader: fol.Leader(), reg: map[sessionKey]following{}, parts: map[sessionKey]*fetchPart{}}
		fs.byLeader[fol.Leader()] = f
	}
	f.mu.Lock()
	f.reg[sessionKey{p.TopicID(), p.Partition()}] = following{p, fol}
	start := !f.running && ctx.Err() == nil
	f.running = f.running || start
	f.mu.Unlock()
	if start {
		go f.run(ctx)
	}
}

// Unfollow unregisters replica p from the fetcher of leader. Called under
// p's lock.
func (fs *Fetchers) Unfollow(p Replica, leader int32) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.byLeader[leader]
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k := sessionKey{p.TopicID(), p.Partition()}
	if f.reg[k].p == p {
		delete(f.reg, k)
	}
	if len(f.reg) == 0 && !f.running {
		delete(fs.byLeader, leader)
	}
}

// Of returns the fetcher of leader, nil when no replica follows it.
func (fs *Fetchers) Of(leader int32) *Fetcher {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.byLeader[leader]
}

// Len counts the leader brokers this broker's replicas fetch from: one
// fetcher (and one goroutine, while its context lives) each.
func (fs *Fetchers) Len() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.byLeader)
}

// run fetches until no replica is registered or ctx ends. A leader that
// answers FetchReplicas with Unimplemented predates fetch sessions (a
// rolling upgrade): for a minute at a time the fetcher then fetches its
// partitions one by one with FetchReplica (legacyRound).
func (f *Fetcher) run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	var legacyUntil time.Time
	for f.keepRunning(ctx) {
		client := f.fs.c.Client(f.leader)
		var r RoundResult
		if time.Now().Before(legacyUntil) {
			r = f.legacyRound(ctx, client.FetchReplica)
		} else {
			r = f.Round(ctx, client.FetchReplicas, Wait, fetchMaxBytes, fetchPartMaxBytes)
			if errors.Is(r.Err, derr.UnsupportedVersion) {
				f.fs.c.Logger.Info("the leader predates fetch sessions: fetching its partitions one by one", "leader", f.leader)
				legacyUntil = time.Now().Add(time.Minute)
				continue
			}
		}
		switch {
		case ctx.Err() != nil:
		case r.Err != nil:
			f.fs.c.Logger.Debug("fetch from leader", "leader", f.leader, "err", r.Err)
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
		default:
			backoff = 50 * time.Millisecond
		}
	}
}

// keepRunning reports whether the goroutine goes on; when not, it marks
// the fetcher stopped (dropping it when nothing is registered).
func (f *Fetcher) keepRunning(ctx context.Context) bool {
	fs := f.fs
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

// SendFunc sends a session's request to the leader (LeaderClient's
// FetchReplicas).
type SendFunc func(context.Context, *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error)

// RoundResult is what one round did: Err is the request's failure (the
// next round starts a new session); ApplyErr joins the partitions'
// failures to apply their answers (each backs off alone).
type RoundResult struct {
	Err      error
	ApplyErr error
}

// Round is one request of the session, sent with send, and its answers
// applied: the registered replicas are reconciled with the session, the
// batches each fetched since its last report are made durable (fetchSyncs
// at a time, outside every lock), each replica's follower state machine
// builds its position (Replica.Next; listed only when the leader does not
// hold it yet), and each answer is applied as its state machine decides
// (Replica.Apply). The fetcher's goroutine runs one round after another
// with the leader's client, Wait and the default byte limits; a test may
// run rounds itself, one step at a time.
func (f *Fetcher) Round(ctx context.Context, send SendFunc, wait time.Duration, maxBytes, partMaxBytes int32) RoundResult {
	f.roundMu.Lock()
	defer f.roundMu.Unlock()
	now := time.Now()
	f.mu.Lock()
	reg := maps.Clone(f.reg)
	f.mu.Unlock()

	full := f.sessionID == 0
	req := &sluicev1.FetchReplicasRequest{
		FollowerId: f.fs.c.ID, FollowerBrokerEpoch: f.fs.c.BrokerEpoch(), SessionId: f.sessionID, SessionEpoch: f.sessionEpoch,
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
		return RoundResult{Err: err}
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
		q, ok := fp.p.Next(fp.fol, req.FollowerBrokerEpoch)
		if !ok {
			leave(k, fp) // its role ended: it is being unregistered
			continue
		}
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
		return RoundResult{Err: err}
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
			f.fs.c.Logger.Debug("fetch from leader", "topic", k.topicID, "partition", k.partition, "leader", f.leader,
				"code", e.GetCode(), "err", e.GetMessage())
			continue
		}
		if err := fp.p.Apply(fp.fol, fp.pos, a.GetFetch()); err != nil {
			fp.backOff(now)
			if ferr := fp.p.Log().Failed(); ferr != nil {
				f.failStop(fp.p, ferr)
			} else {
				f.fs.c.Logger.Error("apply leader's batches", "topic", k.topicID, "partition", k.partition, "err", err)
			}
			errs = append(errs, fmt.Errorf("partition %s/%d: %w", k.topicID, k.partition, err))
			continue
		}
		fp.backoff = 0
	}
	return RoundResult{ApplyErr: errors.Join(errs...)}
}

// failStop stops the broker after p's log failed (Config.FailStop).
func (f *Fetcher) failStop(p Replica, err error) { f.fs.c.FailStop(p.TopicID(), p.Partition(), err) }

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
// while they follow. A failed log stops the broker (Config.FailStop) and
// its partition backs off.
func (f *Fetcher) syncFetched(ctx context.Context, keys []sessionKey) error {
	var todo []*fetchPart
	for _, k := range keys {
		if l := f.parts[k].p.Log(); l.DurableOffset() < l.LEO() {
			todo = append(todo, f.parts[k])
		}
	}
	if len(todo) == 0 {
		return nil
	}
	limit := fetchSyncs
	if f.fs.c.Flush == log.FlushInterval {
		limit = len(todo) // waits for the interval flush, no disk work of their own
	}
	sem := make(chan struct{}, limit)
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, fp := range todo {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			l := fp.p.Log()
			errs[i] = l.MakeDurable(ctx, l.LEO())
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
		switch ferr := fp.p.Log().Failed(); {
		case ferr != nil:
			f.failStop(fp.p, ferr)
		case errors.Is(err, log.ErrClosed): // the replica was dropped meanwhile
		default:
			f.fs.c.Logger.Error("sync fetched batches", "topic", fp.p.TopicID(), "partition", fp.p.Partition(), "err", err)
		}
	}
	return nil
}

type legacySendFunc func(context.Context, *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error)

// legacyRound fetches every registered partition once with FetchReplica,
// for a leader that predates fetch sessions: the same syncs, positions and
// answers as Round, one request per partition without waiting (fetchSyncs
// at a time), then, when no partition got records, a pause of Wait.
func (f *Fetcher) legacyRound(ctx context.Context, send legacySendFunc) RoundResult {
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
		return RoundResult{Err: err}
	}
	var mu sync.Mutex
	var errs []error
	got := false
	sem := make(chan struct{}, fetchSyncs)
	var wg sync.WaitGroup
	epoch := f.fs.c.BrokerEpoch()
	for _, k := range keys {
		fp := f.parts[k]
		if time.Now().Before(fp.retryAt) {
			continue // its sync failed
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			p := fp.p
			q, ok := p.Next(fp.fol, epoch)
			if !ok {
				return
			}
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
			aerr := p.Apply(fp.fol, q, res)
			mu.Lock()
			defer mu.Unlock()
			got = got || len(res.GetBatches()) > 0 || res.GetDivergingEpoch() != nil
			if aerr != nil {
				fp.backOff(now)
				if ferr := p.Log().Failed(); ferr != nil {
					f.failStop(p, ferr)
				} else {
					f.fs.c.Logger.Error("apply leader's batches", "topic", k.topicID, "partition", k.partition, "err", aerr)
				}
				errs = append(errs, fmt.Errorf("partition %s/%d: %w", k.topicID, k.partition, aerr))
				return
			}
			fp.backoff = 0
		})
	}
	wg.Wait()
	if !got {
		sleep(ctx, Wait)
	}
	return RoundResult{ApplyErr: errors.Join(errs...)}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
