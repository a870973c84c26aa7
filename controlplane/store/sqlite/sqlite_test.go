package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/controlplane/storetest"
)

// newStore opens a store on a fresh file in t's temporary directory.
func newStore(t *testing.T) store.Store {
	t.Helper()
	return openSQLite(t)
}

func TestStoreSQLite(t *testing.T) {
	t.Parallel()
	storetest.Run(t, newStore)
}

func TestStoreSQLiteConcurrent(t *testing.T) {
	t.Parallel()
	storetest.RunConcurrent(t, newStore)
}

// TestStoreSQLiteReopen: data survives a close, and reopening applies no
// migration twice.
func TestStoreSQLiteReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := sqlite.Open(t.Context(), path, nil)
	require.NoError(t, err)
	_, err = s.RegisterBroker(t.Context(), store.Broker{ID: 1, Address: "a"})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = sqlite.Open(t.Context(), path, nil)
	require.NoError(t, err)
	defer s.Close()
	b, err := s.RegisterBroker(t.Context(), store.Broker{ID: 1, Address: "a"})
	require.NoError(t, err)
	require.EqualValues(t, 2, b.Epoch)
}

func TestStoreSQLiteOpenInvalidPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", ":memory:", "a?b", filepath.Join(t.TempDir(), "missing", "dir", "x.db")} {
		_, err := sqlite.Open(t.Context(), p, nil)
		require.Error(t, err, "path %q", p)
	}
}

func BenchmarkStoreSQLite(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "sluice.db"), nil)
	require.NoError(b, err)
	defer s.Close()
	storetest.Benchmark(b, s)
}

func BenchmarkStoreSQLitePartitionReads(b *testing.B) {
	s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "sluice.db"), nil)
	require.NoError(b, err)
	defer s.Close()
	storetest.BenchmarkPartitionReads(b, s)
}

func BenchmarkStoreSQLitePlacement(b *testing.B) {
	storetest.BenchmarkPlacement(b, func(b *testing.B) store.Store {
		s, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "sluice.db"), nil)
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, s.Close()) })
		return s
	})
}

// TestStoreSQLiteControllerLeaseAcrossHandles races the controller lease
// over three stores opened on one file (each with its own write connection,
// as separate processes would have).
func TestStoreSQLiteControllerLeaseAcrossHandles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.db")
	var stores []store.Store
	for range 3 {
		s, err := sqlite.Open(t.Context(), path, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		stores = append(stores, s)
	}
	storetest.ControllerLeaseContest(t, stores)
}

// TestStoreSQLiteDeliveryClaimAcrossHandles claims webhook deliveries over
// three stores opened on one file, as separate processes would.
func TestStoreSQLiteDeliveryClaimAcrossHandles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.db")
	var stores []store.Store
	for range 3 {
		s, err := sqlite.Open(t.Context(), path, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		stores = append(stores, s)
	}
	storetest.DeliveryClaimContest(t, stores)
}
