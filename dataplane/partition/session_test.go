package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/connecterr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition/fetcher"
	"github.com/sluicemq/sluice/dataplane/partition/fetchsession"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// sessionCluster is broker 1 leading partitions 0..n-1 of topic-s and
// broker 2 following all of them, its fetcher running with the code
// brokers run; the ReplicaService between them calls broker 1's Sessions
// in process and records every request.
type sessionCluster struct {
	t              *testing.T
	leader, follow *Host
	leads, follows []*Replica
	sessions       atomic.Pointer[fetchsession.Sessions]
	cfg            TopicConfig
	stopFollower   context.CancelFunc

	// legacyLeader: broker 1 predates fetch sessions (FetchReplicas is
	// Unimplemented, FetchReplica serves).
	legacyLeader atomic.Bool
	byPart       map[int32]*Replica
	lookup       func(topicID string, partition int32) *Replica // broker 1's replicas

	mu       sync.Mutex
	requests []*sluicev1.FetchReplicasRequest
	refused  []connect.Code
	legacy   int             // FetchReplica calls
	isr      map[int32]int32 // partition → ISR size the controller holds
	alters   int
}

func newSessionCluster(t *testing.T, n int, lagTimeMax time.Duration, leaderHas func(partition int32) bool, opts ...func(*sessionCluster)) *sessionCluster {
	t.Helper()
	c := &sessionCluster{t: t, cfg: TopicConfig{MinISR: 1}, isr: map[int32]int32{}}
	for _, o := range opts {
		o(c)
	}
	c.leader, c.follow = newTestHost(t), newTestHost(t)
	c.follow.ID = 2
	c.leader.ReplicaLagTimeMax = lagTimeMax
	c.leader.AlterPartition = alterVia(c.alterPartition)
	c.follow.ReplicaClient = func(leader int32) fetcher.LeaderClient {
		require.EqualValues(t, 1, leader)
		return leaderVia{sessionClient{c: c}}
	}
	byPart := map[int32]*Replica{}
	c.byPart = byPart
	c.lookup = func(topicID string, partition int32) *Replica {
		if topicID != "topic-s" || !leaderHas(partition) {
			return nil
		}
		return byPart[partition]
	}
	c.sessions.Store(NewSessions(c.lookup, fetchsession.Config{}))
	ctx, cancel := context.WithCancel(context.Background())
	fctx, stopFollower := context.WithCancel(ctx)
	c.stopFollower = stopFollower
	pm := Assignment{Replicas: []int32{1, 2}, Leader: 1, ISR: []int32{1, 2}}
	for i := range int32(n) {
		l := c.open(c.leader, i)
		byPart[i] = l
		l.Update(ctx, pm, c.cfg)
		c.leads = append(c.leads, l)
	}
	for i := range int32(n) {
		f := c.open(c.follow, i)
		f.Update(fctx, pm, c.cfg)
		c.follows = append(c.follows, f)
	}
	t.Cleanup(func() {
		cancel()
		for _, p := range append(slices.Clone(c.leads), c.follows...) {
			p.Stop()
		}
		testenv.Wait(t, 10*time.Second, "the fetcher stopped", func() error {
			if n := c.follow.Fetchers(); n != 0 {
				return fmt.Errorf("%d fetchers", n)
			}
			return nil
		})
		for _, p := range append(slices.Clone(c.leads), c.follows...) {
			_ = p.log.Close()
		}
	})
	return c
}

func (c *sessionCluster) open(h *Host, partition int32) *Replica {
	p, err := Open(h, Spec{TenantID: "t1", TopicID: "topic-s", Partition: partition, Dir: c.t.TempDir(), Config: c.cfg})
	require.NoError(c.t, err)
	return p
}

// alterPartition is a controller that accepts every ISR change.
func (c *sessionCluster) alterPartition(_ context.Context, req *connect.Request[sluicev1.AlterPartitionRequest]) (*connect.Response[sluicev1.AlterPartitionResponse], error) {
	r := req.Msg
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alters++
	c.isr[r.GetPartition()] = int32(len(r.GetNewIsr()))
	return connect.NewResponse(&sluicev1.AlterPartitionResponse{Partition: &sluicev1.PartitionAssignment{
		TopicId: r.GetTopicId(), Partition: r.GetPartition(), Replicas: []int32{1, 2}, Leader: 1,
		LeaderEpoch: r.GetLeaderEpoch(), Isr: r.GetNewIsr(), PartitionEpoch: r.GetPartitionEpoch() + 1,
	}}), nil
}

// sessionClient serves the replication calls; the rest of the interface
// (embedded, nil) is not in these tests and would panic if called.
type sessionClient struct {
	sluicev1connect.ReplicaServiceClient
	c *sessionCluster
}

func (s sessionClient) FetchReplicas(ctx context.Context, req *connect.Request[sluicev1.FetchReplicasRequest]) (*connect.Response[sluicev1.FetchReplicasResponse], error) {
	c := s.c
	if c.legacyLeader.Load() {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("sluice.v1.ReplicaService.FetchReplicas is not implemented"))
	}
	res, err := c.sessions.Load().Fetch(ctx, req.Msg)
	c.mu.Lock()
	c.requests = append(c.requests, req.Msg)
	if err != nil {
		c.refused = append(c.refused, codeOf(err))
	}
	c.mu.Unlock()
	if err != nil {
		return nil, connecterr.ToConnect(err) // as the leader's handler answers
	}
	return connect.NewResponse(res), nil
}

func (s sessionClient) FetchReplica(ctx context.Context, req *connect.Request[sluicev1.FetchReplicaRequest]) (*connect.Response[sluicev1.FetchReplicaResponse], error) {
	s.c.mu.Lock()
	s.c.legacy++
	s.c.mu.Unlock()
	if !s.c.legacyLeader.Load() {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("not in this test"))
	}
	res, err := s.c.byPart[req.Msg.GetPartition()].FetchReplica(ctx, req.Msg)
	if err != nil {
		return nil, connecterr.ToConnect(err)
	}
	return connect.NewResponse(res), nil
}

// produce appends one record to each leader in parts, acks=1.
func (c *sessionCluster) produce(parts ...int) {
	c.t.Helper()
	for _, i := range parts {
		_, err := c.leads[i].Produce(context.Background(), []log.ValidBatch{plainBatch(c.t)}, sluicev1.Acks_ACKS_LEADER, time.Second, nil)
		require.NoError(c.t, err)
	}
}

// plainBatch is a one-record batch of a producer without idempotence.
func plainBatch(t *testing.T) log.ValidBatch {
	t.Helper()
	b, err := log.EncodeLeaderBatch(nil, record.BatchHeader{ProducerID: -1}, []record.Record{{Value: []byte("v")}})
	require.NoError(t, err)
	return b
}

// waitCopied waits until the followers of parts have the leader's log
// and its HW.
func (c *sessionCluster) waitCopied(parts ...int) {
	c.t.Helper()
	testenv.Wait(c.t, 10*time.Second, "followers caught up", func() error {
		for _, i := range parts {
			l, f := c.leads[i], c.follows[i]
			if leo, hw := f.log.LEO(), f.HighWatermark(); leo != l.log.LEO() || hw != l.HighWatermark() || hw != leo {
				return fmt.Errorf("partition %d: follower LEO %d HW %d, leader LEO %d HW %d", i, leo, hw, l.log.LEO(), l.HighWatermark())
			}
		}
		return nil
	})
}

func (c *sessionCluster) requestCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.requests)
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestPartitionFetchSessionCarriesEveryPartition: a follower broker
// fetches its 60 partitions of one leader with one fetcher and one
// session, so the requests an idle cluster makes do not grow with the
// partitions (issue 15: one long-poll per partition, ~2 calls/s each).
func TestPartitionFetchSessionCarriesEveryPartition(t *testing.T) {
	t.Parallel()
	const n = 60
	c := newSessionCluster(t, n, 30*time.Second, func(int32) bool { return true })
	c.produce(all(n)...)
	c.waitCopied(all(n)...)
	require.Equal(t, 1, c.follow.Fetchers())
	require.Equal(t, fetchsession.Stats{Sessions: 1, Partitions: n}, c.sessions.Load().Stats())

	// An idle second: about two long-polls, whatever the partitions.
	before, start := c.requestCount(), time.Now()
	testenv.Consistently(t, time.Second, "idle", func() error { return nil })
	calls, took := c.requestCount()-before, time.Since(start)
	require.LessOrEqual(t, calls, int(took/(fetcher.Wait/2))+1, "requests in an idle %v with %d partitions", took, n)

	// acks=all completes through the session.
	for _, i := range []int{0, n / 2, n - 1} {
		_, err := c.leads[i].Produce(context.Background(), []log.ValidBatch{plainBatch(t)}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
		require.NoError(t, err)
	}
	c.waitCopied(0, n/2, n-1)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Zero(t, c.legacy, "no per-partition FetchReplica")
}

// TestPartitionFetchSessionKeepsIdleFollowersInTheISR: once caught up, an
// idle follower's requests list none of its partitions, and every request
// still counts as a fetch of each of them: the ISR stays whole for several
// replica.lag.time.max, and shrinks once the follower broker stops
// fetching (issue 15 items 1 and 4).
func TestPartitionFetchSessionKeepsIdleFollowersInTheISR(t *testing.T) {
	t.Parallel()
	const n = 8
	c := newSessionCluster(t, n, time.Second, func(int32) bool { return true })
	c.produce(all(n)...)
	c.waitCopied(all(n)...)
	tick := func() {
		for _, l := range c.leads {
			l.MaybeAlterISR(context.Background())
		}
	}
	before := c.requestCount()
	testenv.Consistently(t, 3*time.Second, "the idle follower stays in the ISR", func() error {
		tick()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.alters > 0 {
			return fmt.Errorf("%d ISR changes proposed: %v", c.alters, c.isr)
		}
		return nil
	})
	c.mu.Lock()
	idle := c.requests[before:]
	c.mu.Unlock()
	require.GreaterOrEqual(t, len(idle), 3)
	for _, r := range idle {
		require.Empty(t, r.GetPartitions(), "an idle request lists no partition")
		require.NotZero(t, r.GetSessionId())
	}

	c.stopFollower() // the follower broker dies
	testenv.Wait(t, 10*time.Second, "every partition's ISR shrinks", func() error {
		tick()
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := range int32(n) {
			if c.isr[i] != 1 {
				return fmt.Errorf("partition %d: ISR size %d at the controller", i, c.isr[i])
			}
		}
		return nil
	})
}

// TestPartitionFetchSessionPartitionErrorDoesNotStallOthers: a partition
// the leader cannot serve (here: not on it) is answered with its error,
// leaves the session and is retried alone; the others replicate on.
func TestPartitionFetchSessionPartitionErrorDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	const n = 4
	c := newSessionCluster(t, n, 30*time.Second, func(p int32) bool { return p != 0 })
	for range 3 {
		c.produce(1, 2, 3)
		c.waitCopied(1, 2, 3)
	}
	require.Zero(t, c.follows[0].log.LEO())
	for _, i := range []int{1, 2, 3} {
		require.EqualValues(t, 3, c.follows[i].log.LEO())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	retried := 0
	for _, r := range c.requests {
		for _, e := range r.GetPartitions() {
			if e.GetPartition() == 0 {
				retried++
			}
		}
	}
	require.Greater(t, retried, 1, "partition 0 is retried")
	require.Empty(t, c.refused, "the session itself never failed")
}

// TestPartitionFetchSessionLostSessionRecovers: a leader that lost its
// sessions (a restart) refuses the follower's next request as an unknown
// session; the follower starts a new one with a full request and goes on.
func TestPartitionFetchSessionLostSessionRecovers(t *testing.T) {
	t.Parallel()
	const n = 5
	c := newSessionCluster(t, n, 30*time.Second, func(int32) bool { return true })
	c.produce(all(n)...)
	c.waitCopied(all(n)...)
	// The restarted leader's sessions are new ones; the old sessions
	// serve no request any more (they only go on watching the replicas).
	c.sessions.Store(NewSessions(c.lookup, fetchsession.Config{}))
	c.produce(all(n)...)
	c.waitCopied(all(n)...)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Contains(t, c.refused, connect.CodeNotFound)
	last := c.requests[len(c.requests)-1]
	require.NotZero(t, last.GetSessionId(), "a new session")
	require.Equal(t, fetchsession.Stats{Sessions: 1, Partitions: n}, c.sessions.Load().Stats())
}

// TestPartitionFetchSessionFallsBackToFetchReplica: a leader that predates
// fetch sessions answers FetchReplicas Unimplemented; the follower then
// fetches its partitions one by one with FetchReplica (a rolling upgrade)
// and replicates on, acks=all included.
func TestPartitionFetchSessionFallsBackToFetchReplica(t *testing.T) {
	t.Parallel()
	const n = 6
	c := newSessionCluster(t, n, 30*time.Second, func(int32) bool { return true }, func(c *sessionCluster) { c.legacyLeader.Store(true) })
	c.produce(all(n)...)
	c.waitCopied(all(n)...)
	_, err := c.leads[2].Produce(context.Background(), []log.ValidBatch{plainBatch(t)}, sluicev1.Acks_ACKS_ALL, 10*time.Second, nil)
	require.NoError(t, err)
	c.waitCopied(2)
	c.mu.Lock()
	defer c.mu.Unlock()
	require.GreaterOrEqual(t, c.legacy, n)
}
