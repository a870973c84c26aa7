package alerting

import (
	"crypto/sha256"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/internal/clock"
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
	a := New(st, Config{Clock: clock.Func(func() time.Time { return now })})
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
	a := New(st, Config{Clock: clock.Func(func() time.Time { return now }), Policy: alertsPolicy(time.Minute)})
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

// TestEvaluateStopUsesShortWindows: a group caught up for an hour stops; 10
// minutes later it is 50 minutes from losing data (retention 1 h). The
// whole hour's slope says 10 h 55 min; the control plane's forecast fits
// the last 10 sampling intervals too (5 minutes at 30 s, 10 at 60 s) and
// says 50 min, under the tenant's 55-minute threshold.
func TestEvaluateStopUsesShortWindows(t *testing.T) {
	t.Parallel()
	for _, interval := range []time.Duration{30 * time.Second, time.Minute} {
		ctx := t.Context()
		st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
		require.NoError(t, err)
		defer st.Close()
		tenant := store.NewID()
		h := sha256.Sum256([]byte(tenant))
		require.NoError(t, st.CreateTenant(ctx, store.Tenant{ID: tenant, Name: "t-" + tenant, Email: tenant + "@example.com", Plan: "free", Status: store.TenantActive},
			store.APIKey{ID: "k_" + store.NewID(), TenantID: tenant, Name: "first", Hash: h[:], Scopes: []string{"consume"}}))
		_, err = st.PutAlertPolicy(ctx, store.AlertPolicy{TenantID: tenant, ExpiryRiskThreshold: 55 * time.Minute})
		require.NoError(t, err)

		stop := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		now := stop.Add(10 * time.Minute)
		key := store.LagKey{TenantID: tenant, Group: "billing", TopicID: store.NewID(), Partition: 0}
		var samples []store.LagSample
		for at := stop.Add(-time.Hour); !at.After(now); at = at.Add(interval) {
			leo := 100_000 + int64(at.Sub(stop)/time.Second)*10 // 10 records/s
			s := store.LagSample{
				LagKey: key, TopicName: "orders", SampledAt: at,
				CommittedOffset: min(leo, 100_000), LogEndOffset: leo, RetentionMs: time.Hour.Milliseconds(), RetentionBytes: -1,
			}
			s.LagMessages = s.LogEndOffset - s.CommittedOffset
			if at.After(stop) {
				s.LagAgeMs = at.Sub(stop).Milliseconds()
			}
			samples = append(samples, s)
		}
		require.NoError(t, st.AddLagSamples(ctx, samples))
		a := New(st, Config{SampleInterval: interval, Clock: clock.Func(func() time.Time { return now })})
		require.NoError(t, a.Evaluate(ctx))

		list, err := st.ListAlerts(ctx, tenant, store.AlertQuery{})
		require.NoError(t, err)
		var risk *store.Alert
		for i := range list {
			if list[i].Kind == store.AlertRetentionExpiryRisk {
				risk = &list[i]
			}
		}
		require.NotNil(t, risk, "sampled every %v: no retention-expiry-risk", interval)
		var d alerts.Details
		require.NoError(t, json.Unmarshal(risk.Details, &d))
		require.Equal(t, 50*time.Minute, d.TimeToLoss, "sampled every %v", interval)
		require.InDelta(t, 1, d.GrowthRate, 1e-9)
		require.Equal(t, max(5*time.Minute, 10*interval), d.GrowthWindow)
	}
}
