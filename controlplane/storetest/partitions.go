package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// newPartitionValues returns the state of n new partitions of topicID
// numbered from `from`, replicas rotating over brokers 1..3 (rf of them),
// as newTopicValue makes them.
func newPartitionValues(topicID string, from, n, rf int32) []store.Partition {
	return spreadPartitions(topicID, from, n, rf, 3, from)
}

// testTopicAddPartitions: the new partitions are stored as given, the old
// ones untouched, the topic's count and update time move, and the usage
// counts them.
func testTopicAddPartitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "grow", 2)
	other, otherParts := createTopic(t, s, ten.ID, "bystander", 3)

	added := newPartitionValues("ignored", 2, 3, tp.ReplicationFactor)
	added[1].Leader, added[1].LeaderEpoch, added[1].PartitionEpoch = added[1].Replicas[1], 2, 4 // stored as given
	// Given out of order.
	got, err := s.AddPartitions(ctx, ten.ID, tp.ID, 2, []store.Partition{added[2], added[0], added[1]}, store.CountLimits{MaxPartitions: 10}, at(3*time.Hour))
	require.NoError(t, err)
	want := storedTopic(tp)
	want.Partitions = 5
	want.UpdatedAt = ms(at(3 * time.Hour))
	require.Equal(t, want, got)
	requireUTC(t, got.CreatedAt, got.UpdatedAt)

	stored, err := s.GetTopic(ctx, ten.ID, "grow")
	require.NoError(t, err)
	require.Equal(t, want, stored)
	gotParts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	wantParts := append([]store.Partition(nil), parts...)
	for _, p := range added {
		p.TopicID = tp.ID
		wantParts = append(wantParts, p)
	}
	require.Equal(t, wantParts, gotParts, "existing partitions untouched, new ones as given, in order")

	// The other topic is untouched.
	gotOther, err := s.GetTopic(ctx, ten.ID, "bystander")
	require.NoError(t, err)
	require.Equal(t, storedTopic(other), gotOther)
	gotParts, err = s.ListPartitions(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, otherParts, gotParts)

	u, err := s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 2, Partitions: 8}, u)

	// Growing again continues from the new count.
	got, err = s.AddPartitions(ctx, ten.ID, tp.ID, 5, newPartitionValues(tp.ID, 5, 1, tp.ReplicationFactor), store.CountLimits{}, at(4*time.Hour))
	require.NoError(t, err)
	require.Equal(t, int32(6), got.Partitions)
	gotParts, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Len(t, gotParts, 6)
	require.Equal(t, wantParts, gotParts[:5])
}

// testTopicAddPartitionsRefused: every refusal leaves the topic as it was.
func testTopicAddPartitionsRefused(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	intruder, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "fixed", 3)
	unchanged := func(what string) {
		t.Helper()
		got, err := s.GetTopic(ctx, ten.ID, "fixed")
		require.NoError(t, err)
		require.Equal(t, storedTopic(tp), got, "%s changes nothing", what)
		gotParts, err := s.ListPartitions(ctx, tp.ID)
		require.NoError(t, err)
		require.Equal(t, parts, gotParts, "%s changes nothing", what)
	}
	add := func(tenantID, topicID string, from int32, ps []store.Partition) error {
		_, err := s.AddPartitions(ctx, tenantID, topicID, from, ps, store.CountLimits{}, at(time.Hour))
		return err
	}
	next := newPartitionValues(tp.ID, 3, 2, tp.ReplicationFactor)

	// A stale current count (a concurrent growth went first): conflict.
	stale := newPartitionValues(tp.ID, 2, 2, tp.ReplicationFactor)
	require.ErrorIs(t, add(ten.ID, tp.ID, 2, stale), store.ErrConflict)
	unchanged("a stale count")
	require.ErrorIs(t, add(ten.ID, tp.ID, 4, newPartitionValues(tp.ID, 4, 1, tp.ReplicationFactor)), store.ErrConflict)
	unchanged("a count ahead of the topic")

	// Another tenant's topic is not found, like a missing one.
	require.ErrorIs(t, add(intruder.ID, tp.ID, 3, next), store.ErrNotFound)
	unchanged("another tenant's growth")
	require.ErrorIs(t, add(ten.ID, store.NewID(), 3, next), store.ErrNotFound)
	require.ErrorIs(t, add(ten.ID, "not-a-uuid", 3, next), store.ErrNotFound)
	require.ErrorIs(t, add("not-a-uuid", tp.ID, 3, next), store.ErrNotFound)
	require.ErrorIs(t, add(store.NewID(), tp.ID, 3, next), store.ErrNotFound)

	// Malformed growths: none of the sentinels.
	for name, ps := range map[string][]store.Partition{
		"none":         nil,
		"gap":          {next[1]},
		"duplicate":    {next[0], next[0]},
		"below from":   newPartitionValues(tp.ID, 2, 2, tp.ReplicationFactor)[:1],
		"out of range": append(newPartitionValues(tp.ID, 3, 1, tp.ReplicationFactor), newPartitionValues(tp.ID, 5, 1, tp.ReplicationFactor)...),
	} {
		err := add(ten.ID, tp.ID, 3, ps)
		require.Error(t, err, name)
		for _, sentinel := range []error{store.ErrNotFound, store.ErrConflict, store.ErrLimitExceeded, store.ErrAlreadyExists} {
			require.NotErrorIs(t, err, sentinel, name)
		}
		unchanged(name)
	}

	// A deleted topic is not found.
	gone, _ := createTopic(t, s, ten.ID, "gone", 1)
	_, err := s.DeleteTopic(ctx, ten.ID, "gone")
	require.NoError(t, err)
	require.ErrorIs(t, add(ten.ID, gone.ID, 1, newPartitionValues(gone.ID, 1, 1, gone.ReplicationFactor)), store.ErrNotFound)
	none, err := s.ListPartitions(ctx, gone.ID)
	require.NoError(t, err)
	require.Empty(t, none)
}

// testTopicAddPartitionsLimit: the tenant's partitions over all its topics
// count, up to exactly the limit; a conflict is reported before a limit.
func testTopicAddPartitionsLimit(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	limits := store.CountLimits{MaxTopics: 1, MaxPartitions: 10} // MaxTopics does not apply to growth
	tp, _ := createTopic(t, s, ten.ID, "a", 4)
	createTopic(t, s, ten.ID, "b", 3)
	createTopic(t, s, other.ID, "a", 3) // another tenant's count is its own

	_, err := s.AddPartitions(ctx, ten.ID, tp.ID, 4, newPartitionValues(tp.ID, 4, 4, tp.ReplicationFactor), limits, at(time.Hour))
	requireLimit(t, err, store.LimitError{Limit: "partitions", Current: 7, Request: 4, Max: 10})
	got, err := s.GetTopic(ctx, ten.ID, "a")
	require.NoError(t, err)
	require.Equal(t, int32(4), got.Partitions)

	// A stale count is a conflict even when the limit would refuse too.
	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 3, newPartitionValues(tp.ID, 3, 5, tp.ReplicationFactor), limits, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict)

	got, err = s.AddPartitions(ctx, ten.ID, tp.ID, 4, newPartitionValues(tp.ID, 4, 3, tp.ReplicationFactor), limits, at(time.Hour))
	require.NoError(t, err, "exactly at the limit")
	require.Equal(t, int32(7), got.Partitions)

	_, err = s.AddPartitions(ctx, ten.ID, tp.ID, 7, newPartitionValues(tp.ID, 7, 1, tp.ReplicationFactor), limits, at(time.Hour))
	requireLimit(t, err, store.LimitError{Limit: "partitions", Current: 10, Request: 1, Max: 10})
	// And creation sees the grown count.
	nt, np := newTopicValue(ten.ID, "c", 1)
	requireLimit(t, s.CreateTopic(ctx, nt, np, store.CountLimits{MaxPartitions: 10}), store.LimitError{Limit: "partitions", Current: 10, Request: 1, Max: 10})

	u, err := s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 2, Partitions: 10}, u)
}

// testConcurrentPartitionGrowthLimit: many topics of one tenant grow at
// once, racing topic creations, against one partition limit: the tenant
// ends exactly at the limit, never past it, and every refusal saw the full
// tenant.
func testConcurrentPartitionGrowthLimit(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	const (
		topics = goroutines / 2 // each grown by 2 from 1 partition
		limit  = topics + 31    // the starting partitions, then 31 more
	)
	tps := make([]store.Topic, topics)
	for i := range tps {
		tps[i], _ = createTopic(t, s, ten.ID, topicName("g", i), 1)
	}
	limits := store.CountLimits{MaxPartitions: limit}
	start := make(chan struct{})
	var wg sync.WaitGroup
	growErrs := make([]error, topics)
	createErrs := make([]error, goroutines-topics)
	for i, tp := range tps {
		wg.Go(func() {
			<-start
			_, growErrs[i] = s.AddPartitions(t.Context(), ten.ID, tp.ID, 1, newPartitionValues(tp.ID, 1, 2, tp.ReplicationFactor), limits, time.Now())
		})
	}
	for i := range createErrs {
		nt, np := newTopicValue(ten.ID, topicName("c", i), 1)
		wg.Go(func() {
			<-start
			createErrs[i] = s.CreateTopic(t.Context(), nt, np, limits)
		})
	}
	close(start)
	wg.Wait()
	var grown, created int
	for i, err := range append(growErrs, createErrs...) {
		switch {
		case err == nil && i < topics:
			grown++
		case err == nil:
			created++
		case isLimit(err, "partitions"):
			var le *store.LimitError
			require.ErrorAs(t, err, &le)
			require.Greater(t, le.Current+le.Request, int64(limit), "a refused call would have passed the limit: %v", le)
			require.LessOrEqual(t, le.Current, int64(limit))
		default:
			require.NoError(t, err)
		}
	}
	u, err := s.TenantUsage(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Equal(t, int64(topics+created), u.Topics)
	require.Equal(t, int64(topics+2*grown+created), u.Partitions, "usage is what succeeded")
	require.LessOrEqual(t, u.Partitions, int64(limit), "never past the limit")
	require.Greater(t, u.Partitions, int64(limit-2), "the limit was filled: no refusal while 2 more fitted")
	// Every topic's count matches its partitions.
	for _, tp := range tps {
		got, err := s.GetTopicByID(t.Context(), tp.ID)
		require.NoError(t, err)
		parts, err := s.ListPartitions(t.Context(), tp.ID)
		require.NoError(t, err)
		require.Len(t, parts, int(got.Partitions))
		require.Contains(t, []int32{1, 3}, got.Partitions)
	}
}

// testConcurrentPartitionGrowthSameTopic: growths of one topic from the same
// count race; exactly one wins, the others are conflicts and add nothing.
func testConcurrentPartitionGrowthSameTopic(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "contended", 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	for i := range errs {
		n := int32(i%4 + 1)
		wg.Go(func() {
			<-start
			_, errs[i] = s.AddPartitions(t.Context(), ten.ID, tp.ID, 2, newPartitionValues(tp.ID, 2, n, tp.ReplicationFactor), store.CountLimits{}, time.Now())
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, won, "two growths from the same count both succeeded (%d and %d)", won, i)
			won = i
			continue
		}
		require.True(t, errors.Is(err, store.ErrConflict), "want a conflict, got %v", err)
	}
	require.NotEqual(t, -1, won, "one growth succeeds")
	got, err := s.GetTopicByID(t.Context(), tp.ID)
	require.NoError(t, err)
	require.Equal(t, int32(2+won%4+1), got.Partitions)
	gotParts, err := s.ListPartitions(t.Context(), tp.ID)
	require.NoError(t, err)
	require.Len(t, gotParts, int(got.Partitions))
	require.Equal(t, parts, gotParts[:2])
}
