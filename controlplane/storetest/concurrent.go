package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// RunConcurrent runs the contention part of the contract: many goroutines on
// one store at once. newStore is as for Run.
func RunConcurrent(t *testing.T, newStore func(t *testing.T) store.Store) {
	run(t, newStore, concurrentTests)
}

var concurrentTests = []test{
	{name: "ConcurrentTopicLimit", fn: testConcurrentTopicLimit},
	{name: "ConcurrentPartitionLimit", fn: testConcurrentPartitionLimit},
	{name: "ConcurrentPartitionGrowthLimit", fn: testConcurrentPartitionGrowthLimit},
	{name: "ConcurrentPartitionGrowthSameTopic", fn: testConcurrentPartitionGrowthSameTopic},
	{name: "ConcurrentPartitionLoad", own: true, fn: testConcurrentPartitionLoad},
	{name: "ConcurrentTopicLimitPerTenant", fn: testConcurrentTopicLimitPerTenant},
	{name: "ConcurrentTopicSameName", fn: testConcurrentTopicSameName},
	{name: "ConcurrentTenantSameName", fn: testConcurrentTenantSameName},
	{name: "ConcurrentBrokerRegister", own: true, fn: testConcurrentBrokerRegister},
	{name: "ConcurrentBrokerHeartbeat", own: true, fn: testConcurrentBrokerHeartbeat},
	{name: "ConcurrentPartitionCASRounds", fn: testConcurrentPartitionCASRounds},
	{name: "ConcurrentPartitionCASFreeForAll", fn: testConcurrentPartitionCASFreeForAll},
	{name: "ConcurrentPartitionBatches", own: true, fn: testConcurrentPartitionBatches},
	{name: "ConcurrentTopicConfigUpdate", fn: testConcurrentTopicConfigUpdate},
	{name: "ConcurrentTenantUpdate", fn: testConcurrentTenantUpdate},
	{name: "ConcurrentControllerLease", own: true, fn: testConcurrentControllerLease},
	{name: "ConcurrentFencedTakeover", own: true, fn: testConcurrentFencedTakeover},
	{name: "ConcurrentRemoteSegmentSameBase", fn: testConcurrentRemoteSegmentSameBase},
	{name: "ConcurrentRemoteSegmentLeaderChange", fn: testConcurrentRemoteSegmentLeaderChange},
}

// testConcurrentTopicConfigUpdate: read-modify-write updates from many
// goroutines each add 1 to retention.ms; none may be lost.
func testConcurrentTopicConfigUpdate(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, ten.ID, "counter", 1)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			_, err := s.UpdateTopicConfig(t.Context(), ten.ID, "counter", time.Now(), func(cur store.Topic) (store.TopicConfig, error) {
				c := cur.Config
				c.RetentionMs++
				return c, nil
			})
			assert.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	got, err := s.GetTopic(t.Context(), ten.ID, "counter")
	require.NoError(t, err)
	require.Equal(t, tp.Config.RetentionMs+goroutines, got.Config.RetentionMs, "no update lost")
}

// testConcurrentTenantUpdate: concurrent read-modify-write of the
// overrides JSON (a counter) loses nothing.
func testConcurrentTenantUpdate(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			_, err := s.UpdateTenant(t.Context(), ten.ID, func(cur store.Tenant) (store.Tenant, error) {
				var o struct{ N int }
				if len(cur.Overrides) > 0 {
					if err := json.Unmarshal(cur.Overrides, &o); err != nil {
						return cur, err
					}
				}
				o.N++
				b, err := json.Marshal(o)
				cur.Overrides = b
				return cur, err
			})
			assert.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	got, err := s.GetTenant(t.Context(), ten.ID)
	require.NoError(t, err)
	var o struct{ N int }
	require.NoError(t, json.Unmarshal(got.Overrides, &o))
	require.Equal(t, goroutines, o.N, "no update lost")
}

// goroutines is how many callers contend in each test.
const goroutines = 50

// createConcurrently creates n topics of partsEach partitions in tenantID
// from n goroutines at once and returns their errors in order.
func createConcurrently(t *testing.T, s store.Store, tenantID, prefix string, n int, partsEach int32, limits store.CountLimits) []error {
	t.Helper()
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		tp, parts := newTopicValue(tenantID, topicName(prefix, i), partsEach)
		wg.Go(func() {
			<-start
			errs[i] = s.CreateTopic(t.Context(), tp, parts, limits)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// tally counts successes and limit errors on limit, failing on anything else.
func tally(t *testing.T, errs []error, limit string, want store.LimitError) (ok, limited int) {
	t.Helper()
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case isLimit(err, limit):
			limited++
			var le *store.LimitError
			require.ErrorAs(t, err, &le)
			require.Equal(t, want, *le, "a refused creation sees the full tenant")
		default:
			require.NoError(t, err)
		}
	}
	return ok, limited
}

func testConcurrentTopicLimit(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	limits := store.CountLimits{MaxTopics: 10}
	errs := createConcurrently(t, s, ten.ID, "t", goroutines, 1, limits)
	ok, limited := tally(t, errs, "topics", store.LimitError{Limit: "topics", Current: 10, Request: 1, Max: 10})
	require.Equal(t, 10, ok)
	require.Equal(t, goroutines-10, limited)

	list, err := s.ListTopics(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Len(t, list, 10)
	u, err := s.TenantUsage(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 10, Partitions: 10}, u)
}

func testConcurrentPartitionLimit(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	// 3 partitions each; 31 allowed → 10 topics fit, the 11th would need 33.
	limits := store.CountLimits{MaxTopics: 1000, MaxPartitions: 31}
	errs := createConcurrently(t, s, ten.ID, "p", goroutines, 3, limits)
	ok, limited := tally(t, errs, "partitions", store.LimitError{Limit: "partitions", Current: 30, Request: 3, Max: 31})
	require.Equal(t, 10, ok)
	require.Equal(t, goroutines-10, limited)

	list, err := s.ListTopics(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Len(t, list, 10)
	total := 0
	for _, tp := range list {
		parts, err := s.ListPartitions(t.Context(), tp.ID)
		require.NoError(t, err)
		require.Len(t, parts, 3)
		total += len(parts)
	}
	require.Equal(t, 30, total)
	u, err := s.TenantUsage(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 10, Partitions: 30}, u)
}

// testConcurrentTopicLimitPerTenant: tenants racing each other do not share a
// limit and do not block each other into failure.
func testConcurrentTopicLimitPerTenant(t *testing.T, s store.Store) {
	const tenants = 5
	limits := store.CountLimits{MaxTopics: 4}
	ids := make([]string, tenants)
	for i := range ids {
		ten, _ := createTenant(t, s)
		ids[i] = ten.ID
	}
	errs := make([][]error, tenants)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { errs[i] = createConcurrently(t, s, id, "x", 10, 2, limits) })
	}
	wg.Wait()
	for i, id := range ids {
		ok, limited := tally(t, errs[i], "topics", store.LimitError{Limit: "topics", Current: 4, Request: 1, Max: 4})
		require.Equal(t, 4, ok, "tenant %d", i)
		require.Equal(t, 6, limited, "tenant %d", i)
		u, err := s.TenantUsage(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, store.TenantUsage{Topics: 4, Partitions: 8}, u)
	}
}

func testConcurrentTopicSameName(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	const n = 20
	errs := make([]error, n)
	ids := make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		tp, parts := newTopicValue(ten.ID, "contended", 2)
		ids[i] = tp.ID
		wg.Go(func() {
			<-start
			errs[i] = s.CreateTopic(t.Context(), tp, parts, store.CountLimits{MaxTopics: 5})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two creations of one name succeeded")
			winner = i
			continue
		}
		requireAlreadyExists(t, err, "topic name")
	}
	require.NotEqual(t, -1, winner)
	got, err := s.GetTopic(t.Context(), ten.ID, "contended")
	require.NoError(t, err)
	require.Equal(t, ids[winner], got.ID)
	for i, id := range ids {
		parts, err := s.ListPartitions(t.Context(), id)
		require.NoError(t, err)
		if i == winner {
			require.Len(t, parts, 2)
		} else {
			require.Empty(t, parts, "loser %d left partitions", i)
		}
	}
}

func testConcurrentTenantSameName(t *testing.T, s store.Store) {
	const n = 20
	name := "race-" + store.NewID()
	errs := make([]error, n)
	keys := make([]store.APIKey, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		ten, key := newTenantValue()
		ten.Name = name
		keys[i] = key
		wg.Go(func() {
			<-start
			errs[i] = s.CreateTenant(t.Context(), ten, key)
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		_, getErr := s.GetAPIKey(t.Context(), keys[i].ID)
		if err == nil {
			wins++
			require.NoError(t, getErr)
			continue
		}
		requireAlreadyExists(t, err, "tenant name")
		require.ErrorIs(t, getErr, store.ErrNotFound, "orphan key of loser %d", i)
	}
	require.Equal(t, 1, wins)
}

func testConcurrentBrokerRegister(t *testing.T, s store.Store) {
	const brokers, each = 10, 5
	epochs := make([][]int64, brokers)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for id := range brokers {
		for range each {
			wg.Go(func() {
				b, err := s.RegisterBroker(t.Context(), store.Broker{
					ID: int32(id + 1), Address: fmt.Sprintf("127.0.0.1:%d", 9000+id), Rack: "r",
					LeaseExpiresAt: at(time.Minute), RegisteredAt: at(0),
				})
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				epochs[id] = append(epochs[id], b.Epoch)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	list, err := s.ListBrokers(t.Context())
	require.NoError(t, err)
	require.Len(t, list, brokers)
	for id := range brokers {
		slices.Sort(epochs[id])
		require.Equal(t, []int64{1, 2, 3, 4, 5}, epochs[id], "broker %d: every registration gets its own epoch", id+1)
		require.Equal(t, int32(id+1), list[id].ID)
		require.EqualValues(t, each, list[id].Epoch)
	}
}

// testConcurrentBrokerHeartbeat races heartbeats of the current epoch against
// a re-registration: every heartbeat either lands on the epoch it named or is
// refused as a zombie, and after the registration the old epoch is fenced.
func testConcurrentBrokerHeartbeat(t *testing.T, s store.Store) {
	const brokers, beats = 5, 20
	ctx := t.Context()
	for id := int32(1); id <= brokers; id++ {
		b, err := s.RegisterBroker(ctx, store.Broker{ID: id, Address: "a", LeaseExpiresAt: at(0), RegisteredAt: at(0)})
		require.NoError(t, err)
		require.EqualValues(t, 1, b.Epoch)
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		conflicts int
	)
	for id := int32(1); id <= brokers; id++ {
		for i := range beats {
			wg.Go(func() {
				b, err := s.HeartbeatBroker(ctx, id, 1, at(time.Duration(i+1)*time.Second))
				if errors.Is(err, store.ErrConflict) {
					mu.Lock()
					conflicts++
					mu.Unlock()
					return
				}
				if assertNoError(t, err) && b.Epoch != 1 {
					t.Errorf("heartbeat of epoch 1 returned broker at epoch %d", b.Epoch)
				}
			})
		}
		wg.Go(func() {
			b, err := s.RegisterBroker(ctx, store.Broker{ID: id, Address: "b", LeaseExpiresAt: at(time.Hour), RegisteredAt: at(time.Second)})
			if assertNoError(t, err) && b.Epoch != 2 {
				t.Errorf("re-registration got epoch %d, want 2", b.Epoch)
			}
		})
	}
	wg.Wait()
	t.Logf("%d of %d heartbeats fenced by the re-registration", conflicts, brokers*beats)
	for id := int32(1); id <= brokers; id++ {
		_, err := s.HeartbeatBroker(ctx, id, 1, at(2*time.Hour))
		require.ErrorIs(t, err, store.ErrConflict)
		b, err := s.HeartbeatBroker(ctx, id, 2, at(2*time.Hour))
		require.NoError(t, err)
		require.Equal(t, "b", b.Address)
		require.Equal(t, ms(at(2*time.Hour)), b.LeaseExpiresAt)
	}
}

// testConcurrentPartitionCASRounds: in each round every goroutine proposes a
// different leader for epoch e+1 from expected epoch e; exactly one wins and
// the stored state is the winner's.
func testConcurrentPartitionCASRounds(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "cas", 1)
	const rounds, contenders = 10, 20
	for round := range int32(rounds) {
		errs := make([]error, contenders)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for c := range int32(contenders) {
			p := parts[0]
			p.Leader, p.LeaderEpoch, p.PartitionEpoch = 100+c, round+1, round+1
			p.ISR = []int32{100 + c}
			wg.Go(func() {
				<-start
				errs[c] = s.UpdatePartition(ctx, p, round)
			})
		}
		close(start)
		wg.Wait()
		winner := int32(-1)
		for c, err := range errs {
			if err == nil {
				require.Equal(t, int32(-1), winner, "round %d: two winners", round)
				winner = int32(c)
				continue
			}
			require.ErrorIs(t, err, store.ErrConflict, "round %d", round)
		}
		require.NotEqual(t, int32(-1), winner, "round %d: no winner", round)
		got, err := s.ListPartitions(ctx, tp.ID)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.Equal(t, round+1, got[0].PartitionEpoch)
		require.Equal(t, 100+winner, got[0].Leader)
		require.Equal(t, []int32{100 + winner}, got[0].ISR)
	}
}

// testConcurrentPartitionCASFreeForAll: goroutines read-modify-write one
// partition in a loop; every epoch is won exactly once and the final epoch is
// the number of wins.
func testConcurrentPartitionCASFreeForAll(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, ten.ID, "cas", 2)
	const workers, attempts = 10, 20
	var (
		mu      sync.Mutex
		winners = map[int32][]int32{} // epoch → workers that won it
		wg      sync.WaitGroup
	)
	for w := range int32(workers) {
		wg.Go(func() {
			for range attempts {
				parts, err := s.ListPartitions(ctx, tp.ID)
				if !assertNoError(t, err) {
					return
				}
				p := parts[1]
				expected := p.PartitionEpoch
				p.PartitionEpoch++
				p.Leader = w
				err = s.UpdatePartition(ctx, p, expected)
				switch {
				case err == nil:
					mu.Lock()
					winners[p.PartitionEpoch] = append(winners[p.PartitionEpoch], w)
					mu.Unlock()
				case errors.Is(err, store.ErrConflict):
				default:
					t.Errorf("update partition: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	parts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	final := parts[1].PartitionEpoch
	require.Positive(t, final)
	require.Len(t, winners, int(final))
	for e := int32(1); e <= final; e++ {
		require.Len(t, winners[e], 1, "epoch %d won by %v", e, winners[e])
	}
	require.Equal(t, winners[final][0], parts[1].Leader)
	require.Zero(t, parts[0].PartitionEpoch, "the other partition is untouched")
	t.Logf("%d of %d attempts won", final, workers*attempts)
}

// assertNoError reports err from a goroutine other than the test's (where
// require must not be used) and says whether it was nil.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
