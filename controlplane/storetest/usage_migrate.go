package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// DeliveriesKeptByUsageMigration checks migration 00013 on a database that
// holds webhook deliveries (SQLite rebuilds the table to admit
// invoice.finalized events): down (to the version before 00013) drops the
// usage and billing tables and the event deliveries and keeps every other
// delivery as it was; up again keeps them too, and invoice events are
// enqueued again. down and up migrate s's database.
func DeliveriesKeptByUsageMigration(t *testing.T, s store.Store, down, up func(t *testing.T)) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	key := alertKey(ten.ID, store.AlertLagGrowing)
	_, err := s.TransitionAlert(ctx, store.AlertTransition{Key: key, TopicName: "orders", To: store.AlertFiring, At: at(time.Minute),
		Details: json.RawMessage(`{"lag_messages":1}`), Payload: func(store.Alert) ([]byte, error) { return []byte(`{"type":"alert"}`), nil }})
	require.NoError(t, err)
	_, _, err = s.EnqueueDelivery(ctx, store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertStateTest,
		Payload: []byte(`{"type":"test"}`), CreatedAt: at(2 * time.Minute)})
	require.NoError(t, err)
	inv := invoiceValue(ten.ID, "2025-02", at(time.Minute), [2]int64{100, 9})
	inv.FinalizedAt = at(3 * time.Minute)
	_, ok, err := s.FinalizeInvoice(ctx, inv, func(store.Invoice) ([]byte, error) { return []byte(`{"type":"invoice.finalized"}`), nil })
	require.NoError(t, err)
	require.True(t, ok)

	all, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, all, 3)
	var kept []store.Delivery
	for _, d := range all {
		if d.AlertState != store.EventInvoiceFinalized {
			kept = append(kept, d)
		}
	}
	require.Len(t, kept, 2)

	down(t)
	up(t)
	got, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Equal(t, kept, got, "the alert's and the test's deliveries as they were; the event's gone with its invoice")
	_, err = s.GetInvoiceByPeriod(ctx, ten.ID, "2025-02")
	require.ErrorIs(t, err, store.ErrNotFound, "down dropped the invoices")

	_, ok, err = s.FinalizeInvoice(ctx, inv, func(store.Invoice) ([]byte, error) { return []byte(`{"type":"invoice.finalized"}`), nil })
	require.NoError(t, err)
	require.True(t, ok)
	got, err = s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, got, 3)
}
