package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Alert policies, the group filter of ListAlerts and ClaimDelivery (the
// API's part of issue 8).

func init() {
	tests = append(tests,
		test{name: "AlertPolicyPutGet", fn: testAlertPolicyPutGet},
		test{name: "AlertPolicyInvalid", fn: testAlertPolicyInvalid},
		test{name: "AlertPolicyList", own: true, fn: testAlertPolicyList},
		test{name: "AlertListGroup", fn: testAlertListGroup},
		test{name: "DeliveryClaimOne", fn: testDeliveryClaimOne},
	)
}

func testAlertPolicyPutGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	_, err := s.GetAlertPolicy(ctx, a.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "none stored: the defaults")

	p, err := s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: a.ID, ExpiryRiskThreshold: 6 * time.Hour, UpdatedAt: at(0)})
	require.NoError(t, err)
	want := store.AlertPolicy{TenantID: a.ID, ExpiryRiskThreshold: 6 * time.Hour, UpdatedAt: ms(at(0))}
	require.Equal(t, want, p)
	got, err := s.GetAlertPolicy(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Replaced, not added.
	p, err = s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: a.ID, ExpiryRiskThreshold: store.MinExpiryRiskThreshold, UpdatedAt: at(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, store.MinExpiryRiskThreshold, p.ExpiryRiskThreshold)
	got, err = s.GetAlertPolicy(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, p, got)
	require.Equal(t, ms(at(time.Minute)), got.UpdatedAt)

	// Tenant b's is its own.
	_, err = s.GetAlertPolicy(ctx, b.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: b.ID, ExpiryRiskThreshold: store.MaxExpiryRiskThreshold})
	require.NoError(t, err)
	got, err = s.GetAlertPolicy(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.MinExpiryRiskThreshold, got.ExpiryRiskThreshold)

	// Unknown tenants.
	_, err = s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: store.NewID(), ExpiryRiskThreshold: time.Hour})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetAlertPolicy(ctx, "nope")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAlertPolicyInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	for _, d := range []time.Duration{0, -time.Hour, store.MinExpiryRiskThreshold - time.Millisecond, store.MaxExpiryRiskThreshold + time.Millisecond, time.Hour + time.Microsecond} {
		_, err := s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: a.ID, ExpiryRiskThreshold: d})
		require.Error(t, err, d)
		require.NotErrorIs(t, err, store.ErrNotFound, d)
	}
	_, err := s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: "nope", ExpiryRiskThreshold: time.Hour})
	require.Error(t, err)
	_, err = s.GetAlertPolicy(ctx, a.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "nothing stored")
}

func testAlertPolicyList(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.ListAlertPolicies(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	var want []store.AlertPolicy
	for i := range 3 {
		ten, _ := createTenant(t, s)
		p, err := s.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: ten.ID, ExpiryRiskThreshold: time.Duration(i+1) * time.Hour, UpdatedAt: at(0)})
		require.NoError(t, err)
		want = append(want, p)
	}
	createTenant(t, s) // none stored: not listed
	got, err = s.ListAlertPolicies(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, want, got)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].TenantID, got[i].TenantID, "ordered by tenant id")
	}
}

func testAlertListGroup(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	var billing, audit []store.Alert
	for i := range 4 {
		k := alertKey(ten.ID, store.AlertLagGrowing)
		if i%2 == 1 {
			k.Group = "audit"
		}
		a := openAlert(t, s, k, store.AlertPending, time.Duration(i)*time.Second)
		if i%2 == 1 {
			audit = append([]store.Alert{a}, audit...)
		} else {
			billing = append([]store.Alert{a}, billing...)
		}
	}
	got, err := s.ListAlerts(ctx, ten.ID, store.AlertQuery{Group: "audit"})
	require.NoError(t, err)
	require.Equal(t, audit, got)
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{Group: "billing", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, billing[:1], got)
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{Group: "billing", AfterID: got[0].ID})
	require.NoError(t, err)
	require.Equal(t, billing[1:], got)
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{Group: "aud"})
	require.NoError(t, err)
	require.Empty(t, got, "exact match, not a prefix")
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{Group: "audit", States: []store.AlertState{store.AlertFiring}})
	require.NoError(t, err)
	require.Empty(t, got)
}

func testDeliveryClaimOne(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	// Due in an hour: ClaimDelivery takes it anyway.
	d, created, err := s.EnqueueDelivery(ctx, store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertStateTest,
		Payload: []byte(`{"type":"test"}`), CreatedAt: at(0), NextAttemptAt: at(time.Hour)})
	require.NoError(t, err)
	require.True(t, created)

	_, err = s.ClaimDelivery(ctx, other.ID, d.ID, at(time.Second), time.Minute)
	require.ErrorIs(t, err, store.ErrNotFound, "another tenant's delivery")
	_, err = s.ClaimDelivery(ctx, ten.ID, store.NewID(), at(time.Second), time.Minute)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ClaimDelivery(ctx, ten.ID, "nope", at(time.Second), time.Minute)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ClaimDelivery(ctx, ten.ID, d.ID, at(time.Second), 0)
	require.Error(t, err)

	c, err := s.ClaimDelivery(ctx, ten.ID, d.ID, at(time.Second), time.Minute)
	require.NoError(t, err)
	require.Equal(t, d.ID, c.ID)
	require.Equal(t, w.URL, c.URL)
	require.Len(t, c.Secret, len(secret()))
	require.NotEmpty(t, c.LeaseToken)
	require.Equal(t, ms(at(time.Second+time.Minute)), c.LeaseExpiresAt)
	require.Equal(t, []byte(`{"type":"test"}`), c.Payload)

	// Leased: a second claim conflicts until the lease ends.
	_, err = s.ClaimDelivery(ctx, ten.ID, d.ID, at(30*time.Second), time.Minute)
	require.ErrorIs(t, err, store.ErrConflict)
	c2, err := s.ClaimDelivery(ctx, ten.ID, d.ID, at(2*time.Minute), time.Minute)
	require.NoError(t, err)
	require.NotEqual(t, c.LeaseToken, c2.LeaseToken)
	_, err = s.MarkDelivered(ctx, d.ID, c.LeaseToken, at(2*time.Minute))
	require.ErrorIs(t, err, store.ErrConflict, "the first lease was taken over")

	got, err := s.MarkDeliveryFailed(ctx, d.ID, c2.LeaseToken, store.DeliveryFailure{At: at(2 * time.Minute), Error: "refused", Permanent: true}, store.RetryPolicy{})
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, got.Status)
	_, err = s.ClaimDelivery(ctx, ten.ID, d.ID, at(time.Hour), time.Minute)
	require.ErrorIs(t, err, store.ErrConflict, "not pending")
	log, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, store.AlertStateTest, log[0].AlertState)
	require.Equal(t, "refused", log[0].LastError)
}
