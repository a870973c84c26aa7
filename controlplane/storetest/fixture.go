package storetest

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// base is a time with nanoseconds in a zone that is not UTC: every stored time
// of the suite derives from it, so each round trip checks truncation to the
// millisecond and conversion to UTC.
var base = time.Date(2025, time.March, 4, 5, 6, 7, 891_234_567, time.FixedZone("UTC+05:30", 5*3600+1800))

// at returns base + d.
func at(d time.Duration) time.Time { return base.Add(d) }

// ms is what a store returns for a stored time: truncated to the millisecond, in UTC.
func ms(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Millisecond).UTC()
}

// newTenantValue returns an unsaved tenant with unique name and email and its first key.
func newTenantValue() (store.Tenant, store.APIKey) {
	id := store.NewID()
	t := store.Tenant{
		ID:        id,
		Name:      "tenant-" + id,
		Email:     id + "@example.com",
		Plan:      "free",
		Status:    store.TenantActive,
		Overrides: []byte(`{"max_topics": 7}`),
		CreatedAt: at(0),
	}
	return t, newKeyValue(id, "first", at(time.Second))
}

// newKeyValue returns an unsaved API key of tenantID.
func newKeyValue(tenantID, name string, created time.Time) store.APIKey {
	id := "k_" + store.NewID()
	h := sha256.Sum256([]byte("secret of " + id))
	return store.APIKey{
		ID:        id,
		TenantID:  tenantID,
		Name:      name,
		Hash:      h[:],
		Scopes:    []string{"topics:write", "produce", "consume"},
		CreatedAt: created,
	}
}

// createTenant stores a new tenant and its first key.
func createTenant(t testing.TB, s store.Store) (store.Tenant, store.APIKey) {
	t.Helper()
	ten, key := newTenantValue()
	require.NoError(t, s.CreateTenant(t.Context(), ten, key))
	return ten, key
}

// stored is what a store returns for a tenant written as t.
func storedTenant(t store.Tenant) store.Tenant {
	t.CreatedAt = ms(t.CreatedAt)
	return t
}

// storedKey is what a store returns for a key written as k.
func storedKey(k store.APIKey) store.APIKey {
	k.CreatedAt = ms(k.CreatedAt)
	k.RevokedAt = ms(k.RevokedAt)
	if len(k.Scopes) == 0 {
		k.Scopes = nil
	}
	return k
}

// requireTenant compares tenants, the overrides as JSON (Postgres jsonb
// normalises the text).
func requireTenant(t *testing.T, want, got store.Tenant) {
	t.Helper()
	requireJSON(t, want.Overrides, got.Overrides)
	want.Overrides, got.Overrides = nil, nil
	require.Equal(t, want, got)
	requireUTC(t, got.CreatedAt)
}

// requireJSON compares JSON documents; nil and "{}" are the same (no overrides).
func requireJSON(t *testing.T, want, got []byte) {
	t.Helper()
	if len(want) == 0 {
		want = []byte("{}")
	}
	if len(got) == 0 {
		got = []byte("{}")
	}
	require.JSONEq(t, string(want), string(got))
}

// requireUTC checks that times come back in UTC.
func requireUTC(t *testing.T, times ...time.Time) {
	t.Helper()
	for _, tm := range times {
		require.Equal(t, time.UTC, tm.Location(), "time %v not in UTC", tm)
	}
}

// newTopicValue returns an unsaved topic of n partitions with its partition
// state: replicas rotate over brokers 1..3 (at most rf of them), leader is
// the first replica, ISR is all replicas, epochs 0.
func newTopicValue(tenantID, name string, n int32) (store.Topic, []store.Partition) {
	rf := min(n, 3)
	tp := store.Topic{
		ID:                store.NewID(),
		TenantID:          tenantID,
		Name:              name,
		Partitions:        n,
		ReplicationFactor: rf,
		Config: store.TopicConfig{
			RetentionMs:         7 * 24 * 3600 * 1000,
			RetentionBytes:      -1,
			LocalRetentionMs:    -2,
			LocalRetentionBytes: 1 << 30,
			MaxMessageBytes:     1 << 20,
			MinInsyncReplicas:   min(rf, 2),
			CleanupPolicy:       "delete",
		},
		CreatedAt: at(time.Minute),
		UpdatedAt: at(time.Minute),
	}
	parts := make([]store.Partition, n)
	for i := range n {
		replicas := make([]int32, rf)
		for r := range rf {
			replicas[r] = (i+r)%3 + 1
		}
		parts[i] = store.Partition{
			TopicID:   tp.ID,
			Partition: i,
			Replicas:  replicas,
			Leader:    replicas[0],
			ISR:       append([]int32(nil), replicas...),
		}
	}
	return tp, parts
}

// createTopic stores a new topic with no limits.
func createTopic(t testing.TB, s store.Store, tenantID, name string, n int32) (store.Topic, []store.Partition) {
	t.Helper()
	tp, parts := newTopicValue(tenantID, name, n)
	require.NoError(t, s.CreateTopic(t.Context(), tp, parts, store.CountLimits{}))
	return tp, parts
}

// storedTopic is what a store returns for a topic written as tp.
func storedTopic(tp store.Topic) store.Topic {
	tp.CreatedAt = ms(tp.CreatedAt)
	tp.UpdatedAt = ms(tp.UpdatedAt)
	return tp
}

// requireAlreadyExists checks err is *store.AlreadyExistsError naming what
// ("" accepts any name).
func requireAlreadyExists(t *testing.T, err error, what string) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrAlreadyExists)
	var ae *store.AlreadyExistsError
	require.ErrorAs(t, err, &ae)
	if what != "" {
		require.Equal(t, what, ae.What)
	} else {
		require.NotEmpty(t, ae.What)
	}
}

// requireLimit checks err is exactly the *store.LimitError want.
func requireLimit(t *testing.T, err error, want store.LimitError) {
	t.Helper()
	require.ErrorIs(t, err, store.ErrLimitExceeded)
	var le *store.LimitError
	require.ErrorAs(t, err, &le)
	require.Equal(t, want, *le)
}

// isLimit reports whether err is a *store.LimitError on limit.
func isLimit(err error, limit string) bool {
	var le *store.LimitError
	return errors.As(err, &le) && le.Limit == limit
}

// topicName returns a name unique enough within one tenant.
func topicName(prefix string, i int) string { return fmt.Sprintf("%s-%03d", prefix, i) }

// mustJSON marshals v.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
