package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
	"github.com/sluicemq/sluice/internal/testenv"
)

// A broker's heartbeat and the controller's lease do not wait behind the
// writes queued before them for the one write connection: they go next
// (database/sql alone hands the connection to a random waiter, and under
// load brokers lost their leases behind metadata writes).
func TestStoreSQLiteUrgentWritesGoFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openSQLite(t)
	b, err := s.RegisterBroker(ctx, store.Broker{ID: 1, Address: "a", LeaseExpiresAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	db := s.DB()

	// A transaction holds the connection until released.
	release := holdWriter(t, db)

	// Each normal write, a transaction, reads whether the heartbeat and
	// the lease were written before it.
	type seen struct {
		lease  int64 // broker 1's lease expiry, unix ms
		holder string
	}
	var (
		mu    sync.Mutex
		saw   []seen
		wg    sync.WaitGroup
		heart = time.Now().Add(2 * time.Minute)
	)
	const normal = 20
	for range normal {
		wg.Go(func() {
			var v seen
			err := db.InTx(ctx, func(tx *sql.Tx) error {
				if err := tx.QueryRowContext(ctx, `SELECT lease_expires_at FROM brokers WHERE id = 1`).Scan(&v.lease); err != nil {
					return err
				}
				if err := tx.QueryRowContext(ctx, `SELECT holder FROM controller_lease WHERE id = 1`).Scan(&v.holder); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `UPDATE brokers SET rack = rack WHERE id = 1`)
				return err
			})
			assert.NoError(t, err)
			mu.Lock()
			saw = append(saw, v)
			mu.Unlock()
		})
	}
	waitQueue := func(lane sqlstore.Lane, n int) {
		testenv.Wait(t, 10*time.Second, fmt.Sprintf("%d writes waiting in lane %d", n, lane), func() error {
			q, ok := db.WriteQueue()
			require.True(t, ok, "SQLite's writes queue")
			if q[lane].Waiting != n {
				return fmt.Errorf("%d waiting", q[lane].Waiting)
			}
			return nil
		})
	}
	// One of them waits in the pool, the others in the queue; then the
	// heartbeat and the lease come, in that order.
	waitQueue(sqlstore.LaneNormal, normal-1)
	wg.Go(func() {
		_, err := s.HeartbeatBroker(ctx, 1, b.Epoch, heart)
		assert.NoError(t, err)
	})
	waitQueue(sqlstore.LaneUrgent, 1)
	wg.Go(func() {
		_, _, err := s.AcquireControllerLease(ctx, "c1", time.Now(), time.Minute)
		assert.NoError(t, err)
	})
	waitQueue(sqlstore.LaneUrgent, 2)
	release()
	wg.Wait()

	// Only the write already waiting in the pool went before them.
	require.Len(t, saw, normal)
	var before []seen
	for _, v := range saw {
		if v.lease != heart.UnixMilli() || v.holder != "c1" {
			before = append(before, v)
		}
	}
	require.Len(t, before, 1, "writes that ran before the heartbeat or the lease: %v", before)
	require.NotEqual(t, heart.UnixMilli(), before[0].lease)
	require.NotEqual(t, "c1", before[0].holder)
	q, _ := db.WriteQueue()
	require.Zero(t, q[sqlstore.LaneNormal].Waiting)
	require.Zero(t, q[sqlstore.LaneUrgent].Waiting)
	require.EqualValues(t, 2, q[sqlstore.LaneUrgent].Writes)
	require.Positive(t, q[sqlstore.LaneUrgent].Waited)
	require.GreaterOrEqual(t, q[sqlstore.LaneNormal].Writes, int64(normal+1)) // and the holder's
}

// A write whose context ends while it waits in the queue leaves it; the
// writes behind it go on.
func TestStoreSQLiteQueuedWriteCancelled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openSQLite(t)
	db := s.DB()
	release := holdWriter(t, db)
	// The first waits in the pool; the second, cancelled, in the queue.
	first := make(chan error, 1)
	go func() {
		_, err := db.Write().ExecContext(ctx, `UPDATE controller_lease SET holder = holder`)
		first <- err
	}()
	testenv.Wait(t, 10*time.Second, "the first write in the pool", func() error {
		if q, _ := db.WriteQueue(); q[sqlstore.LaneNormal].Writes < 2 {
			return fmt.Errorf("%d writes", q[sqlstore.LaneNormal].Writes)
		}
		return nil
	})
	cctx, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		_, err := db.Write().ExecContext(cctx, `UPDATE controller_lease SET holder = holder`)
		second <- err
	}()
	testenv.Wait(t, 10*time.Second, "the second write queued", func() error {
		if q, _ := db.WriteQueue(); q[sqlstore.LaneNormal].Waiting != 1 {
			return fmt.Errorf("%d waiting", q[sqlstore.LaneNormal].Waiting)
		}
		return nil
	})
	cancel()
	require.ErrorIs(t, <-second, context.Canceled)
	q, _ := db.WriteQueue()
	require.Zero(t, q[sqlstore.LaneNormal].Waiting)
	release()
	require.NoError(t, <-first)
	_, err := db.Write().ExecContext(ctx, `UPDATE controller_lease SET holder = holder`)
	require.NoError(t, err, "the queue still admits writes")
}

// openSQLite opens a store on a fresh file, closed when the test ends.
func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// holdWriter holds db's write connection in a transaction until the
// returned func is called, which waits for the transaction to commit.
func holdWriter(t *testing.T, db *sqlstore.DB) func() {
	t.Helper()
	release, began := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		held <- db.InTx(t.Context(), func(*sql.Tx) error {
			close(began)
			<-release
			return nil
		})
	}()
	<-began
	return func() {
		close(release)
		require.NoError(t, <-held)
	}
}
