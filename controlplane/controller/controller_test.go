package controller

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/internal/clock"
)

// countingStore counts the controller's partition write transactions.
type countingStore struct {
	store.Store
	writes atomic.Int32
}

func (s *countingStore) UpdatePartitionFenced(ctx context.Context, p store.Partition, expectedEpoch int32, controllerEpoch int64) error {
	s.writes.Add(1)
	return s.Store.UpdatePartitionFenced(ctx, p, expectedEpoch, controllerEpoch)
}

func (s *countingStore) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	s.writes.Add(1)
	return s.Store.UpdatePartitionsFenced(ctx, updates, controllerEpoch)
}

// TestControllerFailoverWritesInBatches: when a broker leading a third of
// 1,200 partitions dies, one round elects new leaders for all of them (and
// shrinks every other ISR it was in) in ⌈changes/MaxBatch⌉ transactions,
// skipping only the partition whose compare-and-set lost.
func TestControllerFailoverWritesInBatches(t *testing.T) {
	ctx := t.Context()
	base, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = base.Close() })
	s := &countingStore{Store: base}

	now := t0
	for id := int32(1); id <= 3; id++ {
		_, err := s.RegisterBroker(ctx, store.Broker{ID: id, Address: "b", LeaseExpiresAt: now.Add(10 * time.Second), RegisteredAt: now})
		require.NoError(t, err)
	}
	tenantID := store.NewID()
	h := sha256.Sum256([]byte("k"))
	require.NoError(t, s.CreateTenant(ctx,
		store.Tenant{ID: tenantID, Name: "t", Email: "t@example.com", Plan: "free", Status: store.TenantActive, Overrides: []byte(`{}`), CreatedAt: now},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: tenantID, Name: "k", Hash: h[:], Scopes: []string{"produce"}, CreatedAt: now}))
	const n = 1200
	tp := store.Topic{ID: store.NewID(), TenantID: tenantID, Name: "many", Partitions: n, ReplicationFactor: 3,
		Config:    store.TopicConfig{RetentionMs: -1, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2, MaxMessageBytes: 1 << 20, MinInsyncReplicas: 2, CleanupPolicy: "delete"},
		CreatedAt: now, UpdatedAt: now}
	parts := make([]store.Partition, n)
	for i := range int32(n) {
		r := []int32{i%3 + 1, (i+1)%3 + 1, (i+2)%3 + 1}
		parts[i] = store.Partition{TopicID: tp.ID, Partition: i, Replicas: r, Leader: r[0], ISR: r}
	}
	require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))

	cfg := DefaultConfig()
	c, err := New(cfg, Deps{Store: s, Clock: clock.Func(func() time.Time { return now })})
	require.NoError(t, err)
	c.round(ctx)
	require.True(t, c.active)
	require.Zero(t, s.writes.Load(), "nothing to change while every broker is live")

	// Partition 4 changes behind the controller's back between its read and
	// its write: only that one is skipped.
	s.Store = &racingStore{Store: base, topicID: tp.ID, partition: 4}
	now = now.Add(11 * time.Second)     // every lease expired...
	for id := int32(2); id <= 3; id++ { // ...but brokers 2 and 3 heartbeat
		b, err := base.ListBrokers(ctx)
		require.NoError(t, err)
		_, err = base.HeartbeatBroker(ctx, id, b[id-1].Epoch, now.Add(10*time.Second))
		require.NoError(t, err)
	}
	c.round(ctx)
	require.True(t, c.active)
	// Every partition changes: broker 1 leads 400 and follows in 800.
	require.EqualValues(t, (n+MaxBatch-1)/MaxBatch, s.writes.Load())

	got, err := base.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	for _, p := range got {
		if p.Partition == 4 {
			require.EqualValues(t, 1, p.PartitionEpoch, "the racing write stands")
			continue
		}
		require.NotEqual(t, int32(1), p.Leader, "partition %d", p.Partition)
		require.NotContains(t, p.ISR, int32(1), "partition %d", p.Partition)
		require.EqualValues(t, 1, p.PartitionEpoch, "partition %d", p.Partition)
	}
}

// racingStore changes one partition (ISR to its leader alone) just before
// each batched controller write.
type racingStore struct {
	store.Store
	topicID   string
	partition int32
	done      bool
}

func (s *racingStore) UpdatePartitionsFenced(ctx context.Context, updates []store.PartitionUpdate, controllerEpoch int64) ([]error, error) {
	for _, u := range updates {
		if !s.done && u.Partition.TopicID == s.topicID && u.Partition.Partition == s.partition {
			s.done = true
			p := u.Partition
			p.PartitionEpoch = u.ExpectedEpoch + 1
			p.ISR = p.ISR[:1]
			if err := s.Store.UpdatePartition(ctx, p, u.ExpectedEpoch); err != nil {
				return nil, err
			}
		}
	}
	return s.Store.UpdatePartitionsFenced(ctx, updates, controllerEpoch)
}

// leaseCountingStore counts the controller's lease acquisitions and
// renewals.
type leaseCountingStore struct {
	store.Store
	renewals atomic.Int32
}

func (s *leaseCountingStore) AcquireControllerLease(ctx context.Context, holder string, now time.Time, ttl time.Duration) (store.ControllerLease, bool, error) {
	s.renewals.Add(1)
	return s.Store.AcquireControllerLease(ctx, holder, now, ttl)
}

// TestControllerRenewsItsLeaseOncePerThird: an active controller runs a
// round every Interval but renews its lease (a store write) only once a
// third of the lease has passed, and every renewal leaves the lease
// unexpired: a second controller cannot take it meanwhile.
func TestControllerRenewsItsLeaseOncePerThird(t *testing.T) {
	ctx := t.Context()
	base, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = base.Close() })
	s := &leaseCountingStore{Store: base}
	now := t0
	cfg := DefaultConfig() // a 3 s lease, a round every 250 ms
	c, err := New(cfg, Deps{Store: s, Clock: clock.Func(func() time.Time { return now })})
	require.NoError(t, err)
	other, err := New(cfg, Deps{Store: base, Clock: clock.Func(func() time.Time { return now })})
	require.NoError(t, err)

	for range 24 { // 6 s of rounds
		c.round(ctx)
		require.True(t, c.active)
		other.round(ctx)
		require.False(t, other.active, "at %s the other controller took the lease", now.Sub(t0))
		now = now.Add(cfg.Interval)
	}
	require.Equal(t, int32(6), s.renewals.Load(), "one acquisition, then a renewal every second")
}
