package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

var alertConcurrentTests = []test{
	{name: "ConcurrentAlertCreate", fn: testConcurrentAlertCreate},
	{name: "ConcurrentAlertTransition", fn: testConcurrentAlertTransition},
	{name: "ConcurrentWebhookLimit", fn: testConcurrentWebhookLimit},
	{name: "ConcurrentDeliveryEnqueue", fn: testConcurrentDeliveryEnqueue},
	{name: "ConcurrentDeliveryClaim", own: true, fn: testConcurrentDeliveryClaim},
	{name: "ConcurrentLagSamples", fn: testConcurrentLagSamples},
}

// testConcurrentAlertCreate: replicas racing to open the same key's alert
// (with a notification each) leave one active alert and one delivery per
// webhook; every loser sees ErrConflict.
func testConcurrentAlertCreate(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	key := alertKey(ten.ID, store.AlertRetentionExpiryRisk)
	var won, lost atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			_, err := s.TransitionAlert(t.Context(), store.AlertTransition{Key: key, To: store.AlertFiring, At: at(0),
				Payload: func(a store.Alert) ([]byte, error) { return fmt.Appendf(nil, `{"alert":%q}`, a.ID), nil }})
			switch {
			case err == nil:
				won.Add(1)
			case errors.Is(err, store.ErrConflict):
				lost.Add(1)
			default:
				assert.NoError(t, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, won.Load())
	require.EqualValues(t, goroutines-1, lost.Load())
	list, err := s.ListAlerts(t.Context(), ten.ID, store.AlertQuery{})
	require.NoError(t, err)
	require.Len(t, list, 1)
	log, err := s.ListDeliveries(t.Context(), ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, list[0].ID, log[0].AlertID)
}

// testConcurrentAlertTransition: replicas racing pending → firing and
// firing → resolved on the same alert: each move happens once, and a move
// from a stale state never lands.
func testConcurrentAlertTransition(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0)
	payload := func(a store.Alert) ([]byte, error) { return fmt.Appendf(nil, `{"state":%q}`, a.State), nil }
	for _, step := range []struct{ from, to store.AlertState }{
		{store.AlertPending, store.AlertFiring},
		{store.AlertFiring, store.AlertResolved},
	} {
		var won atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				<-start
				_, err := s.TransitionAlert(t.Context(), store.AlertTransition{Key: a.AlertKey, ID: a.ID, From: step.from, To: step.to, At: at(time.Minute), Payload: payload})
				if err == nil {
					won.Add(1)
				} else {
					assert.ErrorIs(t, err, store.ErrConflict)
				}
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, won.Load(), "%s → %s", step.from, step.to)
		got, err := s.GetAlert(t.Context(), ten.ID, a.ID)
		require.NoError(t, err)
		require.Equal(t, step.to, got.State)
	}
	log, err := s.ListDeliveries(t.Context(), ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 2, "one delivery per state change")
}

// testConcurrentWebhookLimit: concurrent creations never pass the limit.
func testConcurrentWebhookLimit(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	const limit = 10
	var created, refused atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			_, err := s.CreateWebhook(t.Context(), store.Webhook{TenantID: ten.ID, URL: "https://example.com/"}, secret(), limit)
			switch {
			case err == nil:
				created.Add(1)
			case isLimit(err, "webhooks"):
				refused.Add(1)
			default:
				assert.NoError(t, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, limit, created.Load())
	require.EqualValues(t, goroutines-limit, refused.Load())
	list, err := s.ListWebhooks(t.Context(), ten.ID)
	require.NoError(t, err)
	require.Len(t, list, limit)
}

// testConcurrentDeliveryEnqueue: the same state change enqueued from many
// goroutines is one row; everyone gets it back.
func testConcurrentDeliveryEnqueue(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	a := openAlert(t, s, alertKey(ten.ID, store.AlertRetentionExpired), store.AlertFiring, 0)
	var created atomic.Int32
	ids := make([]string, goroutines)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			<-start
			d, ok, err := s.EnqueueDelivery(t.Context(), store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertFiring,
				Payload: []byte(`{}`), CreatedAt: at(0)})
			if !assert.NoError(t, err) {
				return
			}
			if ok {
				created.Add(1)
			}
			ids[i] = d.ID
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, created.Load())
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	log, err := s.ListDeliveries(t.Context(), ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 1)
}

// testConcurrentDeliveryClaim: senders claiming at once never hold the same
// delivery: each of n deliveries is claimed exactly once.
func testConcurrentDeliveryClaim(t *testing.T, s store.Store) {
	DeliveryClaimContest(t, []store.Store{s})
}

// DeliveryClaimContest enqueues deliveries through stores[0] and claims them
// from goroutines spread over stores (handles on one database, as
// control-plane replicas hold): every delivery is claimed exactly once while
// the leases run.
func DeliveryClaimContest(t *testing.T, stores []store.Store) {
	s := stores[0]
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	const n = 120
	for i := range n {
		_, _, err := s.EnqueueDelivery(t.Context(), store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertStateTest,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i), CreatedAt: at(time.Duration(i) * time.Millisecond)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	claims := map[string]int{}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			<-start
			st := stores[g%len(stores)]
			for {
				got, err := st.ClaimDeliveries(t.Context(), at(time.Second), time.Hour, 7)
				if !assert.NoError(t, err) || len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					claims[c.ID]++
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	require.Len(t, claims, n)
	for id, k := range claims {
		require.Equal(t, 1, k, "delivery %s claimed %d times", id, k)
	}
}

// testConcurrentLagSamples: overlapping batches from several samplers (a
// retried batch, replicas sampling the same instant) store each sample once.
func testConcurrentLagSamples(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	k := lagKey(ten.ID, "g", 0)
	var batch []store.LagSample
	for i := range 50 {
		batch = append(batch, lagSample(k, time.Duration(i)*time.Second))
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			<-start
			assert.NoError(t, s.AddLagSamples(t.Context(), batch[g*3:g*3+20]))
		})
	}
	close(start)
	wg.Wait()
	got, err := s.ListLagSamples(t.Context(), k, at(0), time.Time{})
	require.NoError(t, err)
	require.Len(t, got, 47)
}
