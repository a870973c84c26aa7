package storetest

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// bump returns p's next state at leaderEpoch: the partition epoch plus one
// and the ISR cut to its first member.
func bump(p store.Partition, leaderEpoch int32) store.Partition {
	p.LeaderEpoch = leaderEpoch
	p.PartitionEpoch++
	p.ISR = append([]int32(nil), p.ISR[:1]...)
	return p
}

// testPartitionUpdateBatch: one batch mixes written, stale and unknown
// partitions; each outcome is its own, the written ones land together, and a
// batch that writes nothing changes no metadata version.
func testPartitionUpdateBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "batch", 4)

	out, err := s.UpdatePartitions(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, out)

	v0, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	p0 := bump(parts[0], 1)
	p0again := bump(p0, 2) // compared with what the batch's first update wrote
	p1 := bump(parts[1], 1)
	p3 := bump(parts[3], 1)
	missing := bump(parts[2], 1)
	missing.Partition = 9
	badID := bump(parts[2], 1)
	badID.TopicID = "not-a-uuid"
	out, err = s.UpdatePartitions(ctx, []store.PartitionUpdate{
		{Partition: p3, ExpectedEpoch: 0},
		{Partition: p1, ExpectedEpoch: 5}, // stale
		{Partition: p0, ExpectedEpoch: 0},
		{Partition: missing, ExpectedEpoch: 0},
		{Partition: p0again, ExpectedEpoch: 1},
		{Partition: badID, ExpectedEpoch: 0},
		{Partition: p3, ExpectedEpoch: 0}, // stale after the first update of p3
	})
	require.NoError(t, err)
	require.Len(t, out, 7)
	require.NoError(t, out[0])
	require.ErrorIs(t, out[1], store.ErrConflict)
	require.NoError(t, out[2])
	require.ErrorIs(t, out[3], store.ErrNotFound)
	require.NoError(t, out[4])
	require.ErrorIs(t, out[5], store.ErrNotFound)
	require.ErrorIs(t, out[6], store.ErrConflict)

	got, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	want := []store.Partition{p0again, parts[1], parts[2], p3}
	require.Equal(t, want, got)
	v1, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	require.Greater(t, v1, v0)
	requireLoad(t, s, nil, "after the batch")

	// Nothing written: no new version.
	out, err = s.UpdatePartitions(ctx, []store.PartitionUpdate{{Partition: p1, ExpectedEpoch: 5}, {Partition: missing, ExpectedEpoch: 0}})
	require.NoError(t, err)
	require.ErrorIs(t, out[0], store.ErrConflict)
	require.ErrorIs(t, out[1], store.ErrNotFound)
	v2, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v1, v2)
}

// testPartitionUpdateBatchFenced: the controller's batch is all or nothing
// on the lease epoch and on malformed updates, and per partition otherwise.
func testPartitionUpdateBatchFenced(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "batch-fenced", 3)
	l, ok, err := s.AcquireControllerLease(ctx, "ctl-a", at(0), time.Second)
	require.NoError(t, err)
	require.True(t, ok)

	p0, p1 := bump(parts[0], 1), bump(parts[1], 1)
	p0.Leader = p0.Replicas[1]
	batch := []store.PartitionUpdate{{Partition: p0, ExpectedEpoch: 0}, {Partition: p1, ExpectedEpoch: 0}}

	// A wrong epoch fences the whole batch.
	out, err := s.UpdatePartitionsFenced(ctx, batch, l.Epoch+1)
	require.ErrorIs(t, err, store.ErrFenced)
	require.Nil(t, out)
	// One malformed update refuses the whole batch.
	skip := bump(parts[2], 1)
	skip.PartitionEpoch = 3
	out, err = s.UpdatePartitionsFenced(ctx, append(batch, store.PartitionUpdate{Partition: skip, ExpectedEpoch: 0}), l.Epoch)
	require.Error(t, err)
	require.False(t, isSentinel(err), "%v", err)
	require.Nil(t, out)
	got, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, parts, got, "refused batches wrote nothing")

	missing := bump(parts[2], 1)
	missing.Partition = 7
	stale := bump(parts[2], 1)
	out, err = s.UpdatePartitionsFenced(ctx, append(batch,
		store.PartitionUpdate{Partition: missing, ExpectedEpoch: 0},
		store.PartitionUpdate{Partition: bump(stale, 2), ExpectedEpoch: 1}), l.Epoch)
	require.NoError(t, err)
	require.Len(t, out, 4)
	require.NoError(t, out[0])
	require.NoError(t, out[1])
	require.ErrorIs(t, out[2], store.ErrNotFound)
	require.ErrorIs(t, out[3], store.ErrConflict)
	require.NotErrorIs(t, out[3], store.ErrFenced)
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, []store.Partition{p0, p1, parts[2]}, got)
	requireLoad(t, s, nil, "after the fenced batch")

	// A successor's epoch fences the deposed controller's batch.
	l2, ok, err := s.AcquireControllerLease(ctx, "ctl-b", at(time.Minute), time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	next := bump(p1, 2)
	_, err = s.UpdatePartitionsFenced(ctx, []store.PartitionUpdate{{Partition: next, ExpectedEpoch: 1}}, l.Epoch)
	require.ErrorIs(t, err, store.ErrFenced)
	out, err = s.UpdatePartitionsFenced(ctx, []store.PartitionUpdate{{Partition: next, ExpectedEpoch: 1}}, l2.Epoch)
	require.NoError(t, err)
	require.NoError(t, out[0])
}

// testConcurrentPartitionBatches: batches over the same partitions in
// different orders, and single-partition writers beside them, neither
// deadlock nor lose a write: every partition's final epoch is the number
// of writes reported done for it.
func testConcurrentPartitionBatches(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, ten.ID, "batch-race", 12)
	const workers, rounds = 6, 15
	var (
		mu   sync.Mutex
		wins = map[int32]int32{}
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				parts, err := s.ListPartitions(ctx, tp.ID)
				if !assertNoError(t, err) {
					return
				}
				rand.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
				if w%3 == 0 { // a single-partition writer
					p := parts[0]
					expected := p.PartitionEpoch
					p.PartitionEpoch++
					switch err := s.UpdatePartition(ctx, p, expected); {
					case err == nil:
						mu.Lock()
						wins[p.Partition]++
						mu.Unlock()
					case errors.Is(err, store.ErrConflict):
					default:
						t.Errorf("update partition: %v", err)
						return
					}
					continue
				}
				batch := make([]store.PartitionUpdate, 0, len(parts))
				for _, p := range parts[:8] {
					expected := p.PartitionEpoch
					p.PartitionEpoch++
					batch = append(batch, store.PartitionUpdate{Partition: p, ExpectedEpoch: expected})
				}
				out, err := s.UpdatePartitions(ctx, batch)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				for i, e := range out {
					switch {
					case e == nil:
						wins[batch[i].Partition.Partition]++
					case !errors.Is(e, store.ErrConflict):
						t.Errorf("partition %d: %v", batch[i].Partition.Partition, e)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	parts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	for _, p := range parts {
		require.Equal(t, wins[p.Partition], p.PartitionEpoch, "partition %d", p.Partition)
	}
	requireLoad(t, s, nil, "after the race")
}
