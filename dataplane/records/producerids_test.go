package records

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/derr"
)

// TestRecordsProducerIDBlocks: producer ids come from the blocks the
// control plane reserves, one reservation per block however many callers
// wait for it, each id once; a failed reservation is the callers' error
// and the next call tries again; each id is checked against and charged
// to the tenant's producer-id quota, and a refused one takes no id.
func TestRecordsProducerIDBlocks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var reservations atomic.Int32
	release := make(chan struct{})
	var next int64 = 1000
	f.allocate = func(ctx context.Context) (int64, int32, error) {
		reservations.Add(1)
		<-release
		first := next
		next += 10
		return first, 10, nil
	}
	const callers = 15
	ids := make(chan int64, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			id, epoch, err := f.svc.InitProducerID(f.ctx, InitProducerIDRequest{})
			if err != nil {
				t.Error(err)
				return
			}
			if epoch != 0 {
				t.Errorf("epoch %d", epoch)
			}
			ids <- id
		})
	}
	close(release)
	wg.Wait()
	close(ids)
	seen := map[int64]bool{}
	for id := range ids {
		require.False(t, seen[id], "id %d given twice", id)
		require.True(t, id >= 1000 && id < 1020, "id %d", id)
		seen[id] = true
	}
	require.Len(t, seen, callers)
	require.EqualValues(t, 2, reservations.Load(), "one reservation per block of 10")

	calls := f.quotas.take()
	require.Len(t, calls, 2*callers)
	checks := 0
	for _, c := range calls {
		if c == "check pid" {
			checks++
		} else {
			require.Equal(t, "charge pid", c)
		}
	}
	require.Equal(t, callers, checks)

	f.allocate = func(context.Context) (int64, int32, error) { return 0, 0, errors.New("control plane down") }
	for range 5 { // the rest of the second block
		_, err := f.svc.NewProducerID(f.ctx)
		require.NoError(t, err)
	}
	_, err := f.svc.NewProducerID(f.ctx)
	require.EqualError(t, err, "control plane down")
	f.allocate = func(context.Context) (int64, int32, error) { return 5000, 1, nil }
	id, err := f.svc.NewProducerID(f.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 5000, id)
	f.quotas.take()

	f.quotas.pidErr = derr.New(derr.ResourceExhausted, "over the quota")
	_, err = f.svc.NewProducerID(f.ctx)
	require.ErrorIs(t, err, derr.ResourceExhausted)
	require.Equal(t, []string{"check pid"}, f.quotas.take(), "refused: no id taken, nothing charged")

	_, _, err = f.svc.InitProducerID(f.ctx, InitProducerIDRequest{TransactionTimeout: time.Second})
	require.EqualError(t, err, "transaction_timeout_ms: only with a transactional_id")
	require.Equal(t, connect.CodeInvalidArgument, codeOf(err))
}

// TestRecordsProducerIDWaitEndsWithContext: a caller waiting for another
// caller's reservation gives up when its context ends.
func TestRecordsProducerIDWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	f := setup(t)
	started, release := make(chan struct{}), make(chan struct{})
	f.allocate = func(context.Context) (int64, int32, error) {
		close(started)
		<-release
		return 1, 10, nil
	}
	first := make(chan error, 1)
	go func() {
		_, err := f.svc.NewProducerID(f.ctx)
		first <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	_, err := f.svc.NewProducerID(ctx)
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	require.NoError(t, <-first)
}
