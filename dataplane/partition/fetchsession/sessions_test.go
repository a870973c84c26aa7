package fetchsession

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/derr"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// These tests run Sessions over fake replicas: the sessions' own rules
// (epochs, eviction, what an answer lists, the long poll, a partition's
// error). dataplane/partition's session tests run them between real
// replicas and a real follower's fetcher.

// fakeReplica is a leader's replica: an LEO and HW, the fetches it served,
// and its watchers, signalled by change.
type fakeReplica struct {
	topicID   string
	partition int32

	mu       sync.Mutex
	leo, hw  int64
	err      error // the next fetches' refusal
	fetches  []*sluicev1.FetchReplicaRequest
	watchers map[Watcher]struct{}
}

func newFake(topicID string, partition int32) *fakeReplica {
	return &fakeReplica{topicID: topicID, partition: partition, watchers: map[Watcher]struct{}{}}
}

func (r *fakeReplica) TopicID() string  { return r.topicID }
func (r *fakeReplica) Partition() int32 { return r.partition }

// Fetch answers a record ("x", one byte) when pos is behind the LEO, and
// the HW.
func (r *fakeReplica) Fetch(pos *sluicev1.FetchReplicaRequest, maxBytes int) (*sluicev1.FetchReplicaResponse, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fetches = append(r.fetches, proto.Clone(pos).(*sluicev1.FetchReplicaRequest))
	if r.err != nil {
		return nil, false, r.err
	}
	res := &sluicev1.FetchReplicaResponse{HighWatermark: r.hw}
	if pos.GetFetchOffset() < r.leo {
		if maxBytes <= 0 {
			return res, true, nil
		}
		res.Batches = []byte("x")
	}
	return res, false, nil
}

func (r *fakeReplica) Watch(w Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchers[w] = struct{}{}
}

func (r *fakeReplica) Unwatch(w Watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.watchers, w)
}

// change applies f under the replica's lock and signals the watchers, as
// a replica's notify path does.
func (r *fakeReplica) change(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
	for w := range r.watchers {
		w.Changed(r)
	}
}

func (r *fakeReplica) watched() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.watchers)
}

func (r *fakeReplica) fetchCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fetches)
}

// lookupOf finds the fakes by partition of topic "t".
func lookupOf(rs ...*fakeReplica) func(string, int32) Replica {
	return func(topicID string, partition int32) Replica {
		for _, r := range rs {
			if r.topicID == topicID && r.partition == partition {
				return r
			}
		}
		return nil
	}
}

func pos(r *fakeReplica, offset int64) *sluicev1.ReplicaFetchPosition {
	return &sluicev1.ReplicaFetchPosition{TopicId: r.topicID, Partition: r.partition, FetchOffset: offset}
}

func partitionsOf(res *sluicev1.FetchReplicasResponse) []int32 {
	var out []int32
	for _, a := range res.GetPartitions() {
		out = append(out, a.GetPartition())
	}
	return out
}

// TestFetchSessionIncremental: a full request adds every partition and
// answers each once; a later request lists nothing, counts as a fetch of
// every partition at its position, and answers only what changed: nothing
// after its wait, or the partition whose replica signalled.
func TestFetchSessionIncremental(t *testing.T) {
	t.Parallel()
	a, b := newFake("t", 0), newFake("t", 1)
	a.leo, a.hw, b.leo, b.hw = 3, 3, 3, 3
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"kind"})
	s := New(Config{Lookup: lookupOf(a, b), Metrics: &Metrics{Requests: requests}})
	ctx := context.Background()

	res, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, FollowerBrokerEpoch: 5,
		Partitions: []*sluicev1.ReplicaFetchPosition{pos(a, 3), pos(b, 3)}})
	require.NoError(t, err)
	require.NotZero(t, res.GetSessionId())
	require.ElementsMatch(t, []int32{0, 1}, partitionsOf(res), "a partition added is answered once")
	require.Equal(t, Stats{Sessions: 1, Partitions: 2}, s.Stats())
	require.Equal(t, 1, a.watched())
	id := res.GetSessionId()
	f := a.fetches[0]
	require.EqualValues(t, 2, f.GetFollowerId())
	require.EqualValues(t, 5, f.GetFollowerBrokerEpoch())
	require.EqualValues(t, 3, f.GetFetchOffset())

	start := time.Now()
	res, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 1, MaxWaitMs: 50})
	require.NoError(t, err)
	require.Empty(t, res.GetPartitions(), "nothing changed")
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "it waited")
	require.Equal(t, 2, a.fetchCount(), "every request counts as a fetch of every partition")
	require.Equal(t, 2, b.fetchCount())
	require.EqualValues(t, 3, a.fetches[1].GetFetchOffset(), "at the position the session holds")

	done := make(chan *sluicev1.FetchReplicasResponse, 1)
	go func() {
		res, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 2, MaxWaitMs: 60_000})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	b.change(func() { b.leo = 4 })
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll was not woken by the replica's change")
	}
	require.Equal(t, []int32{1}, partitionsOf(res), "only the partition that changed")
	require.Equal(t, []byte("x"), res.GetPartitions()[0].GetFetch().GetBatches())

	// A request that moves a partition lists it; its position is kept.
	res, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 3,
		Partitions: []*sluicev1.ReplicaFetchPosition{pos(b, 4)}})
	require.NoError(t, err)
	require.Empty(t, res.GetPartitions(), "caught up, nothing new")
	require.EqualValues(t, 4, b.fetches[len(b.fetches)-1].GetFetchOffset())

	// Removing a partition ends its watch.
	_, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 4,
		Removed: []*sluicev1.ReplicaPartition{{TopicId: "t", Partition: 0}}})
	require.NoError(t, err)
	require.Zero(t, a.watched())
	require.Equal(t, Stats{Sessions: 1, Partitions: 1}, s.Stats())

	require.InDelta(t, 1, testutil.ToFloat64(requests.WithLabelValues("full")), 0)
	require.InDelta(t, 4, testutil.ToFloat64(requests.WithLabelValues("incremental")), 0)
}

// TestFetchSessionRefusals: a request out of step with its session is
// refused with the kind that makes the follower start a new session; a
// follower that starts a new one drops its old one.
func TestFetchSessionRefusals(t *testing.T) {
	t.Parallel()
	a := newFake("t", 0)
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests"}, []string{"kind"})
	s := New(Config{Lookup: lookupOf(a), Metrics: &Metrics{Requests: requests}})
	ctx := context.Background()
	full := func(follower int32) int64 {
		t.Helper()
		res, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: follower, Partitions: []*sluicev1.ReplicaFetchPosition{pos(a, 0)}})
		require.NoError(t, err)
		return res.GetSessionId()
	}
	id := full(2)

	for name, c := range map[string]struct {
		req  *sluicev1.FetchReplicasRequest
		kind derr.Kind
	}{
		"wrong epoch":             {&sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 7}, derr.InvalidFetchSessionEpoch},
		"unknown session":         {&sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id + 1, SessionEpoch: 1}, derr.FetchSessionIDNotFound},
		"another follower's":      {&sluicev1.FetchReplicasRequest{FollowerId: 3, SessionId: id, SessionEpoch: 1}, derr.FetchSessionIDNotFound},
		"an epoch and no session": {&sluicev1.FetchReplicasRequest{FollowerId: 2, SessionEpoch: 1}, derr.InvalidRequest},
	} {
		_, err := s.Fetch(ctx, c.req)
		require.ErrorIs(t, err, c.kind, name)
	}
	require.InDelta(t, 4, testutil.ToFloat64(requests.WithLabelValues("refused")), 0)

	// The refusals left the session as it was.
	_, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 1})
	require.NoError(t, err)

	// The follower starts over: its old session is gone, and its replicas
	// are no longer watched by it.
	id2 := full(2)
	require.NotEqual(t, id, id2)
	_, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: id, SessionEpoch: 2})
	require.ErrorIs(t, err, derr.FetchSessionIDNotFound)
	require.Equal(t, Stats{Sessions: 1, Partitions: 1}, s.Stats())
	testenv.Wait(t, 10*time.Second, "the old session stops watching", func() error {
		if n := a.watched(); n != 1 {
			return fmt.Errorf("%d watchers", n)
		}
		return nil
	})
}

// TestFetchSessionEvictsLeastRecentlyUsed: with MaxSessions taken, a new
// session evicts the least recently used idle one, whose follower is then
// told to start over; with every session busy, a new one is refused.
func TestFetchSessionEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	a := newFake("t", 0)
	s := New(Config{Lookup: lookupOf(a), MaxSessions: 2})
	ctx := context.Background()
	ids := map[int32]int64{}
	for _, follower := range []int32{2, 3} {
		res, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: follower, Partitions: []*sluicev1.ReplicaFetchPosition{pos(a, 0)}})
		require.NoError(t, err)
		ids[follower] = res.GetSessionId()
	}
	// Follower 2's session is used again: 3's is the least recently used.
	_, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: ids[2], SessionEpoch: 1})
	require.NoError(t, err)
	_, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 4})
	require.NoError(t, err)
	_, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 3, SessionId: ids[3], SessionEpoch: 1})
	require.ErrorIs(t, err, derr.FetchSessionIDNotFound, "evicted")
	_, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: ids[2], SessionEpoch: 2})
	require.NoError(t, err, "kept")
	require.Equal(t, 2, s.Stats().Sessions)

	// Both sessions busy (long polls): a third follower is refused.
	c := newFake("t", 0)
	busy := New(Config{Lookup: lookupOf(c), MaxSessions: 2})
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, follower := range []int32{2, 3} {
		res, err := busy.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: follower, Partitions: []*sluicev1.ReplicaFetchPosition{pos(c, 0)}})
		require.NoError(t, err)
		wg.Go(func() {
			_, err := busy.Fetch(pctx, &sluicev1.FetchReplicasRequest{FollowerId: follower, SessionId: res.GetSessionId(), SessionEpoch: 1, MaxWaitMs: 60_000})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("follower %d's long poll: %v", follower, err)
			}
		})
	}
	// Each poll served c once before it waits: both sessions are busy.
	testenv.Wait(t, 10*time.Second, "both polls wait", func() error {
		if n := c.fetchCount(); n != 4 {
			return fmt.Errorf("%d fetches", n)
		}
		return nil
	})
	_, err = busy.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 4})
	require.ErrorIs(t, err, derr.ResourceExhausted)
	cancel()
	wg.Wait()
}

// TestFetchSessionPartitionError: a partition the leader does not have,
// or whose replica refuses the fetch, is answered with its error (in the
// protocol's terms, ErrorAnswer) and leaves the session; the others stay.
func TestFetchSessionPartitionError(t *testing.T) {
	t.Parallel()
	a, b := newFake("t", 0), newFake("t", 1)
	b.err = derr.New(derr.FencedLeaderEpoch, "fenced")
	s := New(Config{Lookup: lookupOf(a, b), ErrorAnswer: func(err error) (uint32, string) {
		if errors.Is(err, derr.FencedLeaderEpoch) {
			return 9, "fenced here"
		}
		return 5, err.Error()
	}})
	res, err := s.Fetch(context.Background(), &sluicev1.FetchReplicasRequest{FollowerId: 2, Partitions: []*sluicev1.ReplicaFetchPosition{
		pos(a, 0), pos(b, 0), {TopicId: "t", Partition: 7},
	}})
	require.NoError(t, err, "a partition's error is not the session's")
	got := map[int32]*sluicev1.ReplicaFetchError{}
	for _, p := range res.GetPartitions() {
		got[p.GetPartition()] = p.GetError()
	}
	require.Nil(t, got[0])
	require.Equal(t, &sluicev1.ReplicaFetchError{Code: 9, Message: "fenced here"}, got[1])
	require.EqualValues(t, 5, got[7].GetCode())
	require.Contains(t, got[7].GetMessage(), "not on this broker")
	require.Equal(t, Stats{Sessions: 1, Partitions: 1}, s.Stats())
	require.Zero(t, b.watched(), "a partition that failed leaves the session")
	require.Equal(t, 1, a.watched())
}

// TestFetchSessionSharesTheBudget: a request's byte budget is shared
// across its partitions; a partition the budget did not reach makes the
// answer come at once (more), and the next request starts the rotation
// elsewhere, so every partition gets its turn.
func TestFetchSessionSharesTheBudget(t *testing.T) {
	t.Parallel()
	a, b := newFake("t", 0), newFake("t", 1)
	a.leo, b.leo = 5, 5
	s := New(Config{Lookup: lookupOf(a, b)})
	ctx := context.Background()
	res, err := s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, MaxBytes: 1, MaxWaitMs: 60_000,
		Partitions: []*sluicev1.ReplicaFetchPosition{pos(a, 0), pos(b, 0)}})
	require.NoError(t, err)
	served := map[int32]bool{}
	for _, p := range res.GetPartitions() {
		served[p.GetPartition()] = len(p.GetFetch().GetBatches()) > 0
	}
	require.Len(t, served, 2, "both answered once")
	require.True(t, served[0] != served[1], "one byte of budget: records for one partition only, %v", served)
	first := int32(0)
	if served[1] {
		first = 1
	}

	// The next request, with records left for both, does not wait (more)
	// and starts where the last one stopped sharing.
	start := time.Now()
	res, err = s.Fetch(ctx, &sluicev1.FetchReplicasRequest{FollowerId: 2, SessionId: res.GetSessionId(), SessionEpoch: 1, MaxBytes: 1, MaxWaitMs: 60_000})
	require.NoError(t, err)
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, []int32{1 - first}, partitionsOf(res), "the other partition's turn")
}
