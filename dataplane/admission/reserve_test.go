package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestQuotaReservationsGroupCommit: reservations asked for while a
// ReserveObjects call is in flight go together in the next call, so a
// burst costs a few calls, each reservation getting its own decision.
func TestQuotaReservationsGroupCommit(t *testing.T) {
	t.Parallel()
	r := newReservations(time.Second)
	release := make(chan struct{})
	var calls atomic.Int32
	var sizes sync.Map
	send := func(_ context.Context, objs []*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
		n := calls.Add(1)
		sizes.Store(n, len(objs))
		if n == 1 {
			<-release // the first call in flight while the others queue
		}
		out := make([]*sluicev1.ObjectReservationResult, len(objs))
		for i, o := range objs {
			out[i] = &sluicev1.ObjectReservationResult{Granted: o.GetName() != "g-13"}
		}
		return out, nil
	}
	const n = 50
	var wg sync.WaitGroup
	var granted atomic.Int32
	for i := range n {
		if i == 1 {
			testenv.Wait(t, 10*time.Second, "the first call in flight", func() error {
				if calls.Load() == 0 {
					return errors.New("no call yet")
				}
				return nil
			})
		}
		wg.Go(func() {
			res, decided, err := r.reserve(context.Background(), send, slog.New(slog.DiscardHandler),
				&sluicev1.ObjectReservation{Name: fmt.Sprintf("g-%d", i), Token: int64(i)})
			assert.NoError(t, err)
			assert.True(t, decided)
			if res.GetGranted() {
				granted.Add(1)
			}
		})
	}
	testenv.Wait(t, 10*time.Second, "the others queued behind the first call", func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if queued := len(r.queue); queued != n-1 {
			return fmt.Errorf("%d queued", queued)
		}
		return nil
	})
	close(release)
	wg.Wait()
	require.Equal(t, int32(2), calls.Load(), "one call in flight, then the rest together")
	second, _ := sizes.Load(int32(2))
	require.Equal(t, n-1, second)
	require.Equal(t, int32(n-1), granted.Load(), "each its own decision")
}

// TestQuotaReservationsUnreachable: a call that fails leaves its
// reservations undecided (admitted unreserved), and for the backoff no
// call is made; then calls are made again.
func TestQuotaReservationsUnreachable(t *testing.T) {
	t.Parallel()
	r := newReservations(time.Second)
	var calls atomic.Int32
	var fail atomic.Bool
	fail.Store(true)
	send := func(_ context.Context, objs []*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
		calls.Add(1)
		if fail.Load() {
			return nil, errors.New("connection refused")
		}
		return []*sluicev1.ObjectReservationResult{{Granted: true}}, nil
	}
	reserve := func() bool {
		_, decided, err := r.reserve(context.Background(), send, slog.New(slog.DiscardHandler), &sluicev1.ObjectReservation{Name: "g"})
		require.NoError(t, err)
		return decided
	}
	require.False(t, reserve())
	require.False(t, reserve())
	require.Equal(t, int32(1), calls.Load(), "no call during the backoff")
	fail.Store(false)
	r.mu.Lock()
	r.unreachableUntil = time.Time{} // the backoff over
	r.mu.Unlock()
	require.True(t, reserve())
	require.Equal(t, int32(2), calls.Load())
}

// TestQuotaReservationsApplied: a granted reservation is confirmed by the
// exchanges once applied, until an answered exchange carried it; one whose
// caller gave up before the grant came is applied at once (nothing will
// be created for it); the ones applied after an exchange's report was
// taken stay for the next.
func TestQuotaReservationsApplied(t *testing.T) {
	t.Parallel()
	r := newReservations(time.Second)
	release := make(chan struct{})
	send := func(_ context.Context, objs []*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
		<-release
		out := make([]*sluicev1.ObjectReservationResult, len(objs))
		for i := range objs {
			out[i] = &sluicev1.ObjectReservationResult{Granted: true}
		}
		return out, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := &sluicev1.ObjectReservation{Name: "gone", Token: 1}
	done := make(chan error)
	go func() {
		_, _, err := r.reserve(ctx, send, slog.New(slog.DiscardHandler), gone)
		done <- err
	}()
	testenv.Wait(t, 10*time.Second, "the reservation in flight", func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.sending || len(r.queue) != 0 {
			return errors.New("not sent yet")
		}
		return nil
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, r.takeApplied(), "not decided yet")
	close(release)
	testenv.Wait(t, 10*time.Second, "the late grant applied", func() error {
		if len(r.takeApplied()) != 1 {
			return errors.New("not applied")
		}
		return nil
	})

	kept := &sluicev1.ObjectReservation{Name: "kept", Token: 2}
	res, decided, err := r.reserve(context.Background(), send, slog.New(slog.DiscardHandler), kept)
	require.NoError(t, err)
	require.True(t, decided && res.GetGranted())
	report := r.takeApplied() // an exchange's report, taken before "kept" is applied
	r.apply(kept)
	r.confirmed(report)
	require.Equal(t, []*sluicev1.ObjectReservation{kept}, r.takeApplied())
	r.confirmed(r.takeApplied())
	require.Empty(t, r.takeApplied())
}
