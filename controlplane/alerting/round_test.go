package alerting

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/postgres"
	"github.com/sluicemq/sluice/controlplane/store/sqlite"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

// drivers runs fn on a fresh store of each engine.
func drivers(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "cp.db"), nil)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		st, err := postgres.Open(t.Context(), testenv.PostgresURL(t), nil)
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		fn(t, st)
	})
}

func newTenant(t *testing.T, st store.Store) string {
	t.Helper()
	id := store.NewID()
	h := sha256.Sum256([]byte(id))
	require.NoError(t, st.CreateTenant(t.Context(), store.Tenant{ID: id, Name: "t-" + id, Email: id + "@example.com", Plan: "free", Status: store.TenantActive},
		store.APIKey{ID: "k_" + store.NewID(), TenantID: id, Name: "first", Hash: h[:], Scopes: []string{"consume"}}))
	return id
}

// stoppedSamples is the history of a consumer of key stopped at `stop`, sampled every 30 s
// in [from, to]: lag age grows 1 s/s under a 2 h retention.
func stoppedSamples(key store.LagKey, stop, from, to time.Time) []store.LagSample {
	var out []store.LagSample
	for at := from; !at.After(to); at = at.Add(30 * time.Second) {
		s := store.LagSample{LagKey: key, TopicName: "orders", SampledAt: at,
			CommittedOffset: 1000, LogEndOffset: 1000 + int64(at.Sub(stop)/time.Second), RetentionMs: (2 * time.Hour).Milliseconds(), RetentionBytes: -1}
		s.LagMessages = s.LogEndOffset - s.CommittedOffset
		s.LagAgeMs = at.Sub(stop).Milliseconds()
		out = append(out, s)
	}
	return out
}

// TestEvaluateWritesNoUnchangedAlerts: a round in which no alert changes
// state and no number an alert shows changes (no new sample, and lag-growing
// alerts, whose numbers are the sample's) writes no alert row: the alerts
// read back exactly as before, UpdatedAt included. A round with a new
// sample refreshes the alerts of that key, and only those.
func TestEvaluateWritesNoUnchangedAlerts(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		tenant := newTenant(t, st)
		stop := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		now := stop.Add(90 * time.Minute)
		a1 := store.LagKey{TenantID: tenant, Group: "billing", TopicID: store.NewID(), Partition: 0}
		a2 := store.LagKey{TenantID: tenant, Group: "audit", TopicID: store.NewID(), Partition: 1}
		samples := func(k store.LagKey, from, to time.Time) []store.LagSample {
			out := stoppedSamples(k, stop, from, to)
			for i := range out {
				out[i].RetentionMs = -1 // no expiry: lag-growing only
			}
			return out
		}
		for _, k := range []store.LagKey{a1, a2} {
			require.NoError(t, st.AddLagSamples(ctx, samples(k, now.Add(-time.Hour), now)))
		}
		pol := alerts.DefaultPolicy()
		pol.GrowingFor = time.Minute
		a := New(st, Config{Clock: clock.Func(func() time.Time { return now }), Policy: pol})
		type row struct {
			ID, Group     string
			State         store.AlertState
			Details       string
			UpdatedAt     time.Time
			FiredAt       time.Time
			ClearSinceSet bool
		}
		list := func() []row {
			got, err := st.ListAlerts(ctx, tenant, store.AlertQuery{})
			require.NoError(t, err)
			var out []row
			for _, al := range got {
				out = append(out, row{al.ID, al.Group, al.State, string(al.Details), al.UpdatedAt, al.FiredAt, !al.ClearSince.IsZero()})
			}
			return out
		}
		// lag-growing: pending, then firing after a minute.
		require.NoError(t, a.Evaluate(ctx))
		now = now.Add(2 * time.Minute)
		for _, k := range []store.LagKey{a1, a2} {
			require.NoError(t, st.AddLagSamples(ctx, samples(k, now.Add(-90*time.Second), now)))
		}
		require.NoError(t, a.Evaluate(ctx))
		before := list()
		require.Len(t, before, 2)
		for _, r := range before {
			require.Equal(t, store.AlertFiring, r.State)
		}

		// No new sample, no state change: nothing is written.
		for range 3 {
			now = now.Add(time.Second)
			require.NoError(t, a.Evaluate(ctx))
			require.Equal(t, before, list())
		}

		// A new sample of one key: its alert gets the new numbers, the other key's stays.
		now = now.Add(30 * time.Second)
		require.NoError(t, st.AddLagSamples(ctx, samples(a1, now, now)))
		require.NoError(t, a.Evaluate(ctx))
		after := list()
		require.Len(t, after, len(before))
		for i, r := range after {
			require.Equal(t, before[i].State, r.State)
			if r.Group == a1.Group {
				require.True(t, r.UpdatedAt.After(before[i].UpdatedAt), "refreshed")
				require.NotEqual(t, before[i].Details, r.Details)
			} else {
				require.Equal(t, before[i], r, "the other key's alert unchanged")
			}
		}
	})
}

// TestEvaluateRoundBudget: a round that runs out of its interval stops
// reading histories after the chunk it is on, says how many group ×
// partitions it left (the return, the metric), leaves their alerts as
// stored (a firing alert is not taken for unsampled and resolved), and the
// next round starts with them.
func TestEvaluateRoundBudget(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cp.db"), nil)
	require.NoError(t, err)
	defer st.Close()
	tenant := newTenant(t, st)
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	topic := store.NewID()
	n := store.MaxLagHistoryKeys + 10
	var samples []store.LagSample
	var keys []store.LagKey
	for g := range n {
		k := store.LagKey{TenantID: tenant, Group: fmt.Sprintf("g%05d", g), TopicID: topic, Partition: 0}
		keys = append(keys, k)
		samples = append(samples, store.LagSample{LagKey: k, TopicName: "orders", SampledAt: now.Add(-time.Second),
			CommittedOffset: 10, LogEndOffset: 10, RetentionMs: -1, RetentionBytes: -1})
	}
	require.NoError(t, st.AddLagSamples(ctx, samples))
	// The last key has a firing alert whose condition is gone: evaluated, it starts to resolve.
	last := keys[n-1]
	al, err := st.TransitionAlert(ctx, store.AlertTransition{Key: store.AlertKey{TenantID: tenant, Kind: store.AlertRetentionExpiryRisk,
		Group: last.Group, TopicID: last.TopicID, Partition: last.Partition}, TopicName: "orders", To: store.AlertFiring, At: now.Add(-time.Hour)})
	require.NoError(t, err)

	a := New(st, Config{Clock: clock.Func(func() time.Time { return now })})
	skipped, err := a.evaluate(ctx, time.Now().Add(-time.Second)) // out of time from the start
	require.NoError(t, err)
	require.Equal(t, 10, skipped, "one chunk evaluated, the rest left")
	require.Equal(t, keys[store.MaxLagHistoryKeys], a.resume)
	require.Equal(t, 10, a.metrics.skipped)
	require.Len(t, a.metrics.rows, store.MaxLagHistoryKeys)
	got, err := st.GetAlert(ctx, tenant, al.ID)
	require.NoError(t, err)
	require.Equal(t, al, got, "a key left unevaluated keeps its alert as stored")

	// The next round starts with the keys left: with time to spare it does them all.
	now = now.Add(time.Second)
	skipped, err = a.evaluate(ctx, time.Now().Add(time.Minute))
	require.NoError(t, err)
	require.Zero(t, skipped)
	require.Zero(t, a.metrics.skipped)
	require.Len(t, a.metrics.rows, n)
	got, err = st.GetAlert(ctx, tenant, al.ID)
	require.NoError(t, err)
	require.Equal(t, now, got.ClearSince, "evaluated now: the condition is gone")

	// Out of time again, starting from the first key: the first chunk is done, the rest left.
	skipped, err = a.evaluate(ctx, time.Now().Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, 10, skipped)
	require.Equal(t, keys[store.MaxLagHistoryKeys], a.resume)
}

// TestEvaluateHistoriesIncremental: the histories an Alerter keeps between
// rounds, reading only what is new, are at every round what reading them
// whole from the store gives: with samples leaving the window, a key
// appearing, a sample another replica stores late (older than the newest
// one read, within the overlap), a key whose samples stop, and a clock
// going back.
func TestEvaluateHistoriesIncremental(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		tenant := newTenant(t, st)
		const iv = 30 * time.Second
		cfg := Config{SampleInterval: iv, Window: 10 * time.Minute}
		a := New(st, cfg)
		keys := []store.LagKey{
			{TenantID: tenant, Group: "a", TopicID: store.NewID(), Partition: 0},
			{TenantID: tenant, Group: "b", TopicID: store.NewID(), Partition: 2},
			{TenantID: tenant, Group: "c", TopicID: store.NewID(), Partition: 0}, // appears later
			{TenantID: tenant, Group: "d", TopicID: store.NewID(), Partition: 0}, // stops
		}
		start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		stop := start.Add(-time.Hour)
		add := func(k store.LagKey, at time.Time) {
			require.NoError(t, st.AddLagSamples(ctx, stoppedSamples(k, stop, at, at)))
		}
		check := func(now time.Time) {
			t.Helper()
			got, err := a.histories(ctx, keys, now)
			require.NoError(t, err)
			want, err := st.ListLagHistories(ctx, keys, now.Add(-cfg.Window), now)
			require.NoError(t, err)
			for i := range keys {
				if len(want[i]) == 0 {
					require.Empty(t, got[i], "key %s at %v", keys[i].Group, now)
					continue
				}
				require.Equal(t, want[i], got[i], "key %s at %v", keys[i].Group, now)
			}
		}
		var now time.Time
		for round := range 40 {
			now = start.Add(time.Duration(round) * iv)
			at := now.Add(-time.Second).Add(time.Duration(round%7) * time.Millisecond * 123)
			add(keys[0], at)
			if round%3 != 0 {
				add(keys[1], at)
			}
			if round == 5 { // another replica stores a sample of b older than the newest read
				add(keys[1], now.Add(-iv-10*time.Second))
			}
			if round >= 12 {
				add(keys[2], at)
			}
			if round < 8 {
				add(keys[3], at)
			}
			check(now)
		}
		check(now.Add(-5 * time.Minute)) // the clock went back
		check(now.Add(time.Hour))        // everything left the window
	})
}
