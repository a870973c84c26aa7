package postgres_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// TestStorePostgresBatchBumpsOnce: a batched partition write moves the
// metadata version by one however many partitions it writes
// (migrations/00012), and a batch that writes nothing does not move it.
func TestStorePostgresBatchBumpsOnce(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	now := time.Now().UTC()
	ten := store.NewID()
	h := sha256.Sum256([]byte("k"))
	require.NoError(t, s.CreateTenant(ctx,
		store.Tenant{ID: ten, Name: "t-" + ten, Email: ten + "@example.com", Plan: "free", Status: store.TenantActive, Overrides: []byte(`{}`), CreatedAt: now},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: ten, Name: "k", Hash: h[:], Scopes: []string{"produce"}, CreatedAt: now}))
	tp := store.Topic{ID: store.NewID(), TenantID: ten, Name: "batch", Partitions: 50, ReplicationFactor: 3,
		Config:    store.TopicConfig{RetentionMs: -1, RetentionBytes: -1, LocalRetentionMs: -2, LocalRetentionBytes: -2, MaxMessageBytes: 1 << 20, MinInsyncReplicas: 2, CleanupPolicy: "delete"},
		CreatedAt: now, UpdatedAt: now}
	parts := make([]store.Partition, 50)
	updates := make([]store.PartitionUpdate, 50)
	for i := range int32(50) {
		r := []int32{i%3 + 1, (i+1)%3 + 1, (i+2)%3 + 1}
		parts[i] = store.Partition{TopicID: tp.ID, Partition: i, Replicas: r, Leader: r[0], ISR: r}
		next := parts[i]
		next.Leader, next.LeaderEpoch, next.ISR, next.PartitionEpoch = r[1], 1, r[1:], 1
		updates[i] = store.PartitionUpdate{Partition: next}
	}
	require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))

	v0, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	out, err := s.UpdatePartitions(ctx, updates)
	require.NoError(t, err)
	for _, e := range out {
		require.NoError(t, e)
	}
	v1, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v0+1, v1)

	out, err = s.UpdatePartitions(ctx, updates) // every one stale now
	require.NoError(t, err)
	require.ErrorIs(t, out[0], store.ErrConflict)
	v2, err := s.MetadataVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, v1, v2)

	load, err := s.PartitionLoad(ctx)
	require.NoError(t, err)
	var leaders int64
	for _, l := range load {
		leaders += int64(l.Leaders)
	}
	require.EqualValues(t, 50, leaders)
}
