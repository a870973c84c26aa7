package alerting

import (
	"crypto/sha256"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
)

// TestEvaluateTenantPolicy: the same stopped consumer, 50 minutes from
// losing data, is an expiry risk under the default 24 h threshold and not
// under a tenant's 30 min one.
func TestEvaluateTenantPolicy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	newTenant := func() string {
		id := store.NewID()
		h := sha256.Sum256([]byte(id))
		require.NoError(t, st.CreateTenant(ctx, store.Tenant{ID: id, Name: "t-" + id, Email: id + "@example.com", Plan: "free", Status: store.TenantActive},
			store.APIKey{ID: "k_" + store.NewID(), TenantID: id, Name: "first", Hash: h[:], Scopes: []string{"consume"}}))
		return id
	}
	strict, lax := newTenant(), newTenant()
	_, err = st.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: lax, ExpiryRiskThreshold: 30 * time.Minute})
	require.NoError(t, err)

	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var samples []store.LagSample
	for _, tenant := range []string{strict, lax} {
		topic := store.NewID()
		for i := range 21 { // 10 minutes, every 30 s; the consumer stopped at offset 500
			at := start.Add(time.Duration(i) * 30 * time.Second)
			samples = append(samples, store.LagSample{
				LagKey:    store.LagKey{TenantID: tenant, Group: "billing", TopicID: topic, Partition: 0},
				TopicName: "orders", SampledAt: at,
				CommittedOffset: 500, LogStartOffset: 0, LogEndOffset: 1000 + int64(i)*10, LagMessages: 500 + int64(i)*10,
				LagAgeMs:    (60*time.Minute + time.Duration(i)*30*time.Second).Milliseconds(),
				RetentionMs: (2 * time.Hour).Milliseconds(), RetentionBytes: -1,
			})
		}
	}
	require.NoError(t, st.AddLagSamples(ctx, samples))
	now := start.Add(10 * time.Minute)
	a := New(st, Config{Now: func() time.Time { return now }})
	require.NoError(t, a.Evaluate(ctx))

	kinds := func(tenant string) []store.AlertKind {
		list, err := st.ListAlerts(ctx, tenant, store.AlertQuery{})
		require.NoError(t, err)
		var out []store.AlertKind
		for _, al := range list {
			out = append(out, al.Kind)
		}
		return out
	}
	require.Contains(t, kinds(strict), store.AlertRetentionExpiryRisk, "50 min < 24 h")
	require.NotContains(t, kinds(lax), store.AlertRetentionExpiryRisk, "50 min > 30 min")
	require.Contains(t, kinds(lax), store.AlertLagGrowing, "the rest of the policy applies")
}

// TestEvaluateResolvesUnsampledAlerts: a firing alert whose group ×
// partition is no longer sampled at all (its topic was deleted and the
// samples pruned) resolves after ResolveAfter, like any other.
func TestEvaluateResolvesUnsampledAlerts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	tenant := store.NewID()
	h := sha256.Sum256([]byte(tenant))
	require.NoError(t, st.CreateTenant(ctx, store.Tenant{ID: tenant, Name: "t-" + tenant, Email: tenant + "@example.com", Plan: "free", Status: store.TenantActive},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: tenant, Name: "first", Hash: h[:], Scopes: []string{"consume"}}))
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	key := store.AlertKey{TenantID: tenant, Kind: store.AlertRetentionExpiryRisk, Group: "billing", TopicID: store.NewID(), Partition: 0}
	al, err := st.TransitionAlert(ctx, store.AlertTransition{Key: key, TopicName: "orders", To: store.AlertFiring, Details: []byte(`{}`), At: start})
	require.NoError(t, err)

	now := start
	a := New(st, Config{Now: func() time.Time { return now }, Policy: alertsPolicy(time.Minute)})
	require.NoError(t, a.Evaluate(ctx)) // the condition is gone: resolving starts
	now = now.Add(2 * time.Minute)
	require.NoError(t, a.Evaluate(ctx))
	got, err := st.GetAlert(ctx, tenant, al.ID)
	require.NoError(t, err)
	require.Equal(t, store.AlertResolved, got.State)
}

func alertsPolicy(resolveAfter time.Duration) alerts.Policy {
	p := alerts.DefaultPolicy()
	p.ResolveAfter = resolveAfter
	return p
}
