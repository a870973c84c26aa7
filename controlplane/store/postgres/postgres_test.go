package postgres_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/storetest"
	"github.com/sluicemq/sluice/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// newStore opens a store on a fresh database.
func newStore(t *testing.T) store.Store {
	t.Helper()
	s, err := postgres.Open(t.Context(), testenv.PostgresURL(t), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestStorePostgres(t *testing.T) {
	t.Parallel()
	storetest.Run(t, newStore)
}

func TestStorePostgresConcurrent(t *testing.T) {
	t.Parallel()
	storetest.RunConcurrent(t, newStore)
}

// TestStorePostgresOpenConcurrently: control-plane replicas starting at once
// against one empty database all come up (one migrates under the advisory
// lock, the others wait and find nothing to do) and see the same data.
func TestStorePostgresOpenConcurrently(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	const replicas = 5
	stores := make([]*postgres.Store, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), url, nil) })
	}
	wg.Wait()
	for i := range replicas {
		require.NoError(t, errs[i], "replica %d", i)
		t.Cleanup(func() { require.NoError(t, stores[i].Close()) })
	}
	for i := range replicas {
		b, err := stores[i].RegisterBroker(t.Context(), store.Broker{ID: 1, Address: "a"})
		require.NoError(t, err)
		require.EqualValues(t, i+1, b.Epoch)
	}
}

func TestStorePostgresOpenBadURL(t *testing.T) {
	t.Parallel()
	_, err := postgres.Open(t.Context(), "postgres://127.0.0.1:1/nope?connect_timeout=2", nil)
	require.Error(t, err)
	_, err = postgres.Open(t.Context(), "::not a url::", nil)
	require.Error(t, err)
}

func BenchmarkStorePostgres(b *testing.B) {
	s, err := postgres.Open(b.Context(), testenv.PostgresURL(b), nil)
	require.NoError(b, err)
	defer s.Close()
	storetest.Benchmark(b, s)
}

func BenchmarkStorePostgresPartitionReads(b *testing.B) {
	s, err := postgres.Open(b.Context(), testenv.PostgresURL(b), nil)
	require.NoError(b, err)
	defer s.Close()
	storetest.BenchmarkPartitionReads(b, s)
}

func BenchmarkStorePostgresPlacement(b *testing.B) {
	storetest.BenchmarkPlacement(b, func(b *testing.B) store.Store {
		s, err := postgres.Open(b.Context(), testenv.PostgresURL(b), nil)
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, s.Close()) })
		return s
	})
}

// TestStorePostgresControllerLeaseAcrossReplicas races the controller lease
// over three pools on one database, as three control-plane replicas would.
func TestStorePostgresControllerLeaseAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var stores []store.Store
	for range 3 {
		s, err := postgres.Open(t.Context(), url, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		stores = append(stores, s)
	}
	storetest.ControllerLeaseContest(t, stores)
}

// TestStorePostgresDeliveryClaimAcrossReplicas claims webhook deliveries
// over three pools on one database, as three control-plane replicas would:
// FOR UPDATE SKIP LOCKED hands each delivery to one of them.
func TestStorePostgresDeliveryClaimAcrossReplicas(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var stores []store.Store
	for range 3 {
		s, err := postgres.Open(t.Context(), url, nil)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		stores = append(stores, s)
	}
	storetest.DeliveryClaimContest(t, stores)
}
