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
