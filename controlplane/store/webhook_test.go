package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

func TestStoreRetryPolicy(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := store.RetryPolicy{MaxAttempts: 6, MinBackoff: time.Second, MaxBackoff: 5 * time.Second}
	for attempts, want := range map[int32]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 5: 5 * time.Second} {
		next, retry := p.Next(attempts, now)
		require.True(t, retry, "attempt %d", attempts)
		require.Equal(t, now.Add(want), next, "attempt %d", attempts)
	}
	_, retry := p.Next(6, now)
	require.False(t, retry)

	// Defaults: 8 attempts, 10 s doubling to 1 h.
	var d store.RetryPolicy
	next, retry := d.Next(1, now)
	require.True(t, retry)
	require.Equal(t, now.Add(10*time.Second), next)
	next, _ = d.Next(7, now)
	require.Equal(t, now.Add(640*time.Second), next)
	_, retry = d.Next(8, now)
	require.False(t, retry)
	// No overflow for huge attempt counts under a huge MaxAttempts.
	next, retry = store.RetryPolicy{MaxAttempts: 1 << 30}.Next(1<<29, now)
	require.True(t, retry)
	require.Equal(t, now.Add(time.Hour), next)

	status, at, msg := store.DecideDeliveryFailure(1, store.DeliveryFailure{At: now, Error: "x", Permanent: true}, p)
	require.Equal(t, store.DeliveryFailed, status)
	require.Equal(t, now, at)
	require.Equal(t, "x", msg)
}

func TestStoreCleanText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", store.CleanText("abc", 10))
	require.Equal(t, "\uFFFDa\uFFFD", store.CleanText("\x00a\xff", 10))
	require.Equal(t, "é", store.CleanText("éé", 3), "cut at a rune boundary")
	require.Equal(t, "", store.CleanText("é", 1))
	s := store.CleanText(strings.Repeat("\x00é", 1000), 1024)
	require.LessOrEqual(t, len(s), 1024)
	require.True(t, store.PlainText(s))
}

func TestStoreAlertTransitionRules(t *testing.T) {
	t.Parallel()
	key := store.AlertKey{TenantID: store.NewID(), Kind: store.AlertLagGrowing, Group: "g", TopicID: store.NewID()}
	states := []store.AlertState{store.AlertNone, store.AlertPending, store.AlertFiring, store.AlertResolved}
	legal := map[[2]store.AlertState]bool{
		{store.AlertNone, store.AlertPending}: true, {store.AlertNone, store.AlertFiring}: true,
		{store.AlertPending, store.AlertPending}: true, {store.AlertPending, store.AlertFiring}: true, {store.AlertPending, store.AlertResolved}: true,
		{store.AlertFiring, store.AlertFiring}: true, {store.AlertFiring, store.AlertResolved}: true,
	}
	for _, from := range states {
		for _, to := range states {
			_, err := store.CheckAlertTransition(store.AlertTransition{Key: key, ID: store.NewID(), From: from, To: to})
			require.Equal(t, legal[[2]store.AlertState{from, to}], err == nil, "%q → %q: %v", from, to, err)
		}
	}
}
