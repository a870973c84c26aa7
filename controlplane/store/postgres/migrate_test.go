package postgres

import (
	"io/fs"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/storetest"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestStorePostgresBrokerLoadBackfill: migration 00010 counts the load of
// the partitions a database already holds.
func TestStorePostgresBrokerLoadBackfill(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), testenv.PostgresURL(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.BrokerLoadBackfill(t, s, func(t *testing.T) {
		fsys, err := fs.Sub(migrations, "migrations")
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(s.pool)
		defer db.Close()
		p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = p.DownTo(t.Context(), 9)
		require.NoError(t, err)
		_, err = s.PartitionLoad(t.Context())
		require.Error(t, err, "rolled back: no counts")
		require.NoError(t, migrate(t.Context(), s.pool, s.logger))
	})
}

// TestStorePostgresMetadataChangesPruned: tombstones older than an hour are
// pruned (migrations/00011).
func TestStorePostgresMetadataChangesPruned(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), testenv.PostgresURL(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.MetadataChangesPruned(t, s, func(t *testing.T) {
		_, err := s.pool.Exec(t.Context(), `UPDATE deleted_topics SET deleted_at = deleted_at - interval '2 hours'`)
		require.NoError(t, err)
	})
}

// TestStorePostgresUsageMigration: migration 00013 keeps the webhook
// deliveries, down and up.
func TestStorePostgresUsageMigration(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), testenv.PostgresURL(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.DeliveriesKeptByUsageMigration(t, s, func(t *testing.T) {
		fsys, err := fs.Sub(migrations, "migrations")
		require.NoError(t, err)
		db := stdlib.OpenDBFromPool(s.pool)
		defer db.Close()
		p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = p.DownTo(t.Context(), 12)
		require.NoError(t, err)
	}, func(t *testing.T) { require.NoError(t, migrate(t.Context(), s.pool, s.logger)) })
}
