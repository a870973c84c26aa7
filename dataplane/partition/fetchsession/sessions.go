package fetchsession

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Sessions are the replica-fetch sessions of the followers that fetch
// from this broker's leaders (the ReplicaService's FetchReplicas, Kafka's
// KIP-227 fetch sessions): one per follower broker, carrying every
// partition it follows from here. A session keeps each partition's last
// position, so a request lists only what changed, and every request of a
// live session counts as a fetch of every partition in it at that
// position (the ISR's lag time runs from fetches); a request long-polls
// once for all of them, woken by the replicas themselves (a session is a
// Watcher of each of its replicas: their notify path marks the replica
// and signals the session's wake channel). The leader state machines stay
// the single source of truth: a session holds positions, never the HW or
// the ISR.
type Sessions struct {
	lookup func(topicID string, partition int32) Replica
	max    int
	idle   time.Duration
	m      *Metrics
	// errorAnswer is SessionsConfig.ErrorAnswer.
	errorAnswer func(error) (uint32, string)

	mu        sync.Mutex
	byID      map[int64]*fetchSession
	lastSweep time.Time
}

// Config configures Sessions.
type Config struct {
	// Lookup returns the local replica of a partition, nil when this
	// broker has none (partition.NewSessions wires the broker's replicas).
	Lookup func(topicID string, partition int32) Replica
	// MaxSessions bounds the sessions kept (≤ 0: 1000); the least
	// recently used idle one makes room for a new one.
	MaxSessions int
	// IdleTimeout evicts a session that served no request for this long
	// (≤ 0: 2 minutes).
	IdleTimeout time.Duration
	// Metrics counts the requests; nil counts nothing.
	Metrics *Metrics
	// ErrorAnswer says a partition's failure to the follower in the
	// protocol's terms: its code and message (the Connect adapter's,
	// wired by the broker). nil answers code 0 with the error's text.
	ErrorAnswer func(error) (code uint32, message string)
}

// Metrics count what Sessions do.
type Metrics struct {
	// Requests counts FetchReplicas requests by kind: "full" (a new
	// session), "incremental", or "refused" (an unknown session, a wrong
	// session epoch).
	Requests *prometheus.CounterVec
}

// New returns an empty set of sessions.
func New(c Config) *Sessions {
	if c.MaxSessions <= 0 {
		c.MaxSessions = 1000
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 2 * time.Minute
	}
	return &Sessions{lookup: c.Lookup, max: c.MaxSessions, idle: c.IdleTimeout, m: c.Metrics, errorAnswer: c.ErrorAnswer, byID: map[int64]*fetchSession{}}
}

// Stats are the sessions at one moment.
type Stats struct {
	Sessions   int
	Partitions int
}

// Stats counts the live sessions and the partitions they carry.
func (c *Sessions) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{Sessions: len(c.byID)}
	for _, s := range c.byID {
		st.Partitions += int(s.nparts.Load())
	}
	return st
}

// fetchSession is one follower broker's session.
type fetchSession struct {
	id       int64
	follower int32
	answer   func(error) (uint32, string) // Sessions.errorAnswer
	// Under Sessions.mu:
	busy     bool  // a request is being served
	epoch    int32 // the session epoch the next request must carry
	lastUsed time.Time

	// mu is held by the request being served (and by close); lock order:
	// fetchSession.mu, then the replica's lock (Replica.Fetch, Watch), then
	// dirtyMu.
	mu     sync.Mutex
	closed bool
	parts  map[sessionKey]*sessionPart
	order  []sessionKey // parts in the order a request serves them, from next
	next   int
	nparts atomic.Int64

	// wake (cap 1) is signalled, and dirty marks the replica, whenever a
	// replica of the session changes (Changed); the request waiting takes
	// them.
	wake    chan struct{}
	dirtyMu sync.Mutex
	dirty   map[Replica]struct{}
}

type sessionKey struct {
	topicID   string
	partition int32
}

// sessionPart is one partition of a session: the follower's last
// position, as Replica.Fetch takes it, and what it was last told.
type sessionPart struct {
	p   Replica
	pos *sluicev1.FetchReplicaRequest
	// The HW, log start and copied end last answered; -1 before the first
	// answer, so a partition added to the session is answered once.
	sentHW, sentStart, sentCopied int64
}

// Changed tells s that replica p changed (called under p's lock).
func (s *fetchSession) Changed(p Replica) {
	s.dirtyMu.Lock()
	s.dirty[p] = struct{}{}
	s.dirtyMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *fetchSession) takeDirty() map[Replica]struct{} {
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	d := s.dirty
	s.dirty = map[Replica]struct{}{}
	return d
}

// Fetch serves one request of a follower broker's session m: it starts
// or continues the session, applies the partitions m adds, moves or
// removes, counts the request as a fetch of every partition in the
// session at its position, and answers the partitions with something new,
// waiting up to m's wait (at most 5 s) for one when none has. Session
// errors are NOT_FOUND (unknown or evicted session) or
// FAILED_PRECONDITION (a wrong session epoch, a session already serving a
// request); a partition's error is in its answer and ends its place in the
// session.
func (c *Sessions) Fetch(ctx context.Context, m *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	s, err := c.acquire(m)
	if err != nil {
		c.count("refused")
		return nil, err
	}
	defer c.release(s)
	if m.GetSessionId() == 0 {
		c.count("full")
	} else {
		c.count("incremental")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, derr.New(derr.FetchSessionIDNotFound, "fetch session %d was evicted; start a new one", s.id)
	}
	var res sluicev1.FetchReplicasResponse
	res.SessionId = s.id
	for _, r := range m.GetRemoved() {
		s.remove(sessionKey{r.GetTopicId(), r.GetPartition()})
	}
	for _, e := range m.GetPartitions() {
		if a := s.upsert(c.lookup, e); a != nil {
			res.Partitions = append(res.Partitions, a)
		}
	}
	total := clampBytes(m.GetMaxBytes(), 16<<20)
	per := clampBytes(m.GetPartitionMaxBytes(), 4<<20)
	wait := min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, 5*time.Second)
	budget := total
	s.takeDirty() // every partition is served below
	more := false
	keys := s.rotation()
	for _, k := range keys {
		a, mr := s.serve(k, m, &budget, per)
		if a != nil {
			res.Partitions = append(res.Partitions, a)
		}
		more = more || mr
	}
	if len(res.Partitions) > 0 || more || wait <= 0 {
		return &res, nil
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-s.wake:
		case <-timer.C:
			return &res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		for p := range s.takeDirty() {
			k := sessionKey{p.TopicID(), p.Partition()}
			if sp := s.parts[k]; sp == nil || sp.p != p {
				continue
			}
			a, mr := s.serve(k, m, &budget, per)
			if a != nil {
				res.Partitions = append(res.Partitions, a)
			}
			more = more || mr
		}
		if len(res.Partitions) > 0 || more {
			return &res, nil
		}
	}
}

func clampBytes(n int32, def int) int {
	if n <= 0 || n > 64<<20 {
		return def
	}
	return int(n)
}

func (c *Sessions) count(kind string) {
	if c.m != nil && c.m.Requests != nil {
		c.m.Requests.WithLabelValues(kind).Inc()
	}
}

// acquire finds (or, for session id 0, starts) m's session and checks its
// epoch; the session is busy until release.
func (c *Sessions) acquire(m *sluicev1.FetchReplicasRequest) (*fetchSession, error) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.lastSweep) > c.idle/4 {
		c.lastSweep = now
		for _, s := range c.byID {
			if !s.busy && now.Sub(s.lastUsed) > c.idle {
				c.evictLocked(s)
			}
		}
	}
	if m.GetSessionId() == 0 {
		if m.GetSessionEpoch() != 0 {
			return nil, derr.New(derr.InvalidRequest, "session epoch %d without a session: a new session starts at 0", m.GetSessionEpoch())
		}
		var lru *fetchSession
		for _, s := range c.byID {
			if s.follower == m.GetFollowerId() {
				c.evictLocked(s) // the follower started over: its old session is dead
				continue
			}
			if !s.busy && (lru == nil || s.lastUsed.Before(lru.lastUsed)) {
				lru = s
			}
		}
		if len(c.byID) >= c.max {
			if lru == nil {
				return nil, derr.New(derr.ResourceExhausted, "%d fetch sessions, all busy", len(c.byID))
			}
			c.evictLocked(lru)
		}
		id := rand.Int64()
		for id == 0 || c.byID[id] != nil {
			id = rand.Int64()
		}
		s := &fetchSession{id: id, follower: m.GetFollowerId(), answer: c.errorAnswer, busy: true, epoch: 1, lastUsed: now,
			parts: map[sessionKey]*sessionPart{}, wake: make(chan struct{}, 1), dirty: map[Replica]struct{}{}}
		c.byID[id] = s
		return s, nil
	}
	s := c.byID[m.GetSessionId()]
	switch {
	case s == nil || s.follower != m.GetFollowerId():
		return nil, derr.New(derr.FetchSessionIDNotFound, "fetch session %d of broker %d is unknown here (evicted, or this broker restarted); start a new one", m.GetSessionId(), m.GetFollowerId())
	case s.busy:
		return nil, derr.New(derr.InvalidFetchSessionEpoch, "fetch session %d is serving another request; start a new one", s.id)
	case m.GetSessionEpoch() != s.epoch:
		return nil, derr.New(derr.InvalidFetchSessionEpoch, "fetch session %d at epoch %d, request epoch %d; start a new one", s.id, s.epoch, m.GetSessionEpoch())
	}
	s.epoch++
	s.busy, s.lastUsed = true, now
	return s, nil
}

func (c *Sessions) release(s *fetchSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.busy, s.lastUsed = false, time.Now()
}

// evictLocked drops s; its replicas stop signalling it once the request it
// may be serving ends (close waits for it).
func (c *Sessions) evictLocked(s *fetchSession) {
	delete(c.byID, s.id)
	go s.close()
}

func (s *fetchSession) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for k := range s.parts {
		s.remove(k)
	}
}

// rotation returns the session's partitions starting where the last
// request's budget stopped being shared, so that no partition waits
// behind the others for bytes.
func (s *fetchSession) rotation() []sessionKey {
	if len(s.order) != len(s.parts) {
		s.order = s.order[:0]
		for k := range s.parts {
			s.order = append(s.order, k)
		}
	}
	if len(s.order) == 0 {
		return nil
	}
	s.next = (s.next + 1) % len(s.order)
	return append(s.order[s.next:len(s.order):len(s.order)], s.order[:s.next]...)
}

// upsert adds partition e to the session or moves it to e's position. A
// partition this broker does not have is answered with an error and not
// added.
func (s *fetchSession) upsert(lookup func(string, int32) Replica, e *sluicev1.ReplicaFetchPosition) *sluicev1.ReplicaFetchAnswer {
	k := sessionKey{e.GetTopicId(), e.GetPartition()}
	p := lookup(k.topicID, k.partition)
	if p == nil {
		s.remove(k)
		return s.errorAnswer(k, derr.New(derr.UnknownTopicOrPartition, "partition %s/%d is not on this broker", k.topicID, k.partition))
	}
	sp := s.parts[k]
	if sp != nil && sp.p != p {
		s.remove(k) // the partition was reopened: watch the new replica
		sp = nil
	}
	if sp == nil {
		sp = &sessionPart{p: p, sentHW: -1, sentStart: -1, sentCopied: -1}
		s.parts[k] = sp
		s.order = s.order[:0]
		s.nparts.Add(1)
		p.Watch(s)
	}
	durable := e.GetDurableOffset()
	sp.pos = &sluicev1.FetchReplicaRequest{
		TopicId: k.topicID, Partition: k.partition, LeaderEpoch: e.GetLeaderEpoch(), FetchOffset: e.GetFetchOffset(),
		LastFetchedEpoch: e.GetLastFetchedEpoch(), DurableOffset: &durable,
	}
	return nil
}

func (s *fetchSession) remove(k sessionKey) {
	sp := s.parts[k]
	if sp == nil {
		return
	}
	delete(s.parts, k)
	s.order = s.order[:0]
	s.nparts.Add(-1)
	sp.p.Unwatch(s)
}

// serve counts request m as a fetch of partition k at its position and
// returns the answer when there is something new (records within budget,
// a changed HW, log start or copied end, a divergence, an error). more:
// the partition has records the budget did not cover.
func (s *fetchSession) serve(k sessionKey, m *sluicev1.FetchReplicasRequest, budget *int, per int) (*sluicev1.ReplicaFetchAnswer, bool) {
	sp := s.parts[k]
	sp.pos.FollowerId, sp.pos.FollowerBrokerEpoch = m.GetFollowerId(), m.GetFollowerBrokerEpoch()
	r, more, err := sp.p.Fetch(sp.pos, min(per, *budget))
	if err != nil {
		s.remove(k)
		return s.errorAnswer(k, err), false
	}
	news := len(r.GetBatches()) > 0 || r.GetDivergingEpoch() != nil || sp.pos.GetFetchOffset() < r.GetLogStartOffset() ||
		r.GetHighWatermark() != sp.sentHW || r.GetLogStartOffset() != sp.sentStart || r.GetCopiedEndOffset() != sp.sentCopied
	if !news {
		return nil, more
	}
	*budget -= len(r.GetBatches())
	sp.sentHW, sp.sentStart, sp.sentCopied = r.GetHighWatermark(), r.GetLogStartOffset(), r.GetCopiedEndOffset()
	return &sluicev1.ReplicaFetchAnswer{TopicId: k.topicID, Partition: k.partition, Fetch: r}, more
}

// errorAnswer is a partition's answer with err, as the protocol's code
// and message (Sessions.errorAnswer).
func (s *fetchSession) errorAnswer(k sessionKey, err error) *sluicev1.ReplicaFetchAnswer {
	var code uint32
	msg := err.Error()
	if s.answer != nil {
		code, msg = s.answer(err)
	}
	return &sluicev1.ReplicaFetchAnswer{TopicId: k.topicID, Partition: k.partition,
		Error: &sluicev1.ReplicaFetchError{Code: code, Message: msg}}
}
