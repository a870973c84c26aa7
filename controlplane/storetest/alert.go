package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
)

// Lag samples, alerts, webhooks and deliveries (issue 8). Tests that read
// or write across tenants (AllLatestLagSamples, PruneLagSamples,
// ListActiveAlerts, ClaimDeliveries, PruneDeliveries) have stores of their
// own; the others only touch their own tenants and share the store.

func init() {
	tests = append(tests, alertTests...)
	concurrentTests = append(concurrentTests, alertConcurrentTests...)
}

var alertTests = []test{
	{name: "LagSampleAddList", fn: testLagSampleAddList},
	{name: "LagSampleInvalid", fn: testLagSampleInvalid},
	{name: "LagSampleLatest", fn: testLagSampleLatest},
	{name: "LagSampleLatestAll", own: true, fn: testLagSampleLatestAll},
	{name: "LagSamplePrune", own: true, fn: testLagSamplePrune},
	{name: "LagSampleForecast", fn: testLagSampleForecast},
	{name: "LagHistories", fn: testLagHistories},

	{name: "AlertLifecycle", fn: testAlertLifecycle},
	{name: "AlertCompareAndSet", fn: testAlertCompareAndSet},
	{name: "AlertInvalid", fn: testAlertInvalid},
	{name: "AlertList", fn: testAlertList},
	{name: "AlertTenantIsolation", fn: testAlertTenantIsolation},
	{name: "AlertListActive", own: true, fn: testAlertListActive},
	{name: "AlertNotify", fn: testAlertNotify},
	{name: "AlertRefresh", fn: testAlertRefresh},

	{name: "WebhookCreateGetListDelete", fn: testWebhookCreateGetListDelete},
	{name: "WebhookLimit", fn: testWebhookLimit},
	{name: "WebhookInvalid", fn: testWebhookInvalid},
	{name: "WebhookTenantIsolation", fn: testWebhookTenantIsolation},

	{name: "DeliveryEnqueueDedup", fn: testDeliveryEnqueueDedup},
	{name: "DeliveryEnqueueScoping", fn: testDeliveryEnqueueScoping},
	{name: "DeliveryClaimLease", own: true, fn: testDeliveryClaimLease},
	{name: "DeliveryRetry", own: true, fn: testDeliveryRetry},
	{name: "DeliveryLogAndCascade", fn: testDeliveryLogAndCascade},
	{name: "DeliveryPrune", own: true, fn: testDeliveryPrune},
}

// ---- fixtures ----

// lagKey returns a key of tenantID on a new topic id.
func lagKey(tenantID, group string, partition int32) store.LagKey {
	return store.LagKey{TenantID: tenantID, Group: group, TopicID: store.NewID(), Partition: partition}
}

// lagSample returns a sample of k at base+d: a consumer behind by 100
// records whose lag age is d/2 plus a day, under a 7-day retention.
func lagSample(k store.LagKey, d time.Duration) store.LagSample {
	return store.LagSample{
		LagKey:          k,
		TopicName:       "orders",
		SampledAt:       at(d),
		CommittedOffset: 900,
		LogStartOffset:  10,
		LogEndOffset:    1000,
		LagMessages:     100,
		LagAgeMs:        (24*time.Hour + d/2).Milliseconds(),
		PartitionBytes:  99_000,
		UnconsumedBytes: 10_000,
		RetentionMs:     (7 * 24 * time.Hour).Milliseconds(),
		RetentionBytes:  -1,
	}
}

// storedSample is what a store returns for a sample written as s.
func storedSample(s store.LagSample) store.LagSample {
	s.SampledAt = ms(s.SampledAt)
	return s
}

// secret returns a signing secret.
func secret() []byte { return []byte("0123456789abcdef-" + store.NewID()) }

// createWebhook stores a webhook of tenantID with no limit.
func createWebhook(t *testing.T, s store.Store, tenantID string, created time.Time) store.Webhook {
	t.Helper()
	w, err := s.CreateWebhook(t.Context(), store.Webhook{TenantID: tenantID, URL: "https://hooks.example.com/sluice", Description: "ops", CreatedAt: created}, secret(), 0)
	require.NoError(t, err)
	return w
}

// alertKey returns a key of tenantID on a new topic id.
func alertKey(tenantID string, kind store.AlertKind) store.AlertKey {
	return store.AlertKey{TenantID: tenantID, Kind: kind, Group: "billing", TopicID: store.NewID(), Partition: 3}
}

// openAlert creates key's active alert in state `to` at at(d).
func openAlert(t *testing.T, s store.Store, key store.AlertKey, to store.AlertState, d time.Duration) store.Alert {
	t.Helper()
	a, err := s.TransitionAlert(t.Context(), store.AlertTransition{Key: key, TopicName: "orders", To: to, At: at(d),
		Details: json.RawMessage(`{"lag_messages":100,"lag_age_ns":3600000000000}`)})
	require.NoError(t, err)
	return a
}

// move moves a from its state to `to` at at(d).
func moveAlert(t *testing.T, s store.Store, a store.Alert, to store.AlertState, d time.Duration) store.Alert {
	t.Helper()
	got, err := s.TransitionAlert(t.Context(), store.AlertTransition{Key: a.AlertKey, ID: a.ID, From: a.State, To: to, At: at(d), Details: a.Details})
	require.NoError(t, err)
	return got
}

// ---- lag samples ----

func testLagSampleAddList(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	k := lagKey(ten.ID, "billing", 2)
	other := k
	other.Partition = 3

	var batch, want []store.LagSample
	for i := range 10 {
		smp := lagSample(k, time.Duration(i)*10*time.Second)
		batch = append(batch, smp)
		want = append(want, storedSample(smp))
	}
	// Out of order in the batch; the history comes back in time order.
	batch[2], batch[7] = batch[7], batch[2]
	batch = append(batch, lagSample(other, 0))
	require.NoError(t, s.AddLagSamples(ctx, batch))
	require.NoError(t, s.AddLagSamples(ctx, nil))

	got, err := s.ListLagSamples(ctx, k, at(0), time.Time{})
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, g := range got {
		requireUTC(t, g.SampledAt)
	}

	// A retried batch is stored once.
	require.NoError(t, s.AddLagSamples(ctx, batch[:5]))
	got, err = s.ListLagSamples(ctx, k, at(0), time.Time{})
	require.NoError(t, err)
	require.Len(t, got, 10)

	// The window is inclusive at both ends.
	got, err = s.ListLagSamples(ctx, k, at(20*time.Second), at(50*time.Second))
	require.NoError(t, err)
	require.Equal(t, want[2:6], got)
	got, err = s.ListLagSamples(ctx, k, at(time.Hour), time.Time{})
	require.NoError(t, err)
	require.Empty(t, got)

	// Each field is its own column: every key field separates histories.
	for _, mod := range []func(*store.LagKey){
		func(k *store.LagKey) { k.Group = "other" },
		func(k *store.LagKey) { k.TopicID = store.NewID() },
		func(k *store.LagKey) { k.Partition = 9 },
		func(k *store.LagKey) { k.TenantID = store.NewID() },
		func(k *store.LagKey) { k.TopicID = "not-a-uuid" },
	} {
		kk := k
		mod(&kk)
		got, err := s.ListLagSamples(ctx, kk, at(0), time.Time{})
		require.NoError(t, err)
		require.Empty(t, got)
	}

	// Offline samples and no committed offset round-trip.
	k2 := lagKey(ten.ID, "fresh", 0)
	off := store.LagSample{LagKey: k2, TopicName: "orders", SampledAt: at(time.Minute), Offline: true, RetentionMs: -1, RetentionBytes: 1 << 30}
	none := off
	none.Offline, none.SampledAt, none.CommittedOffset = false, at(2*time.Minute), store.NoCommittedOffset
	require.NoError(t, s.AddLagSamples(ctx, []store.LagSample{off, none}))
	got, err = s.ListLagSamples(ctx, k2, at(0), time.Time{})
	require.NoError(t, err)
	require.Equal(t, []store.LagSample{storedSample(off), storedSample(none)}, got)
}

func testLagSampleInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	k := lagKey(ten.ID, "g", 0)
	good := lagSample(k, 0)
	for name, mod := range map[string]func(*store.LagSample){
		"tenant id":       func(x *store.LagSample) { x.TenantID = "nope" },
		"topic id":        func(x *store.LagSample) { x.TopicID = "" },
		"group":           func(x *store.LagSample) { x.Group = "" },
		"group NUL":       func(x *store.LagSample) { x.Group = "a\x00" },
		"topic name":      func(x *store.LagSample) { x.TopicName = "\xff" },
		"partition":       func(x *store.LagSample) { x.Partition = -1 },
		"time":            func(x *store.LagSample) { x.SampledAt = time.Time{} },
		"committed":       func(x *store.LagSample) { x.CommittedOffset = -2 },
		"log start":       func(x *store.LagSample) { x.LogStartOffset = -1 },
		"log end":         func(x *store.LagSample) { x.LogEndOffset = x.LogStartOffset - 1 },
		"lag":             func(x *store.LagSample) { x.LagMessages = -1 },
		"lag age":         func(x *store.LagSample) { x.LagAgeMs = -1 },
		"bytes":           func(x *store.LagSample) { x.PartitionBytes = -1 },
		"retention ms":    func(x *store.LagSample) { x.RetentionMs = -2 },
		"retention bytes": func(x *store.LagSample) { x.RetentionBytes = -2 },
	} {
		bad := lagSample(k, time.Second)
		mod(&bad)
		err := s.AddLagSamples(ctx, []store.LagSample{good, bad})
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	// An unknown tenant fails the whole batch: nothing of it is stored.
	stranger := lagSample(lagKey(store.NewID(), "g", 0), 0)
	require.ErrorIs(t, s.AddLagSamples(ctx, []store.LagSample{good, stranger}), store.ErrNotFound)
	got, err := s.ListLagSamples(ctx, k, at(-time.Hour), time.Time{})
	require.NoError(t, err)
	require.Empty(t, got)
}

func testLagSampleLatest(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	topic := store.NewID()
	keys := []store.LagKey{
		{TenantID: a.ID, Group: "B-upper", TopicID: topic, Partition: 1},
		{TenantID: a.ID, Group: "a-lower", TopicID: topic, Partition: 1},
		{TenantID: a.ID, Group: "a-lower", TopicID: topic, Partition: 0},
	}
	var batch []store.LagSample
	for i, k := range keys {
		for j := range 3 {
			batch = append(batch, lagSample(k, time.Duration(10*j+i)*time.Second))
		}
	}
	bk := store.LagKey{TenantID: b.ID, Group: "a-lower", TopicID: topic, Partition: 0}
	batch = append(batch, lagSample(bk, time.Hour))
	require.NoError(t, s.AddLagSamples(ctx, batch))

	got, err := s.LatestLagSamples(ctx, a.ID)
	require.NoError(t, err)
	// Ordered by group (bytewise: upper case first), topic, partition.
	require.Equal(t, []store.LagSample{
		storedSample(lagSample(keys[0], 20*time.Second)),
		storedSample(lagSample(keys[2], 22*time.Second)),
		storedSample(lagSample(keys[1], 21*time.Second)),
	}, got)

	got, err = s.LatestLagSamples(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, []store.LagSample{storedSample(lagSample(bk, time.Hour))}, got)

	for _, id := range []string{store.NewID(), "not-a-uuid", ""} {
		got, err = s.LatestLagSamples(ctx, id)
		require.NoError(t, err)
		require.Empty(t, got, "tenant %q", id)
	}
}

func testLagSampleLatestAll(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.AllLatestLagSamples(ctx)
	require.NoError(t, err)
	require.Empty(t, got)

	var want []store.LagSample
	for range 3 {
		ten, _ := createTenant(t, s)
		k := lagKey(ten.ID, "g", 0)
		require.NoError(t, s.AddLagSamples(ctx, []store.LagSample{lagSample(k, 0), lagSample(k, time.Minute)}))
		want = append(want, storedSample(lagSample(k, time.Minute)))
	}
	got, err = s.AllLatestLagSamples(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, want, got)
	for i := 1; i < len(got); i++ {
		require.Less(t, got[i-1].TenantID, got[i].TenantID)
	}
}

func testLagSamplePrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	// Three keys: 30, 5 and 1 samples, one every 10 s from base.
	counts := []int{30, 5, 1}
	var keys []store.LagKey
	for i, n := range counts {
		k := lagKey(ten.ID, fmt.Sprintf("g%d", i), 0)
		keys = append(keys, k)
		var batch []store.LagSample
		for j := range n {
			batch = append(batch, lagSample(k, time.Duration(j)*10*time.Second))
		}
		require.NoError(t, s.AddLagSamples(ctx, batch))
	}
	history := func(k store.LagKey) []store.LagSample {
		got, err := s.ListLagSamples(ctx, k, at(-time.Hour), time.Time{})
		require.NoError(t, err)
		return got
	}

	// Nothing is older than base, and no cap: nothing goes.
	n, err := s.PruneLagSamples(ctx, at(0), 0)
	require.NoError(t, err)
	require.Zero(t, n)

	// The age cut: samples strictly before at(20s) go (2 of key 0, 2 of key 1, key 2's only one).
	n, err = s.PruneLagSamples(ctx, at(20*time.Second), 0)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	require.Len(t, history(keys[0]), 28)
	require.Len(t, history(keys[1]), 3)
	require.Empty(t, history(keys[2]))
	require.Equal(t, ms(at(20*time.Second)), history(keys[0])[0].SampledAt)

	// The per-key cap keeps the newest.
	n, err = s.PruneLagSamples(ctx, at(0), 10)
	require.NoError(t, err)
	require.EqualValues(t, 18, n)
	h := history(keys[0])
	require.Len(t, h, 10)
	require.Equal(t, ms(at(200*time.Second)), h[0].SampledAt)
	require.Equal(t, ms(at(290*time.Second)), h[9].SampledAt)
	require.Len(t, history(keys[1]), 3)

	// Both at once, and idempotent.
	n, err = s.PruneLagSamples(ctx, at(250*time.Second), 2)
	require.NoError(t, err)
	require.EqualValues(t, 5+3+3, n)
	require.Len(t, history(keys[0]), 2)
	require.Empty(t, history(keys[1]))
	n, err = s.PruneLagSamples(ctx, at(250*time.Second), 2)
	require.NoError(t, err)
	require.Zero(t, n)

	// The latest sample of each key is what is left.
	got, err := s.LatestLagSamples(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.LagSample{storedSample(lagSample(keys[0], 290*time.Second))}, got)
}

// testLagSampleForecast: a stored history feeds the forecast as is. With
// retention 7 days, a lag age of 1 day growing 6 hours per day (0.25 s/s),
// the oldest unconsumed record expires in 24 days (DESIGN.md §8).
func testLagSampleForecast(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	k := lagKey(ten.ID, "slow", 0)
	var batch []store.LagSample
	for i := range 61 {
		d := time.Duration(i) * time.Minute
		smp := lagSample(k, d)
		smp.LagAgeMs = (24*time.Hour + d/4).Milliseconds()
		smp.CommittedOffset, smp.LogEndOffset = int64(1000+3*i), int64(2000+4*i)
		smp.LagMessages = smp.LogEndOffset - smp.CommittedOffset
		batch = append(batch, smp)
	}
	require.NoError(t, s.AddLagSamples(ctx, batch))
	now := ms(at(time.Hour))
	history, err := s.ListLagSamples(ctx, k, now.Add(-time.Hour), now)
	require.NoError(t, err)
	require.Len(t, history, 61)

	r, err := forecast.Compute(now, store.ForecastSamples(history), forecast.Config{})
	require.NoError(t, err)
	require.Equal(t, forecast.StatusExpiring, r.Status, "%+v", r)
	last := 24*time.Hour + 15*time.Minute
	want := time.Duration(float64(7*24*time.Hour-last) / 0.25)
	require.InDelta(t, want.Seconds(), r.TimeToLoss.Seconds(), 1)
	require.Equal(t, forecast.Retention{Time: 7 * 24 * time.Hour}, r.Retention)
}

// testLagHistories: ListLagHistories answers, in one call, each key's
// ListLagSamples in [since, until] as the forecast takes it, in the order
// the keys were asked, with nothing for unknown, malformed or another
// tenant's keys, and refuses more than MaxLagHistoryKeys keys.
func testLagHistories(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	a, b, c := lagKey(ten.ID, "billing", 0), lagKey(ten.ID, "billing", 1), lagKey(ten.ID, "audit", 0)
	c.TopicID = a.TopicID // same topic and partition as a, another group
	theirs := lagKey(other.ID, "billing", 0)
	var batch []store.LagSample
	for i := range 10 {
		d := time.Duration(i) * 30 * time.Second
		for j, k := range []store.LagKey{a, b, c, theirs} {
			smp := lagSample(k, d)
			smp.CommittedOffset, smp.LagAgeMs = int64(100*j+i), int64(1000*j+i)
			smp.Offline = i == 3 && j == 1
			smp.UnconsumedBytes = int64(j)
			batch = append(batch, smp)
		}
	}
	require.NoError(t, s.AddLagSamples(ctx, batch))

	want := func(k store.LagKey, since, until time.Time) []forecast.Sample {
		hist, err := s.ListLagSamples(ctx, k, since, until)
		require.NoError(t, err)
		if len(hist) == 0 {
			return nil
		}
		return store.ForecastSamples(hist)
	}
	upper := strings.ToUpper(b.TopicID) // not canonical: still b
	bUpper := b
	bUpper.TopicID = upper
	theirsAsMine := theirs
	theirsAsMine.TenantID = ten.ID
	keys := []store.LagKey{
		c, bUpper, a,
		lagKey(ten.ID, "billing", 0),                             // unknown
		{TenantID: "nope", Group: "billing", TopicID: a.TopicID}, // malformed
		{TenantID: ten.ID, Group: "", TopicID: a.TopicID},        // malformed
		theirsAsMine, // another tenant's, under this tenant
		a,            // twice
	}
	for _, span := range [][2]time.Time{
		{at(0), time.Time{}},
		{at(90 * time.Second), at(150 * time.Second)},
		{at(time.Hour), time.Time{}},
	} {
		got, err := s.ListLagHistories(ctx, keys, span[0], span[1])
		require.NoError(t, err)
		require.Len(t, got, len(keys))
		require.Equal(t, want(c, span[0], span[1]), got[0], "since %v until %v", span[0], span[1])
		require.Equal(t, want(b, span[0], span[1]), got[1])
		require.Equal(t, want(a, span[0], span[1]), got[2])
		for i := 3; i < 7; i++ {
			require.Empty(t, got[i], "key %d", i)
		}
		require.Equal(t, got[2], got[7])
	}
	got, err := s.ListLagHistories(ctx, keys, at(0), time.Time{})
	require.NoError(t, err)
	require.Len(t, got[1], 10)
	require.True(t, got[1][3].Offline)
	require.Equal(t, ms(at(0)), got[0][0].Time)
	require.Equal(t, 2002*time.Millisecond, got[0][2].LagAge)

	got, err = s.ListLagHistories(ctx, nil, at(0), time.Time{})
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = s.ListLagHistories(ctx, make([]store.LagKey, store.MaxLagHistoryKeys+1), at(0), time.Time{})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrNotFound)
	got, err = s.ListLagHistories(ctx, make([]store.LagKey, store.MaxLagHistoryKeys), at(0), time.Time{})
	require.NoError(t, err)
	require.Len(t, got, store.MaxLagHistoryKeys)
}

// ---- alerts ----

func testAlertLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	key := alertKey(ten.ID, store.AlertRetentionExpiryRisk)
	id := store.NewID()
	// Details come back byte for byte: key order, spacing and number forms kept.
	details := json.RawMessage(`{"lag_messages": 5000, "growth": 2.50e-1, "advice": "add consumers", "a": null}`)

	a, err := s.TransitionAlert(ctx, store.AlertTransition{Key: key, TopicName: "orders", NewID: id, To: store.AlertPending, At: at(0), Details: details})
	require.NoError(t, err)
	want := store.Alert{ID: id, AlertKey: key, TopicName: "orders", State: store.AlertPending, Details: details,
		CreatedAt: ms(at(0)), UpdatedAt: ms(at(0))}
	require.Equal(t, want, a)
	requireUTC(t, a.CreatedAt, a.UpdatedAt)
	got, err := s.GetAlert(ctx, ten.ID, id)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// A refresh changes the details, ClearSince and UpdatedAt only.
	details = json.RawMessage(`{"lag_messages":6000}`)
	a, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: id, From: store.AlertPending, To: store.AlertPending, At: at(time.Minute), Details: details, ClearSince: at(time.Second)})
	require.NoError(t, err)
	require.Equal(t, details, a.Details)
	require.Equal(t, ms(at(time.Second)), a.ClearSince)
	requireUTC(t, a.ClearSince)
	require.Equal(t, ms(at(0)), a.CreatedAt)
	require.Equal(t, ms(at(time.Minute)), a.UpdatedAt)

	a = moveAlert(t, s, a, store.AlertFiring, 2*time.Minute)
	require.Equal(t, store.AlertFiring, a.State)
	require.True(t, a.ClearSince.IsZero(), "each transition sets ClearSince")
	require.Equal(t, ms(at(2*time.Minute)), a.FiredAt)
	require.True(t, a.ResolvedAt.IsZero())
	a = moveAlert(t, s, a, store.AlertFiring, 3*time.Minute)
	require.Equal(t, ms(at(2*time.Minute)), a.FiredAt, "a refresh keeps FiredAt")

	a = moveAlert(t, s, a, store.AlertResolved, 4*time.Minute)
	require.Equal(t, store.AlertResolved, a.State)
	require.Equal(t, ms(at(2*time.Minute)), a.FiredAt)
	require.Equal(t, ms(at(4*time.Minute)), a.ResolvedAt)
	require.Equal(t, ms(at(4*time.Minute)), a.UpdatedAt)
	got, err = s.GetAlert(ctx, ten.ID, id)
	require.NoError(t, err)
	require.Equal(t, a, got)

	// Resolved is final.
	for _, to := range []store.AlertState{store.AlertPending, store.AlertFiring, store.AlertResolved} {
		_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: id, From: store.AlertResolved, To: to, At: at(5 * time.Minute)})
		require.Error(t, err)
		require.False(t, isSentinel(err), "resolved → %s: %v", to, err)
	}

	// The key's next episode is a new alert, straight to firing; the store picks its id.
	b := openAlert(t, s, key, store.AlertFiring, 6*time.Minute)
	require.NotEqual(t, id, b.ID)
	_, ok := store.CanonicalID(b.ID)
	require.True(t, ok)
	require.Equal(t, ms(at(6*time.Minute)), b.FiredAt)
	// Pending may resolve without firing.
	c := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0)
	c = moveAlert(t, s, c, store.AlertResolved, time.Minute)
	require.True(t, c.FiredAt.IsZero())
	require.Equal(t, ms(at(time.Minute)), c.ResolvedAt)

	// A reused NewID is a taken id.
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: alertKey(ten.ID, store.AlertLagGrowing), NewID: id, To: store.AlertPending, At: at(0)})
	requireAlreadyExists(t, err, "alert id")
}

// testAlertRefresh: RefreshAlerts applies many From == To transitions at
// once, each as TransitionAlert would (details, UpdatedAt and ClearSince
// replaced, nothing else, no deliveries), compare-and-set each on its own:
// a stale state, another key, an unknown id or another tenant's changes
// nothing and only that refresh reports not applied. A malformed batch (one
// alert named twice included) is refused whole.
func testAlertRefresh(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	pend := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0)
	fire := openAlert(t, s, alertKey(ten.ID, store.AlertRetentionExpiryRisk), store.AlertFiring, 0)
	done := moveAlert(t, s, openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0), store.AlertResolved, time.Second)
	theirs := openAlert(t, s, alertKey(other.ID, store.AlertLagGrowing), store.AlertPending, 0)
	fire2 := openAlert(t, s, alertKey(ten.ID, store.AlertRetentionExpiryRisk), store.AlertFiring, 0)
	pend2 := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0)

	refresh := func(a store.Alert, state store.AlertState, details string, clear time.Time) store.AlertTransition {
		return store.AlertTransition{Key: a.AlertKey, ID: a.ID, From: state, To: state, Details: json.RawMessage(details), ClearSince: clear, At: at(time.Minute)}
	}
	wrongKey := refresh(pend2, store.AlertPending, `{"lag_messages":1}`, time.Time{})
	wrongKey.Key.Group = "elsewhere"
	theirsAsMine := refresh(theirs, store.AlertPending, `{"lag_messages":1}`, time.Time{})
	theirsAsMine.Key.TenantID = ten.ID
	clearAt := at(30 * time.Second)
	applied, err := s.RefreshAlerts(ctx, []store.AlertTransition{
		refresh(pend, store.AlertPending, `{"lag_messages":200}`, time.Time{}),
		refresh(fire, store.AlertFiring, `{"lag_messages":300}`, clearAt),
		refresh(fire2, store.AlertPending, `{"lag_messages":1}`, time.Time{}), // stale state
		refresh(done, store.AlertFiring, `{"lag_messages":1}`, time.Time{}),   // resolved: final
		wrongKey,
		theirsAsMine,
		refresh(store.Alert{ID: store.NewID(), AlertKey: pend.AlertKey}, store.AlertPending, `{"lag_messages":1}`, time.Time{}),
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, false, false, false, false, false}, applied)

	want := pend
	want.Details, want.UpdatedAt = json.RawMessage(`{"lag_messages":200}`), ms(at(time.Minute))
	got, err := s.GetAlert(ctx, ten.ID, pend.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)
	want = fire
	want.Details, want.UpdatedAt, want.ClearSince = json.RawMessage(`{"lag_messages":300}`), ms(at(time.Minute)), ms(clearAt)
	got, err = s.GetAlert(ctx, ten.ID, fire.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)
	for _, a := range []store.Alert{done, theirs, fire2, pend2} {
		got, err := s.GetAlert(ctx, a.TenantID, a.ID)
		require.NoError(t, err)
		require.Equal(t, a, got, "unchanged")
	}
	log, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Empty(t, log, "a refresh announces nothing")

	// Malformed: refused whole.
	for name, bad := range map[string]store.AlertTransition{
		"not a refresh": {Key: pend.AlertKey, ID: pend.ID, From: store.AlertPending, To: store.AlertFiring},
		"creation":      {Key: pend.AlertKey, To: store.AlertPending},
		"details":       refresh(pend, store.AlertPending, `[1]`, time.Time{}),
		"id":            refresh(store.Alert{ID: "nope", AlertKey: pend.AlertKey}, store.AlertPending, `{}`, time.Time{}),
		"twice":         refresh(pend, store.AlertPending, `{"lag_messages":10}`, time.Time{}),
	} {
		_, err := s.RefreshAlerts(ctx, []store.AlertTransition{refresh(pend, store.AlertPending, `{"lag_messages":9}`, time.Time{}), bad})
		require.Error(t, err, name)
		require.False(t, errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound), name)
	}
	got, err = s.GetAlert(ctx, ten.ID, pend.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"lag_messages":200}`, string(got.Details))
	_, err = s.RefreshAlerts(ctx, make([]store.AlertTransition, store.MaxAlertRefreshes+1))
	require.Error(t, err)
	applied, err = s.RefreshAlerts(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, applied)
}

func testAlertCompareAndSet(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	key := alertKey(ten.ID, store.AlertLagGrowing)
	a := openAlert(t, s, key, store.AlertPending, 0)

	// The key has an active alert: a second creation loses.
	_, err := s.TransitionAlert(ctx, store.AlertTransition{Key: key, To: store.AlertPending, At: at(time.Second)})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, To: store.AlertFiring, At: at(time.Second)})
	require.ErrorIs(t, err, store.ErrConflict)

	// The same group and topic under another kind or partition is another key.
	other := key
	other.Kind = store.AlertRetentionExpiryRisk
	openAlert(t, s, other, store.AlertPending, 0)
	other = key
	other.Partition = 4
	openAlert(t, s, other, store.AlertPending, 0)

	// A stale From loses, and changes nothing.
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: a.ID, From: store.AlertFiring, To: store.AlertResolved, At: at(time.Minute)})
	require.ErrorIs(t, err, store.ErrConflict)
	a = moveAlert(t, s, a, store.AlertFiring, time.Minute)
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: a.ID, From: store.AlertPending, To: store.AlertFiring, At: at(time.Minute)})
	require.ErrorIs(t, err, store.ErrConflict)
	got, err := s.GetAlert(ctx, ten.ID, a.ID)
	require.NoError(t, err)
	require.Equal(t, a, got)

	// The id must be the key's alert.
	wrongKey := key
	wrongKey.Group = "elsewhere"
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: wrongKey, ID: a.ID, From: store.AlertFiring, To: store.AlertResolved, At: at(time.Minute)})
	require.ErrorIs(t, err, store.ErrConflict)

	// Unknown id, or the id under another tenant → not found.
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: store.NewID(), From: store.AlertFiring, To: store.AlertResolved, At: at(time.Minute)})
	require.ErrorIs(t, err, store.ErrNotFound)
	b, _ := createTenant(t, s)
	bKey := key
	bKey.TenantID = b.ID
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: bKey, ID: a.ID, From: store.AlertFiring, To: store.AlertResolved, At: at(time.Minute)})
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err = s.GetAlert(ctx, ten.ID, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.AlertFiring, got.State)

	// Once resolved, the key may open again.
	moveAlert(t, s, a, store.AlertResolved, 2*time.Minute)
	openAlert(t, s, key, store.AlertPending, 3*time.Minute)

	// An unknown tenant cannot create.
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: alertKey(store.NewID(), store.AlertLagGrowing), To: store.AlertPending})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAlertInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	valid := store.AlertTransition{Key: alertKey(ten.ID, store.AlertLagGrowing), To: store.AlertPending}
	for name, mod := range map[string]func(*store.AlertTransition){
		"tenant":          func(tr *store.AlertTransition) { tr.Key.TenantID = "x" },
		"topic":           func(tr *store.AlertTransition) { tr.Key.TopicID = "" },
		"kind":            func(tr *store.AlertTransition) { tr.Key.Kind = "lag" },
		"group":           func(tr *store.AlertTransition) { tr.Key.Group = "" },
		"partition":       func(tr *store.AlertTransition) { tr.Key.Partition = -1 },
		"to":              func(tr *store.AlertTransition) { tr.To = "open" },
		"none → resolved": func(tr *store.AlertTransition) { tr.To = store.AlertResolved },
		"firing → pending": func(tr *store.AlertTransition) {
			tr.From, tr.To, tr.ID = store.AlertFiring, store.AlertPending, store.NewID()
		},
		"from":          func(tr *store.AlertTransition) { tr.From, tr.ID = "open", store.NewID() },
		"no id":         func(tr *store.AlertTransition) { tr.From = store.AlertPending },
		"new id":        func(tr *store.AlertTransition) { tr.NewID = "x" },
		"empty to":      func(tr *store.AlertTransition) { tr.To = "" },
		"details array": func(tr *store.AlertTransition) { tr.Details = json.RawMessage(`[1]`) },
		"details null":  func(tr *store.AlertTransition) { tr.Details = json.RawMessage(`null`) },
		"details junk":  func(tr *store.AlertTransition) { tr.Details = json.RawMessage(`{"a":`) },
		"details NUL":   func(tr *store.AlertTransition) { tr.Details = json.RawMessage("{\"a\":\"\x00\"}") },
		"group NUL":     func(tr *store.AlertTransition) { tr.Key.Group = "\x00" },
	} {
		tr := valid
		mod(&tr)
		_, err := s.TransitionAlert(ctx, tr)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	list, err := s.ListAlerts(ctx, ten.ID, store.AlertQuery{})
	require.NoError(t, err)
	require.Empty(t, list)
}

func testAlertList(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	// 7 alerts created a second apart: even ones firing, 0 and 3 resolved.
	var all []store.Alert
	for i := range 7 {
		a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, time.Duration(i)*time.Second)
		if i%2 == 0 {
			a = moveAlert(t, s, a, store.AlertFiring, time.Minute)
		}
		if i == 0 || i == 3 {
			a = moveAlert(t, s, a, store.AlertResolved, 2*time.Minute)
		}
		all = append(all, a)
	}
	newest := func(idx ...int) []store.Alert {
		var out []store.Alert
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}

	got, err := s.ListAlerts(ctx, ten.ID, store.AlertQuery{})
	require.NoError(t, err)
	require.Equal(t, newest(6, 5, 4, 3, 2, 1, 0), got)

	// Pages of 3.
	var paged []store.Alert
	after := ""
	for {
		page, err := s.ListAlerts(ctx, ten.ID, store.AlertQuery{Limit: 3, AfterID: after})
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 3)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].ID
	}
	require.Equal(t, got, paged)

	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{States: []store.AlertState{store.AlertFiring}})
	require.NoError(t, err)
	require.Equal(t, newest(6, 4, 2), got)
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{States: []store.AlertState{store.AlertPending, store.AlertFiring}, Limit: 2, AfterID: all[6].ID})
	require.NoError(t, err)
	require.Equal(t, newest(5, 4), got)
	got, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{States: []store.AlertState{store.AlertResolved}})
	require.NoError(t, err)
	require.Equal(t, newest(3, 0), got)

	// Unknown cursors, and another tenant's id as a cursor.
	_, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{AfterID: store.NewID()})
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.ListAlerts(ctx, ten.ID, store.AlertQuery{AfterID: "nope"})
	require.ErrorIs(t, err, store.ErrNotFound)
	b, _ := createTenant(t, s)
	_, err = s.ListAlerts(ctx, b.ID, store.AlertQuery{AfterID: all[3].ID})
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAlertTenantIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	// Same group, topic id and partition in both tenants: separate keys.
	ka := alertKey(a.ID, store.AlertRetentionExpired)
	kb := ka
	kb.TenantID = b.ID
	alertA := openAlert(t, s, ka, store.AlertFiring, 0)
	alertB := openAlert(t, s, kb, store.AlertFiring, 0)

	_, err := s.GetAlert(ctx, b.ID, alertA.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetAlert(ctx, a.ID, alertB.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetAlert(ctx, "", alertA.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err := s.ListAlerts(ctx, b.ID, store.AlertQuery{})
	require.NoError(t, err)
	require.Equal(t, []store.Alert{alertB}, got)
	got, err = s.ListAlerts(ctx, "", store.AlertQuery{})
	require.NoError(t, err)
	require.Empty(t, got)
}

func testAlertListActive(t *testing.T, s store.Store) {
	ctx := t.Context()
	got, err := s.ListActiveAlerts(ctx)
	require.NoError(t, err)
	require.Empty(t, got)
	var want []store.Alert
	for range 2 {
		ten, _ := createTenant(t, s)
		want = append(want, openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0))
		want = append(want, openAlert(t, s, alertKey(ten.ID, store.AlertRetentionExpired), store.AlertFiring, 0))
		gone := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertFiring, 0)
		moveAlert(t, s, gone, store.AlertResolved, time.Minute)
	}
	got, err = s.ListActiveAlerts(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, want, got)
	for i := 1; i < len(got); i++ {
		require.LessOrEqual(t, got[i-1].TenantID, got[i].TenantID)
	}
}

// testAlertNotify: a state change with a payload enqueues one delivery per
// webhook of the tenant, in its transaction; a refresh enqueues nothing; a
// payload error aborts the change.
func testAlertNotify(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	h1 := createWebhook(t, s, ten.ID, at(0))
	h2 := createWebhook(t, s, ten.ID, at(time.Second))
	hOther := createWebhook(t, s, other.ID, at(0))
	payload := func(a store.Alert) ([]byte, error) {
		return fmt.Appendf(nil, `{"alert":%q,"state":%q}`, a.ID, a.State), nil
	}
	key := alertKey(ten.ID, store.AlertRetentionExpiryRisk)

	a, err := s.TransitionAlert(ctx, store.AlertTransition{Key: key, To: store.AlertPending, At: at(time.Minute), Payload: payload})
	require.NoError(t, err)
	a, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: a.ID, From: store.AlertPending, To: store.AlertPending, At: at(2 * time.Minute), Payload: payload})
	require.NoError(t, err)
	a, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: a.ID, From: store.AlertPending, To: store.AlertFiring, At: at(3 * time.Minute), Payload: payload})
	require.NoError(t, err)

	for _, h := range []store.Webhook{h1, h2} {
		log, err := s.ListDeliveries(ctx, ten.ID, h.ID, 0)
		require.NoError(t, err)
		require.Len(t, log, 2)
		require.Equal(t, []store.AlertState{store.AlertFiring, store.AlertPending}, []store.AlertState{log[0].AlertState, log[1].AlertState})
		for _, d := range log {
			require.Equal(t, a.ID, d.AlertID)
			require.Equal(t, ten.ID, d.TenantID)
			require.Equal(t, store.DeliveryPending, d.Status)
			require.JSONEq(t, fmt.Sprintf(`{"alert":%q,"state":%q}`, a.ID, d.AlertState), string(d.Payload))
		}
		require.Equal(t, ms(at(3*time.Minute)), log[0].CreatedAt)
		require.Equal(t, ms(at(3*time.Minute)), log[0].NextAttemptAt)
	}
	log, err := s.ListDeliveries(ctx, other.ID, hOther.ID, 0)
	require.NoError(t, err)
	require.Empty(t, log)

	// A payload error aborts the change: the alert stays firing.
	boom := errors.New("boom")
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: key, ID: a.ID, From: store.AlertFiring, To: store.AlertResolved, At: at(4 * time.Minute),
		Payload: func(store.Alert) ([]byte, error) { return nil, boom }})
	require.ErrorIs(t, err, boom)
	got, err := s.GetAlert(ctx, ten.ID, a.ID)
	require.NoError(t, err)
	require.Equal(t, store.AlertFiring, got.State)

	// Without webhooks, the payload is not even built.
	lonely, _ := createTenant(t, s)
	_, err = s.TransitionAlert(ctx, store.AlertTransition{Key: alertKey(lonely.ID, store.AlertLagGrowing), To: store.AlertFiring,
		Payload: func(store.Alert) ([]byte, error) { return nil, boom }})
	require.NoError(t, err)
}

// ---- webhooks ----

func testWebhookCreateGetListDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	id := store.NewID()
	w, err := s.CreateWebhook(ctx, store.Webhook{ID: id, TenantID: ten.ID, URL: "https://example.com/hook?x=1", Description: "pager", CreatedAt: at(time.Minute)}, secret(), 10)
	require.NoError(t, err)
	want := store.Webhook{ID: id, TenantID: ten.ID, URL: "https://example.com/hook?x=1", Description: "pager", CreatedAt: ms(at(time.Minute))}
	require.Equal(t, want, w)
	requireUTC(t, w.CreatedAt)
	got, err := s.GetWebhook(ctx, ten.ID, id)
	require.NoError(t, err)
	require.Equal(t, want, got)

	w2 := createWebhook(t, s, ten.ID, at(0))
	list, err := s.ListWebhooks(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.Webhook{w2, want}, list)

	_, err = s.CreateWebhook(ctx, store.Webhook{ID: id, TenantID: ten.ID, URL: "https://example.com/"}, secret(), 0)
	requireAlreadyExists(t, err, "webhook id")

	require.NoError(t, s.DeleteWebhook(ctx, ten.ID, id))
	require.ErrorIs(t, s.DeleteWebhook(ctx, ten.ID, id), store.ErrNotFound)
	_, err = s.GetWebhook(ctx, ten.ID, id)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err = s.ListWebhooks(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.Webhook{w2}, list)

	_, err = s.CreateWebhook(ctx, store.Webhook{TenantID: store.NewID(), URL: "https://example.com/"}, secret(), 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, bad := range []string{"", "nope"} {
		_, err = s.GetWebhook(ctx, ten.ID, bad)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.ErrorIs(t, s.DeleteWebhook(ctx, ten.ID, bad), store.ErrNotFound)
	}
}

func testWebhookLimit(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	for range 3 {
		_, err := s.CreateWebhook(ctx, store.Webhook{TenantID: ten.ID, URL: "https://example.com/"}, secret(), 3)
		require.NoError(t, err)
	}
	_, err := s.CreateWebhook(ctx, store.Webhook{TenantID: ten.ID, URL: "https://example.com/"}, secret(), 3)
	requireLimit(t, err, store.LimitError{Limit: "webhooks", Current: 3, Request: 1, Max: 3})
	// The limit is per tenant.
	other, _ := createTenant(t, s)
	_, err = s.CreateWebhook(ctx, store.Webhook{TenantID: other.ID, URL: "https://example.com/"}, secret(), 3)
	require.NoError(t, err)
	// Deleting one makes room.
	list, err := s.ListWebhooks(ctx, ten.ID)
	require.NoError(t, err)
	require.NoError(t, s.DeleteWebhook(ctx, ten.ID, list[0].ID))
	_, err = s.CreateWebhook(ctx, store.Webhook{TenantID: ten.ID, URL: "https://example.com/"}, secret(), 3)
	require.NoError(t, err)
}

func testWebhookInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	long := "https://example.com/" + string(make([]byte, store.MaxWebhookURLBytes))
	for name, tc := range map[string]struct {
		w      store.Webhook
		secret []byte
	}{
		"scheme":       {store.Webhook{TenantID: ten.ID, URL: "ftp://example.com/"}, secret()},
		"relative":     {store.Webhook{TenantID: ten.ID, URL: "/hook"}, secret()},
		"no host":      {store.Webhook{TenantID: ten.ID, URL: "https:///x"}, secret()},
		"user info":    {store.Webhook{TenantID: ten.ID, URL: "https://u:p@example.com/"}, secret()},
		"long url":     {store.Webhook{TenantID: ten.ID, URL: long}, secret()},
		"bad url":      {store.Webhook{TenantID: ten.ID, URL: "https://exa mple.com/%zz"}, secret()},
		"description":  {store.Webhook{TenantID: ten.ID, URL: "https://example.com/", Description: string(make([]byte, store.MaxWebhookDescriptionBytes+1))}, secret()},
		"short secret": {store.Webhook{TenantID: ten.ID, URL: "https://example.com/"}, []byte("short")},
		"tenant id":    {store.Webhook{TenantID: "x", URL: "https://example.com/"}, secret()},
		"id":           {store.Webhook{ID: "x", TenantID: ten.ID, URL: "https://example.com/"}, secret()},
	} {
		_, err := s.CreateWebhook(ctx, tc.w, tc.secret, 0)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
	list, err := s.ListWebhooks(ctx, ten.ID)
	require.NoError(t, err)
	require.Empty(t, list)
}

func testWebhookTenantIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	wa := createWebhook(t, s, a.ID, at(0))
	wb := createWebhook(t, s, b.ID, at(0))

	_, err := s.GetWebhook(ctx, b.ID, wa.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.DeleteWebhook(ctx, b.ID, wa.ID), store.ErrNotFound)
	_, err = s.ListDeliveries(ctx, b.ID, wa.ID, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err := s.ListWebhooks(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, []store.Webhook{wb}, list)
	list, err = s.ListWebhooks(ctx, "")
	require.NoError(t, err)
	require.Empty(t, list)
	// A's webhook survived B's attempt.
	_, err = s.GetWebhook(ctx, a.ID, wa.ID)
	require.NoError(t, err)
}

// ---- deliveries ----

// enqueue enqueues a delivery of alert a's state to webhook w.
func enqueue(t *testing.T, s store.Store, w store.Webhook, a store.Alert, created time.Time) (store.Delivery, bool) {
	t.Helper()
	d, ok, err := s.EnqueueDelivery(t.Context(), store.Delivery{TenantID: w.TenantID, WebhookID: w.ID, AlertID: a.ID, AlertState: a.State,
		Payload: fmt.Appendf(nil, `{"alert":%q}`, a.ID), CreatedAt: created})
	require.NoError(t, err)
	return d, ok
}

func testDeliveryEnqueueDedup(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertFiring, 0)

	id := store.NewID()
	d, created, err := s.EnqueueDelivery(ctx, store.Delivery{ID: id, TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertFiring,
		Payload: []byte(`{"n":1}`), CreatedAt: at(time.Minute), NextAttemptAt: at(2 * time.Minute),
		// Ignored on enqueue:
		Status: store.DeliveryDelivered, Attempts: 9, LastError: "x", DeliveredAt: at(0)})
	require.NoError(t, err)
	require.True(t, created)
	want := store.Delivery{ID: id, TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertFiring, Payload: []byte(`{"n":1}`),
		Status: store.DeliveryPending, NextAttemptAt: ms(at(2 * time.Minute)), CreatedAt: ms(at(time.Minute))}
	require.Equal(t, want, d)
	requireUTC(t, d.CreatedAt, d.NextAttemptAt)

	// The same state change again: the stored one, unchanged.
	d, created, err = s.EnqueueDelivery(ctx, store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertFiring, Payload: []byte(`{"n":2}`)})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, want, d)

	// Another state of the alert is another delivery.
	_, created = enqueue(t, s, w, store.Alert{ID: a.ID, State: store.AlertResolved}, at(time.Hour))
	require.True(t, created)
	// Test deliveries are never deduplicated.
	for range 2 {
		_, created, err = s.EnqueueDelivery(ctx, store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertStateTest, Payload: []byte(`{"test":true}`), CreatedAt: at(2 * time.Hour)})
		require.NoError(t, err)
		require.True(t, created)
	}
	log, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 4)
	require.Empty(t, log[0].AlertID)
	require.Equal(t, store.AlertStateTest, log[0].AlertState)

	// Malformed deliveries.
	for name, d := range map[string]store.Delivery{
		"no payload":   {TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertFiring},
		"test + alert": {TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertStateTest, Payload: []byte("{}")},
		"no alert":     {TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertFiring, Payload: []byte("{}")},
		"bad state":    {TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: "open", Payload: []byte("{}")},
		"bad webhook":  {TenantID: ten.ID, WebhookID: "x", AlertID: a.ID, AlertState: store.AlertFiring, Payload: []byte("{}")},
		"bad alert":    {TenantID: ten.ID, WebhookID: w.ID, AlertID: "x", AlertState: store.AlertFiring, Payload: []byte("{}")},
		"bad id":       {ID: "x", TenantID: ten.ID, WebhookID: w.ID, AlertID: a.ID, AlertState: store.AlertPending, Payload: []byte("{}")},
	} {
		_, _, err := s.EnqueueDelivery(ctx, d)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), "%s: %v", name, err)
	}
}

func testDeliveryEnqueueScoping(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	wa := createWebhook(t, s, a.ID, at(0))
	wb := createWebhook(t, s, b.ID, at(0))
	alertA := openAlert(t, s, alertKey(a.ID, store.AlertLagGrowing), store.AlertFiring, 0)
	alertB := openAlert(t, s, alertKey(b.ID, store.AlertLagGrowing), store.AlertFiring, 0)

	for name, d := range map[string]store.Delivery{
		"B's webhook under A":      {TenantID: a.ID, WebhookID: wb.ID, AlertID: alertA.ID, AlertState: store.AlertFiring, Payload: []byte("{}")},
		"B's alert to A's webhook": {TenantID: a.ID, WebhookID: wa.ID, AlertID: alertB.ID, AlertState: store.AlertFiring, Payload: []byte("{}")},
		"unknown webhook":          {TenantID: a.ID, WebhookID: store.NewID(), AlertID: alertA.ID, AlertState: store.AlertFiring, Payload: []byte("{}")},
		"unknown alert":            {TenantID: a.ID, WebhookID: wa.ID, AlertID: store.NewID(), AlertState: store.AlertFiring, Payload: []byte("{}")},
		"unknown tenant":           {TenantID: store.NewID(), WebhookID: wa.ID, AlertState: store.AlertStateTest, Payload: []byte("{}")},
	} {
		_, _, err := s.EnqueueDelivery(ctx, d)
		require.ErrorIs(t, err, store.ErrNotFound, name)
	}
	for _, w := range []store.Webhook{wa, wb} {
		log, err := s.ListDeliveries(ctx, w.TenantID, w.ID, 0)
		require.NoError(t, err)
		require.Empty(t, log)
	}
}

func testDeliveryClaimLease(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	sec := secret()
	w2, err := s.CreateWebhook(ctx, store.Webhook{TenantID: ten.ID, URL: "http://hooks.example.com:8080/x"}, sec, 0)
	require.NoError(t, err)
	a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertFiring, 0)
	d1, _ := enqueue(t, s, w, a, at(time.Second))
	d2, _ := enqueue(t, s, w2, a, at(2*time.Second))
	_, _, err = s.EnqueueDelivery(ctx, store.Delivery{TenantID: ten.ID, WebhookID: w.ID, AlertState: store.AlertStateTest, Payload: []byte("{}"),
		CreatedAt: at(0), NextAttemptAt: at(time.Hour)})
	require.NoError(t, err)

	_, err = s.ClaimDeliveries(ctx, at(0), 0, 10)
	require.Error(t, err)
	_, err = s.ClaimDeliveries(ctx, at(0), time.Minute, 0)
	require.Error(t, err)

	// Nothing is due before its next attempt.
	got, err := s.ClaimDeliveries(ctx, at(0), time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	// Oldest due first, at most limit.
	now := at(10 * time.Second)
	got, err = s.ClaimDeliveries(ctx, now, time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	c1 := got[0]
	require.Equal(t, d1, c1.Delivery)
	require.Equal(t, w.URL, c1.URL)
	require.NotEmpty(t, c1.Secret)
	require.NotEmpty(t, c1.LeaseToken)
	require.Equal(t, ms(now.Add(time.Minute)), c1.LeaseExpiresAt)
	requireUTC(t, c1.LeaseExpiresAt)

	got, err = s.ClaimDeliveries(ctx, now, time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 1, "the leased delivery is not claimed again")
	c2 := got[0]
	require.Equal(t, d2, c2.Delivery)
	require.Equal(t, "http://hooks.example.com:8080/x", c2.URL)
	require.Equal(t, sec, c2.Secret)
	require.NotEqual(t, c1.LeaseToken, c2.LeaseToken)

	// The lease of c1 expires: it is claimed again, under a new token; the old one is dead.
	got, err = s.ClaimDeliveries(ctx, now.Add(time.Minute), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{d1.ID, d2.ID}, []string{got[0].ID, got[1].ID})
	c1b := got[0]
	_, err = s.MarkDelivered(ctx, d1.ID, c1.LeaseToken, now)
	require.ErrorIs(t, err, store.ErrConflict)

	done, err := s.MarkDelivered(ctx, d1.ID, c1b.LeaseToken, now.Add(61*time.Second))
	require.NoError(t, err)
	require.Equal(t, store.DeliveryDelivered, done.Status)
	require.EqualValues(t, 1, done.Attempts)
	require.Equal(t, ms(now.Add(61*time.Second)), done.DeliveredAt)
	// Marked: the token is spent, and it is never claimed again.
	_, err = s.MarkDelivered(ctx, d1.ID, c1b.LeaseToken, now)
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.MarkDeliveryFailed(ctx, d1.ID, c1b.LeaseToken, store.DeliveryFailure{At: now, Error: "late"}, store.RetryPolicy{})
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.MarkDelivered(ctx, store.NewID(), c1b.LeaseToken, now)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.MarkDelivered(ctx, "nope", c1b.LeaseToken, now)
	require.ErrorIs(t, err, store.ErrNotFound)

	got, err = s.ClaimDeliveries(ctx, at(24*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Len(t, got, 2, "d2 (lease expired) and the test delivery, not d1")
	require.NotContains(t, []string{got[0].ID, got[1].ID}, d1.ID)
}

func testDeliveryRetry(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertFiring, 0)
	d, _ := enqueue(t, s, w, a, at(0))
	policy := store.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Second, MaxBackoff: 15 * time.Second}

	now := at(0)
	claim := func() store.ClaimedDelivery {
		t.Helper()
		got, err := s.ClaimDeliveries(ctx, now, time.Minute, 10)
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0]
	}
	c := claim()
	// A long error with a NUL and invalid UTF-8 (a raw response body) is stored cleaned and cut.
	long := "\x00\xff" + strings.Repeat("é", 2*store.MaxDeliveryErrorBytes)
	f, err := s.MarkDeliveryFailed(ctx, d.ID, c.LeaseToken, store.DeliveryFailure{At: now, Error: long}, policy)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, f.Status)
	require.EqualValues(t, 1, f.Attempts)
	require.Equal(t, ms(now.Add(10*time.Second)), f.NextAttemptAt)
	require.LessOrEqual(t, len(f.LastError), store.MaxDeliveryErrorBytes)
	require.Greater(t, len(f.LastError), store.MaxDeliveryErrorBytes-2)
	require.True(t, store.PlainText(f.LastError))
	require.True(t, strings.HasPrefix(f.LastError, "\uFFFD\uFFFDé"), "%q", f.LastError[:10])

	// Not due before the backoff, lease or not.
	got, err := s.ClaimDeliveries(ctx, now.Add(9*time.Second), time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	now = now.Add(10 * time.Second)
	c = claim()
	require.EqualValues(t, 1, c.Attempts)
	f, err = s.MarkDeliveryFailed(ctx, d.ID, c.LeaseToken, store.DeliveryFailure{At: now, Error: "503"}, policy)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryPending, f.Status)
	require.Equal(t, ms(now.Add(15*time.Second)), f.NextAttemptAt, "doubled, capped at MaxBackoff")
	require.Equal(t, "503", f.LastError)

	now = now.Add(15 * time.Second)
	c = claim()
	f, err = s.MarkDeliveryFailed(ctx, d.ID, c.LeaseToken, store.DeliveryFailure{At: now, Error: "503"}, policy)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, f.Status, "MaxAttempts reached")
	require.EqualValues(t, 3, f.Attempts)
	got, err = s.ClaimDeliveries(ctx, now.Add(24*time.Hour), time.Minute, 10)
	require.NoError(t, err)
	require.Empty(t, got)

	// A permanent failure stops at once.
	d2, _ := enqueue(t, s, w, store.Alert{ID: a.ID, State: store.AlertResolved}, now)
	c = claim()
	require.Equal(t, d2.ID, c.ID)
	f, err = s.MarkDeliveryFailed(ctx, d2.ID, c.LeaseToken, store.DeliveryFailure{At: now, Error: "410 Gone", Permanent: true}, policy)
	require.NoError(t, err)
	require.Equal(t, store.DeliveryFailed, f.Status)
	require.EqualValues(t, 1, f.Attempts)
	require.Equal(t, "410 Gone", f.LastError)
}

func testDeliveryLogAndCascade(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	keep := createWebhook(t, s, ten.ID, at(0))
	var want []store.Delivery
	for i := range 5 {
		a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertFiring, 0)
		d, _ := enqueue(t, s, w, a, at(time.Duration(i)*time.Second))
		enqueue(t, s, keep, a, at(0))
		want = append([]store.Delivery{d}, want...)
	}
	log, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Equal(t, want, log)
	log, err = s.ListDeliveries(ctx, ten.ID, w.ID, 2)
	require.NoError(t, err)
	require.Equal(t, want[:2], log)

	require.NoError(t, s.DeleteWebhook(ctx, ten.ID, w.ID))
	_, err = s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.ErrorIs(t, err, store.ErrNotFound)
	for _, d := range want {
		_, err = s.MarkDelivered(ctx, d.ID, store.NewID(), at(0))
		require.ErrorIs(t, err, store.ErrNotFound, "deleted with the webhook")
	}
	log, err = s.ListDeliveries(ctx, ten.ID, keep.ID, 0)
	require.NoError(t, err)
	require.Len(t, log, 5)
}

func testDeliveryPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	w := createWebhook(t, s, ten.ID, at(0))
	a := openAlert(t, s, alertKey(ten.ID, store.AlertLagGrowing), store.AlertPending, 0)
	old, _ := enqueue(t, s, w, a, at(0))
	a = moveAlert(t, s, a, store.AlertFiring, time.Minute)
	pendingOld, _ := enqueue(t, s, w, a, at(time.Second))
	got, err := s.ClaimDeliveries(ctx, at(0), time.Minute, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, old.ID, got[0].ID)
	_, err = s.MarkDelivered(ctx, old.ID, got[0].LeaseToken, at(0))
	require.NoError(t, err)
	a = moveAlert(t, s, a, store.AlertResolved, time.Hour)
	recent, _ := enqueue(t, s, w, a, at(time.Hour))

	n, err := s.PruneDeliveries(ctx, at(2*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	log, err := s.ListDeliveries(ctx, ten.ID, w.ID, 0)
	require.NoError(t, err)
	require.Equal(t, []string{recent.ID, pendingOld.ID}, []string{log[0].ID, log[1].ID})
	require.Len(t, log, 2)
}
