package api

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// A delivery names what it announces: an alert's state change, a webhook
// test, or an invoice's finalization (which has no alert).
func TestDeliveryEvent(t *testing.T) {
	t.Parallel()
	alert := toDeliveryPB(store.Delivery{ID: store.NewID(), AlertID: store.NewID(), AlertState: store.AlertFiring, Status: store.DeliveryPending})
	require.Equal(t, "alert", alert.GetEvent())
	require.Equal(t, sluicev1.AlertState_ALERT_STATE_FIRING, alert.GetAlertState())
	for _, ev := range []store.AlertState{store.AlertStateTest, store.EventInvoiceFinalized} {
		d := toDeliveryPB(store.Delivery{ID: store.NewID(), AlertState: ev, Status: store.DeliveryDelivered})
		require.Equal(t, string(ev), d.GetEvent())
		require.Equal(t, sluicev1.AlertState_ALERT_STATE_UNSPECIFIED, d.GetAlertState())
		require.Empty(t, d.GetAlertId())
	}
}
