package fetcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// These tests run fetchers over fake replicas and leaders: the session
// protocol of the follower's side (what a request lists, when a session
// starts over, a partition's backoff) and the goroutine's life.
// dataplane/partition's session and model tests run them between real
// replicas and a real leader's sessions.

// fakeReplica follows at offset, which each answer's records (one byte
// each here) move on.
type fakeReplica struct {
	topicID   string
	partition int32
	l         *log.Log

	mu      sync.Mutex
	offset  int64
	applied int
}

func newFake(t *testing.T, partition int32) *fakeReplica {
	t.Helper()
	l, err := log.Open(t.TempDir(), log.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return &fakeReplica{topicID: "t", partition: partition, l: l}
}

func (r *fakeReplica) TopicID() string  { return r.topicID }
func (r *fakeReplica) Partition() int32 { return r.partition }
func (r *fakeReplica) Log() *log.Log    { return r.l }

func (r *fakeReplica) Next(fol *replica.Follower, brokerEpoch int64) (replica.FetchRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return replica.FetchRequest{Replica: 2, BrokerEpoch: brokerEpoch, LeaderEpoch: fol.LeaderEpoch(), FetchOffset: r.offset, Durable: r.offset}, true
}

func (r *fakeReplica) Apply(fol *replica.Follower, q replica.FetchRequest, res *sluicev1.FetchReplicaResponse) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied++
	r.offset = q.FetchOffset + int64(len(res.GetBatches()))
	return nil
}

func newFollower(t *testing.T) *replica.Follower {
	t.Helper()
	fol, err := replica.NewFollower(replica.FollowerParams{Self: 2, BrokerEpoch: 5, Leader: 1, LeaderEpoch: 3})
	require.NoError(t, err)
	return fol
}

func testConfig() Config {
	return Config{ID: 2, BrokerEpoch: func() int64 { return 5 }, Logger: slog.New(slog.DiscardHandler),
		Flush: log.FlushAlways, FailStop: func(string, int32, error) {}}
}

// leader records a round's request and answers it with answer's result.
type leader struct {
	reqs   []*sluicev1.FetchReplicasRequest
	answer func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error)
}

func (l *leader) send(_ context.Context, req *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	l.reqs = append(l.reqs, req)
	return l.answer(req)
}

func listed(req *sluicev1.FetchReplicasRequest) map[int32]int64 {
	out := map[int32]int64{}
	for _, p := range req.GetPartitions() {
		out[p.GetPartition()] = p.GetFetchOffset()
	}
	return out
}

func records(partition int32, n int) *sluicev1.ReplicaFetchAnswer {
	return &sluicev1.ReplicaFetchAnswer{TopicId: "t", Partition: partition,
		Fetch: &sluicev1.FetchReplicaResponse{Batches: make([]byte, n)}}
}

// TestFetcherRoundSession: a fetcher's first request starts a session
// listing every partition; the next ones carry the session's id and epoch
// and list only the partitions whose position moved or that left it; a
// partition answered with an error leaves the session and comes back on
// its own; a failed request makes the next one start a new session.
func TestFetcherRoundSession(t *testing.T) {
	t.Parallel()
	dead, cancel := context.WithCancel(context.Background())
	cancel() // no goroutine: the test runs the rounds
	fs := New(testConfig())
	a, b := newFake(t, 0), newFake(t, 1)
	fol := newFollower(t)
	fs.Follow(dead, a, fol)
	fs.Follow(dead, b, fol)
	require.Equal(t, 1, fs.Len(), "one fetcher per leader")
	f := fs.Of(1)
	require.NotNil(t, f)
	require.Nil(t, fs.Of(2))
	ctx := context.Background()

	l := &leader{answer: func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		return &sluicev1.FetchReplicasResponse{SessionId: 7, Partitions: []*sluicev1.ReplicaFetchAnswer{records(0, 2)}}, nil
	}}
	r := f.Round(ctx, l.send, time.Second, 100, 10)
	require.NoError(t, r.Err)
	require.NoError(t, r.ApplyErr)
	req := l.reqs[0]
	require.Zero(t, req.GetSessionId(), "a new session")
	require.Zero(t, req.GetSessionEpoch())
	require.EqualValues(t, 2, req.GetFollowerId())
	require.EqualValues(t, 5, req.GetFollowerBrokerEpoch())
	require.EqualValues(t, 1000, req.GetMaxWaitMs())
	require.EqualValues(t, 100, req.GetMaxBytes())
	require.EqualValues(t, 10, req.GetPartitionMaxBytes())
	require.Equal(t, map[int32]int64{0: 0, 1: 0}, listed(req))
	require.EqualValues(t, 2, a.offset, "the answer applied")

	// Only a moved: b's position is the one the leader holds.
	l.answer = func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		return &sluicev1.FetchReplicasResponse{SessionId: 7, Partitions: []*sluicev1.ReplicaFetchAnswer{
			{TopicId: "t", Partition: 1, Error: &sluicev1.ReplicaFetchError{Code: 9, Message: "fenced"}},
		}}, nil
	}
	r = f.Round(ctx, l.send, time.Second, 100, 10)
	require.NoError(t, r.Err)
	req = l.reqs[1]
	require.EqualValues(t, 7, req.GetSessionId())
	require.EqualValues(t, 1, req.GetSessionEpoch())
	require.Equal(t, map[int32]int64{0: 2}, listed(req))

	// b was dropped by the leader: it comes back, listed with its
	// position, once its backoff passed; nothing else is listed.
	l.answer = func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		return &sluicev1.FetchReplicasResponse{SessionId: 7}, nil
	}
	testenv.Wait(t, 10*time.Second, "b is retried", func() error {
		r := f.Round(ctx, l.send, 0, 100, 10)
		req := l.reqs[len(l.reqs)-1]
		require.NoError(t, r.Err)
		require.Empty(t, req.GetRemoved(), "b left the session with its error")
		if got := listed(req); len(got) > 0 {
			require.Equal(t, map[int32]int64{1: 0}, got)
			return nil
		}
		return errors.New("b not listed yet")
	})

	// a leaves: the next request removes it.
	fs.Unfollow(a, 1)
	n := len(l.reqs)
	require.NoError(t, f.Round(ctx, l.send, 0, 100, 10).Err)
	req = l.reqs[n]
	require.Equal(t, []*sluicev1.ReplicaPartition{{TopicId: "t", Partition: 0}}, req.GetRemoved())
	require.Empty(t, req.GetPartitions())

	// A failed request: the next one starts a new session with every
	// partition.
	l.answer = func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		return nil, derr.New(derr.FetchSessionIDNotFound, "unknown session")
	}
	require.ErrorIs(t, f.Round(ctx, l.send, 0, 100, 10).Err, derr.FetchSessionIDNotFound)
	l.answer = func(*sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
		return &sluicev1.FetchReplicasResponse{SessionId: 8}, nil
	}
	n = len(l.reqs)
	require.NoError(t, f.Round(ctx, l.send, 0, 100, 10).Err)
	req = l.reqs[n]
	require.Zero(t, req.GetSessionId())
	require.Equal(t, map[int32]int64{1: 0}, listed(req))
	require.Empty(t, req.GetRemoved())
}

// legacyLeader predates fetch sessions: FetchReplicas is unsupported,
// FetchReplica answers nothing new.
type legacyLeader struct {
	mu    sync.Mutex
	parts []int32 // the partitions of the FetchReplica calls
}

func (l *legacyLeader) FetchReplicas(context.Context, *sluicev1.FetchReplicasRequest) (*sluicev1.FetchReplicasResponse, error) {
	return nil, derr.New(derr.UnsupportedVersion, "FetchReplicas is not implemented")
}

func (l *legacyLeader) FetchReplica(_ context.Context, req *sluicev1.FetchReplicaRequest) (*sluicev1.FetchReplicaResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.parts = append(l.parts, req.GetPartition())
	return &sluicev1.FetchReplicaResponse{}, nil
}

// TestFetcherGoroutine: the first follower of a leader starts its
// fetcher's goroutine, which fetches with the leader's client (here one
// that predates sessions: partition by partition), and which ends, with
// the fetcher, once no replica follows that leader.
func TestFetcherGoroutine(t *testing.T) {
	t.Parallel()
	ll := &legacyLeader{}
	c := testConfig()
	c.Client = func(leader int32) LeaderClient {
		if leader != 1 {
			t.Errorf("a client of broker %d", leader)
		}
		return ll
	}
	fs := New(c)
	a := newFake(t, 0)
	fs.Follow(context.Background(), a, newFollower(t))
	testenv.Wait(t, 10*time.Second, "the partition is fetched with FetchReplica", func() error {
		ll.mu.Lock()
		defer ll.mu.Unlock()
		if !slices.Contains(ll.parts, 0) {
			return fmt.Errorf("FetchReplica calls %v", ll.parts)
		}
		return nil
	})
	require.Equal(t, 1, fs.Len())
	fs.Unfollow(a, 1)
	testenv.Wait(t, 10*time.Second, "the fetcher ends", func() error {
		if n := fs.Len(); n != 0 {
			return fmt.Errorf("%d fetchers", n)
		}
		return nil
	})
}
