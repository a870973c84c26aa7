package sqlite

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/storetest"
)

// TestStoreSQLiteBrokerLoadBackfill: migration 00010 counts the load of
// the partitions a database already holds.
func TestStoreSQLiteBrokerLoadBackfill(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.BrokerLoadBackfill(t, s, func(t *testing.T) {
		fsys, err := fs.Sub(migrations, "migrations")
		require.NoError(t, err)
		p, err := goose.NewProvider(goose.DialectSQLite3, s.write, fsys, goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = p.DownTo(t.Context(), 9)
		require.NoError(t, err)
		_, err = s.PartitionLoad(t.Context())
		require.Error(t, err, "rolled back: no counts")
		require.NoError(t, migrate(t.Context(), s.write, s.logger))
	})
}

// TestStoreSQLiteMetadataChangesPruned: tombstones older than an hour are
// pruned (migrations/00011).
func TestStoreSQLiteMetadataChangesPruned(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.MetadataChangesPruned(t, s, func(t *testing.T) {
		_, err := s.write.ExecContext(t.Context(), `UPDATE deleted_topics SET deleted_at = deleted_at - 7200`)
		require.NoError(t, err)
	})
}

// TestStoreSQLiteUsageMigration: migration 00013 rebuilds webhook_deliveries
// keeping its rows, down and up.
func TestStoreSQLiteUsageMigration(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	storetest.DeliveriesKeptByUsageMigration(t, s, func(t *testing.T) {
		fsys, err := fs.Sub(migrations, "migrations")
		require.NoError(t, err)
		p, err := goose.NewProvider(goose.DialectSQLite3, s.write, fsys, goose.WithDisableGlobalRegistry(true))
		require.NoError(t, err)
		_, err = p.DownTo(t.Context(), 12)
		require.NoError(t, err)
	}, func(t *testing.T) { require.NoError(t, migrate(t.Context(), s.write, s.logger)) })
}
