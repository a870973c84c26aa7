package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// test is one subtest of the suite. own: it reads global state and needs a
// store of its own; otherwise it runs on the shared store.
type test struct {
	name string
	own  bool
	fn   func(t *testing.T, s store.Store)
}

// Run runs the contract suite against the driver built by newStore, which
// returns an empty, migrated store and closes it at t's cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	run(t, newStore, tests)
}

func run(t *testing.T, newStore func(t *testing.T) store.Store, tests []test) {
	shared := newStore(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := shared
			if tc.own {
				s = newStore(t)
			}
			tc.fn(t, s)
		})
	}
}

var tests = []test{
	{name: "TenantCreateGet", fn: testTenantCreateGet},
	{name: "TenantCreateNameTaken", fn: testTenantCreateNameTaken},
	{name: "TenantCreateEmailTaken", fn: testTenantCreateEmailTaken},
	{name: "TenantCreateKeyIDTaken", fn: testTenantCreateKeyIDTaken},
	{name: "TenantCreateIDTaken", fn: testTenantCreateIDTaken},
	{name: "TenantNotFound", fn: testTenantNotFound},
	{name: "TenantList", own: true, fn: testTenantList},
	{name: "TenantUpdate", fn: testTenantUpdate},
	{name: "TenantUsage", fn: testTenantUsage},
	{name: "TenantSuspendedFeed", own: true, fn: testTenantSuspendedFeed},

	{name: "APIKeyCreateGetList", fn: testAPIKeyCreateGetList},
	{name: "APIKeyRevoke", fn: testAPIKeyRevoke},
	{name: "APIKeyRevokedFeed", own: true, fn: testAPIKeyRevokedFeed},

	{name: "SigningKeyLifecycle", own: true, fn: testSigningKeyLifecycle},

	{name: "TopicCreateGet", fn: testTopicCreateGet},
	{name: "TopicCreateUnknownTenant", fn: testTopicCreateUnknownTenant},
	{name: "TopicCreateInvalid", fn: testTopicCreateInvalid},
	{name: "TopicNameTaken", fn: testTopicNameTaken},
	{name: "TopicTenantScoping", fn: testTopicTenantScoping},
	{name: "TopicList", fn: testTopicList},
	{name: "TopicUpdateConfig", fn: testTopicUpdateConfig},
	{name: "TopicDelete", fn: testTopicDelete},
	{name: "TopicLimitTopics", fn: testTopicLimitTopics},
	{name: "TopicLimitPartitions", fn: testTopicLimitPartitions},
	{name: "TopicAddPartitions", fn: testTopicAddPartitions},
	{name: "TopicAddPartitionsRefused", fn: testTopicAddPartitionsRefused},
	{name: "TopicAddPartitionsLimit", fn: testTopicAddPartitionsLimit},

	{name: "PartitionUpdateCAS", fn: testPartitionUpdateCAS},
	{name: "PartitionLoad", own: true, fn: testPartitionLoad},
	{name: "PartitionUpdateFenced", own: true, fn: testPartitionUpdateFenced},
	{name: "PartitionListAll", own: true, fn: testPartitionListAll},
	{name: "PartitionListTopics", fn: testPartitionListTopics},
	{name: "PartitionUpdateBatch", own: true, fn: testPartitionUpdateBatch},
	{name: "PartitionUpdateBatchFenced", own: true, fn: testPartitionUpdateBatchFenced},

	{name: "ControllerLeaseAcquire", own: true, fn: testControllerLeaseAcquire},
	{name: "MetadataVersion", own: true, fn: testMetadataVersion},
	{name: "MetadataChanges", own: true, fn: testMetadataChanges},

	{name: "BrokerRegister", own: true, fn: testBrokerRegister},
	{name: "BrokerHeartbeat", own: true, fn: testBrokerHeartbeat},
	{name: "ProducerIDBlocks", own: true, fn: testProducerIDBlocks},

	{name: "RemoteSegmentAddFinish", fn: testRemoteSegmentAddFinish},
	{name: "RemoteSegmentFencing", fn: testRemoteSegmentFencing},
	{name: "RemoteSegmentBaseOffset", fn: testRemoteSegmentBaseOffset},
	{name: "RemoteSegmentDeposedLeader", fn: testRemoteSegmentDeposedLeader},
	{name: "RemoteSegmentIdempotent", fn: testRemoteSegmentIdempotent},
	{name: "RemoteSegmentTransitions", fn: testRemoteSegmentTransitions},
	{name: "RemoteSegmentList", fn: testRemoteSegmentList},
	{name: "RemoteSegmentNotFound", fn: testRemoteSegmentNotFound},
	{name: "RemoteSegmentInvalid", fn: testRemoteSegmentInvalid},
	{name: "RemoteSegmentTopicDelete", fn: testRemoteSegmentTopicDelete},

	{name: "TimeRoundTripUTC", own: true, fn: testTimeRoundTripUTC},
}

// ---- tenants ----

func testTenantCreateGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, key := createTenant(t, s)

	got, err := s.GetTenant(ctx, ten.ID)
	require.NoError(t, err)
	requireTenant(t, storedTenant(ten), got)

	got, err = s.GetTenantByName(ctx, ten.Name)
	require.NoError(t, err)
	requireTenant(t, storedTenant(ten), got)

	gotKey, err := s.GetAPIKey(ctx, key.ID)
	require.NoError(t, err)
	require.Equal(t, storedKey(key), gotKey)
	require.False(t, gotKey.Revoked())

	// The first key belongs to the new tenant whatever its TenantID said.
	ten2, key2 := newTenantValue()
	key2.TenantID = ""
	ten2.Overrides = nil
	require.NoError(t, s.CreateTenant(ctx, ten2, key2))
	gotKey, err = s.GetAPIKey(ctx, key2.ID)
	require.NoError(t, err)
	require.Equal(t, ten2.ID, gotKey.TenantID)
	got, err = s.GetTenant(ctx, ten2.ID)
	require.NoError(t, err)
	requireTenant(t, storedTenant(ten2), got)
}

// createTaken tries to create a tenant that collides with an existing one
// and checks that neither the tenant nor its key was stored.
func createTaken(t *testing.T, s store.Store, mutate func(ten *store.Tenant, key *store.APIKey), what string) {
	t.Helper()
	ctx := t.Context()
	ten2, key2 := newTenantValue()
	mutate(&ten2, &key2)
	requireAlreadyExists(t, s.CreateTenant(ctx, ten2, key2), what)

	_, err := s.GetTenant(ctx, ten2.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "tenant stored despite the collision")
	if what != "api key id" {
		_, err = s.GetAPIKey(ctx, key2.ID)
		require.ErrorIs(t, err, store.ErrNotFound, "orphan key left behind")
	}
	keys, err := s.ListAPIKeys(ctx, ten2.ID)
	require.NoError(t, err)
	require.Empty(t, keys)
}

func testTenantCreateNameTaken(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	createTaken(t, s, func(t2 *store.Tenant, _ *store.APIKey) { t2.Name = ten.Name }, "tenant name")
}

func testTenantCreateEmailTaken(t *testing.T, s store.Store) {
	ten, _ := createTenant(t, s)
	createTaken(t, s, func(t2 *store.Tenant, _ *store.APIKey) { t2.Email = ten.Email }, "email")
}

func testTenantCreateKeyIDTaken(t *testing.T, s store.Store) {
	_, key := createTenant(t, s)
	createTaken(t, s, func(_ *store.Tenant, k2 *store.APIKey) { k2.ID = key.ID }, "api key id")
	// The existing key is untouched.
	got, err := s.GetAPIKey(t.Context(), key.ID)
	require.NoError(t, err)
	require.Equal(t, storedKey(key), got)
}

func testTenantCreateIDTaken(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	ten2, key2 := newTenantValue()
	ten2.ID = ten.ID
	requireAlreadyExists(t, s.CreateTenant(ctx, ten2, key2), "")
	_, err := s.GetAPIKey(ctx, key2.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTenantByName(ctx, ten2.Name)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testTenantNotFound(t *testing.T, s store.Store) {
	ctx := t.Context()
	_, err := s.GetTenant(ctx, store.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTenant(ctx, "not-a-uuid")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTenantByName(ctx, "no such tenant "+store.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UpdateTenant(ctx, store.NewID(), setTenant("pro", store.TenantActive, nil))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.TenantUsage(ctx, store.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testTenantList(t *testing.T, s store.Store) {
	ctx := t.Context()
	list, err := s.ListTenants(ctx, "", 10)
	require.NoError(t, err)
	require.Empty(t, list)

	// Created out of order; two share a creation time (ordered by id then).
	created := []time.Duration{3 * time.Second, time.Second, 2 * time.Second, 2 * time.Second, 4 * time.Second}
	var want []store.Tenant
	for _, d := range created {
		ten, key := newTenantValue()
		ten.CreatedAt = at(d)
		require.NoError(t, s.CreateTenant(ctx, ten, key))
		want = append(want, storedTenant(ten))
	}
	// creation order: by CreatedAt, then id
	sortTenants(want)

	all, err := s.ListTenants(ctx, "", 100)
	require.NoError(t, err)
	require.Len(t, all, len(want))
	for i := range want {
		requireTenant(t, want[i], all[i])
	}

	// limit <= 0: no limit.
	all, err = s.ListTenants(ctx, "", 0)
	require.NoError(t, err)
	require.Len(t, all, len(want))
	all, err = s.ListTenants(ctx, want[0].ID, -1)
	require.NoError(t, err)
	require.Len(t, all, len(want)-1)

	// Pages of two.
	var paged []store.Tenant
	after := ""
	for {
		page, err := s.ListTenants(ctx, after, 2)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page), 2)
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		after = page[len(page)-1].ID
	}
	require.Len(t, paged, len(want))
	for i := range want {
		require.Equal(t, want[i].ID, paged[i].ID, "page order at %d", i)
	}

	last, err := s.ListTenants(ctx, want[len(want)-1].ID, 10)
	require.NoError(t, err)
	require.Empty(t, last)

	_, err = s.ListTenants(ctx, store.NewID(), 10)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func sortTenants(ts []store.Tenant) {
	slices.SortFunc(ts, func(a, b store.Tenant) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func testTenantUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)

	overrides := mustJSON(t, map[string]any{"max_partitions": 100, "produce_bytes_per_second": 1 << 20})
	got, err := s.UpdateTenant(ctx, ten.ID, func(cur store.Tenant) (store.Tenant, error) {
		require.Equal(t, ten.ID, cur.ID, "update sees the current tenant")
		require.Equal(t, ten.Plan, cur.Plan)
		cur.Plan, cur.Status, cur.Overrides = "pro", store.TenantSuspended, overrides
		cur.Name = "ignored"
		return cur, nil
	})
	require.NoError(t, err)
	want := storedTenant(ten)
	want.Plan, want.Status, want.Overrides = "pro", store.TenantSuspended, overrides
	requireTenant(t, want, got)

	got, err = s.GetTenant(ctx, ten.ID)
	require.NoError(t, err)
	requireTenant(t, want, got)

	// nil overrides clear them.
	got, err = s.UpdateTenant(ctx, ten.ID, setTenant("free", store.TenantActive, nil))
	require.NoError(t, err)
	want.Plan, want.Status, want.Overrides = "free", store.TenantActive, nil
	requireTenant(t, want, got)

	// An error from update aborts the change and comes back as is.
	boom := errors.New("boom")
	_, err = s.UpdateTenant(ctx, ten.ID, func(cur store.Tenant) (store.Tenant, error) {
		cur.Plan = "pro"
		return cur, boom
	})
	require.Same(t, boom, err)
	got, err = s.GetTenant(ctx, ten.ID)
	require.NoError(t, err)
	requireTenant(t, want, got)
	// An invalid status is refused.
	_, err = s.UpdateTenant(ctx, ten.ID, setTenant("free", "deleted", nil))
	require.Error(t, err)

	// The other tenant is untouched.
	got, err = s.GetTenant(ctx, other.ID)
	require.NoError(t, err)
	requireTenant(t, storedTenant(other), got)
}

// testTenantSuspendedFeed: ListSuspendedTenants is the whole current set,
// ordered by id: a suspension adds the tenant, a reinstatement removes it.
func testTenantSuspendedFeed(t *testing.T, s store.Store) {
	ctx := t.Context()
	ids, err := s.ListSuspendedTenants(ctx)
	require.NoError(t, err)
	require.Empty(t, ids, "no tenant is suspended in a new store (the system tenant neither)")

	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	c, _ := createTenant(t, s)
	suspend := func(id, status string) {
		_, err := s.UpdateTenant(ctx, id, setTenant("free", status, nil))
		require.NoError(t, err)
	}
	suspend(c.ID, store.TenantSuspended)
	suspend(a.ID, store.TenantSuspended)
	ids, err = s.ListSuspendedTenants(ctx)
	require.NoError(t, err)
	want := []string{a.ID, c.ID}
	slices.Sort(want)
	require.Equal(t, want, ids)

	suspend(c.ID, store.TenantActive)
	suspend(b.ID, store.TenantActive) // unchanged: still active
	ids, err = s.ListSuspendedTenants(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ids, "a reinstated tenant leaves the set")
}

func testTenantUsage(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)

	u, err := s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{}, u)

	createTopic(t, s, ten.ID, "a", 3)
	createTopic(t, s, ten.ID, "b", 5)
	createTopic(t, s, other.ID, "a", 2)

	u, err = s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 2, Partitions: 8}, u)

	_, err = s.DeleteTopic(ctx, ten.ID, "a")
	require.NoError(t, err)
	u, err = s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 1, Partitions: 5}, u)

	u, err = s.TenantUsage(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 1, Partitions: 2}, u)
}

// ---- API keys ----

func testAPIKeyCreateGetList(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, first := createTenant(t, s)
	other, otherKey := createTenant(t, s)

	k2 := newKeyValue(ten.ID, "ci", at(3*time.Second))
	k3 := newKeyValue(ten.ID, "no scopes", at(2*time.Second))
	k3.Scopes = nil
	require.NoError(t, s.CreateAPIKey(ctx, k2))
	require.NoError(t, s.CreateAPIKey(ctx, k3))

	got, err := s.GetAPIKey(ctx, k2.ID)
	require.NoError(t, err)
	require.Equal(t, storedKey(k2), got)
	got, err = s.GetAPIKey(ctx, k3.ID)
	require.NoError(t, err)
	require.Equal(t, storedKey(k3), got)

	list, err := s.ListAPIKeys(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{storedKey(first), storedKey(k3), storedKey(k2)}, list, "creation order")

	list, err = s.ListAPIKeys(ctx, other.ID)
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{storedKey(otherKey)}, list)

	list, err = s.ListAPIKeys(ctx, store.NewID())
	require.NoError(t, err)
	require.Empty(t, list)

	// Key ids are unique across tenants.
	dup := newKeyValue(other.ID, "dup", at(0))
	dup.ID = k2.ID
	requireAlreadyExists(t, s.CreateAPIKey(ctx, dup), "")

	require.ErrorIs(t, s.CreateAPIKey(ctx, newKeyValue(store.NewID(), "orphan", at(0))), store.ErrNotFound)

	_, err = s.GetAPIKey(ctx, "k_missing_"+store.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAPIKeyRevoke(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, key := createTenant(t, s)
	other, otherKey := createTenant(t, s)

	got, err := s.RevokeAPIKey(ctx, ten.ID, key.ID, at(time.Hour))
	require.NoError(t, err)
	want := storedKey(key)
	want.RevokedAt = ms(at(time.Hour))
	require.Equal(t, want, got)
	require.True(t, got.Revoked())
	requireUTC(t, got.RevokedAt)

	// Idempotent: the first time stays.
	got, err = s.RevokeAPIKey(ctx, ten.ID, key.ID, at(2*time.Hour))
	require.NoError(t, err)
	require.Equal(t, want, got)
	got, err = s.GetAPIKey(ctx, key.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Another tenant's key is not found, and stays active.
	_, err = s.RevokeAPIKey(ctx, ten.ID, otherKey.ID, at(time.Hour))
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err = s.GetAPIKey(ctx, otherKey.ID)
	require.NoError(t, err)
	require.False(t, got.Revoked())

	_, err = s.RevokeAPIKey(ctx, other.ID, "k_missing_"+store.NewID(), at(time.Hour))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.RevokeAPIKey(ctx, "not-a-uuid", key.ID, at(time.Hour))
	require.ErrorIs(t, err, store.ErrNotFound)

	list, err := s.ListAPIKeys(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{want}, list, "revoked keys are listed")
}

func testAPIKeyRevokedFeed(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, first := createTenant(t, s)
	other, otherKey := createTenant(t, s)
	k2 := newKeyValue(ten.ID, "k2", at(0))
	k3 := newKeyValue(ten.ID, "k3", at(0))
	require.NoError(t, s.CreateAPIKey(ctx, k2))
	require.NoError(t, s.CreateAPIKey(ctx, k3))

	revoke := func(tenantID string, k store.APIKey, when time.Time) store.APIKey {
		got, err := s.RevokeAPIKey(ctx, tenantID, k.ID, when)
		require.NoError(t, err)
		return got
	}
	t0 := at(time.Hour)
	r1 := revoke(other.ID, otherKey, t0)
	r2 := revoke(ten.ID, k3, t0.Add(time.Millisecond))
	r3 := revoke(ten.ID, first, t0.Add(2*time.Second))
	_ = k2 // stays active

	feed, err := s.ListRevokedAPIKeys(ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{r1, r2, r3}, feed)

	feed, err = s.ListRevokedAPIKeys(ctx, ms(t0))
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{r1, r2, r3}, feed, "since is inclusive")

	feed, err = s.ListRevokedAPIKeys(ctx, t0.Add(time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{r2, r3}, feed)

	feed, err = s.ListRevokedAPIKeys(ctx, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{r3}, feed)

	feed, err = s.ListRevokedAPIKeys(ctx, t0.Add(time.Minute))
	require.NoError(t, err)
	require.Empty(t, feed)

	// Revoking again does not move a key in the feed.
	revoke(ten.ID, k3, t0.Add(time.Hour))
	feed, err = s.ListRevokedAPIKeys(ctx, t0.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, []store.APIKey{r3}, feed)
}

// ---- signing keys ----

func testSigningKeyLifecycle(t *testing.T, s store.Store) {
	ctx := t.Context()
	keys, err := s.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Empty(t, keys)

	mk := func(kid string, created time.Time) store.SigningKey {
		priv := make([]byte, 64)
		for i := range priv {
			priv[i] = byte(i + len(kid))
		}
		return store.SigningKey{KID: kid, Private: priv, CreatedAt: created}
	}
	k1, k2, k3 := mk("kid-1", at(2*time.Hour)), mk("kid-2", at(time.Hour)), mk("kid-3", at(3*time.Hour))
	for _, k := range []store.SigningKey{k1, k2, k3} {
		require.NoError(t, s.InsertSigningKey(ctx, k))
	}
	stored := func(k store.SigningKey) store.SigningKey {
		k.CreatedAt, k.RetiredAt = ms(k.CreatedAt), ms(k.RetiredAt)
		return k
	}

	dup := mk("kid-1", at(0))
	dup.Private = []byte("other")
	requireAlreadyExists(t, s.InsertSigningKey(ctx, dup), "")

	keys, err = s.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.SigningKey{stored(k2), stored(k1), stored(k3)}, keys, "oldest first")

	require.NoError(t, s.RetireSigningKey(ctx, "kid-2", at(4*time.Hour)))
	require.NoError(t, s.RetireSigningKey(ctx, "kid-2", at(5*time.Hour)), "idempotent")
	k2.RetiredAt = at(4 * time.Hour)
	keys, err = s.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.SigningKey{stored(k2), stored(k1), stored(k3)}, keys, "retiring keeps the first time")
	requireUTC(t, keys[0].RetiredAt, keys[0].CreatedAt)

	require.ErrorIs(t, s.RetireSigningKey(ctx, "kid-missing", at(0)), store.ErrNotFound)

	require.NoError(t, s.DeleteSigningKey(ctx, "kid-2"))
	require.ErrorIs(t, s.DeleteSigningKey(ctx, "kid-2"), store.ErrNotFound)
	require.ErrorIs(t, s.RetireSigningKey(ctx, "kid-2", at(0)), store.ErrNotFound)
	keys, err = s.ListSigningKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.SigningKey{stored(k1), stored(k3)}, keys)
}

// ---- topics ----

func testTopicCreateGet(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := newTopicValue(ten.ID, "orders", 4)
	parts[2].ISR = nil // an offline partition
	parts[2].Leader = -1
	parts[2].LeaderEpoch = 3
	parts[2].PartitionEpoch = 5
	// Given out of order.
	given := []store.Partition{parts[3], parts[1], parts[0], parts[2]}
	require.NoError(t, s.CreateTopic(ctx, tp, given, store.CountLimits{MaxTopics: 1, MaxPartitions: 4}))

	got, err := s.GetTopic(ctx, ten.ID, "orders")
	require.NoError(t, err)
	require.Equal(t, storedTopic(tp), got)
	requireUTC(t, got.CreatedAt, got.UpdatedAt)

	got, err = s.GetTopicByID(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, storedTopic(tp), got)

	gotParts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, parts, gotParts)

	_, err = s.GetTopic(ctx, ten.ID, "missing")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTopicByID(ctx, store.NewID())
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTopicByID(ctx, "not-a-uuid")
	require.ErrorIs(t, err, store.ErrNotFound)
	none, err := s.ListPartitions(ctx, store.NewID())
	require.NoError(t, err)
	require.Empty(t, none)
}

func testTopicCreateUnknownTenant(t *testing.T, s store.Store) {
	ctx := t.Context()
	tp, parts := newTopicValue(store.NewID(), "orders", 2)
	require.ErrorIs(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{MaxTopics: 10}), store.ErrNotFound)
	_, err := s.GetTopicByID(ctx, tp.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testTopicCreateInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)

	tp, parts := newTopicValue(ten.ID, "short", 3)
	err := s.CreateTopic(ctx, tp, parts[:2], store.CountLimits{})
	require.Error(t, err, "len(parts) != Partitions")
	require.NotErrorIs(t, err, store.ErrNotFound)

	tp, parts = newTopicValue(ten.ID, "dup-partition", 3)
	parts[2].Partition = 0
	require.Error(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))

	tp, parts = newTopicValue(ten.ID, "bad-id", 1)
	tp.ID = "not-a-uuid"
	require.Error(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))

	list, err := s.ListTopics(ctx, ten.ID)
	require.NoError(t, err)
	require.Empty(t, list)
}

func testTopicNameTaken(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	first, firstParts := createTopic(t, s, ten.ID, "events", 2)

	tp, parts := newTopicValue(ten.ID, "events", 3)
	requireAlreadyExists(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}), "topic name")
	// A taken name is reported even when the tenant is at its limits.
	requireAlreadyExists(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{MaxTopics: 1, MaxPartitions: 2}), "topic name")

	_, err := s.GetTopicByID(ctx, tp.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	none, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Empty(t, none)
	got, err := s.GetTopic(ctx, ten.ID, "events")
	require.NoError(t, err)
	require.Equal(t, storedTopic(first), got)
	gotParts, err := s.ListPartitions(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, firstParts, gotParts)

	// The same name in another tenant is a different topic.
	tp2, _ := createTopic(t, s, other.ID, "events", 1)
	got, err = s.GetTopic(ctx, other.ID, "events")
	require.NoError(t, err)
	require.Equal(t, storedTopic(tp2), got)

	// Topic ids are never reused.
	tp3, parts3 := newTopicValue(ten.ID, "events-2", 1)
	tp3.ID = first.ID
	parts3[0].TopicID = first.ID
	requireAlreadyExists(t, s.CreateTopic(ctx, tp3, parts3, store.CountLimits{}), "")
}

func testTopicTenantScoping(t *testing.T, s store.Store) {
	ctx := t.Context()
	owner, _ := createTenant(t, s)
	intruder, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, owner.ID, "private", 2)

	_, err := s.GetTopic(ctx, intruder.ID, "private")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.UpdateTopicConfig(ctx, intruder.ID, "private", at(time.Hour), setConfig(store.TopicConfig{RetentionMs: 1}))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.DeleteTopic(ctx, intruder.ID, "private")
	require.ErrorIs(t, err, store.ErrNotFound)
	list, err := s.ListTopics(ctx, intruder.ID)
	require.NoError(t, err)
	require.Empty(t, list)
	u, err := s.TenantUsage(ctx, intruder.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{}, u)

	// Untouched.
	got, err := s.GetTopic(ctx, owner.ID, "private")
	require.NoError(t, err)
	require.Equal(t, storedTopic(tp), got)
	gotParts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, parts, gotParts)
}

func testTopicList(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	list, err := s.ListTopics(ctx, ten.ID)
	require.NoError(t, err)
	require.Empty(t, list)

	b, _ := createTopic(t, s, ten.ID, "b", 1)
	a, _ := createTopic(t, s, ten.ID, "a", 2)
	c, _ := createTopic(t, s, ten.ID, "c", 3)
	createTopic(t, s, other.ID, "a0", 1)

	list, err = s.ListTopics(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, []store.Topic{storedTopic(a), storedTopic(b), storedTopic(c)}, list)
}

func testTopicUpdateConfig(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "logs", 2)

	cfg := store.TopicConfig{
		RetentionMs:         -1,
		RetentionBytes:      5 << 30,
		LocalRetentionMs:    3600_000,
		LocalRetentionBytes: -2,
		MaxMessageBytes:     4 << 20,
		MinInsyncReplicas:   1,
		CleanupPolicy:       "delete",
		// Round-trip like every other field.
		UncleanLeaderElection: true,
		MessageTimestampType:  store.LogAppendTime,
	}
	got, err := s.UpdateTopicConfig(ctx, ten.ID, "logs", at(2*time.Hour), func(cur store.Topic) (store.TopicConfig, error) {
		require.Equal(t, storedTopic(tp), cur, "update sees the current topic")
		return cfg, nil
	})
	require.NoError(t, err)
	want := storedTopic(tp)
	want.Config = cfg
	want.UpdatedAt = ms(at(2 * time.Hour))
	require.Equal(t, want, got)
	requireUTC(t, got.UpdatedAt)

	got, err = s.GetTopic(ctx, ten.ID, "logs")
	require.NoError(t, err)
	require.Equal(t, want, got)
	gotParts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, parts, gotParts, "partition state untouched")

	_, err = s.UpdateTopicConfig(ctx, ten.ID, "missing", at(0), setConfig(cfg))
	require.ErrorIs(t, err, store.ErrNotFound)

	// An error from update aborts the change and comes back as is.
	boom := errors.New("boom")
	_, err = s.UpdateTopicConfig(ctx, ten.ID, "logs", at(3*time.Hour), func(store.Topic) (store.TopicConfig, error) {
		return store.TopicConfig{RetentionMs: 1}, boom
	})
	require.Same(t, boom, err)
	got, err = s.GetTopic(ctx, ten.ID, "logs")
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func setTenant(plan, status string, overrides []byte) func(store.Tenant) (store.Tenant, error) {
	return func(cur store.Tenant) (store.Tenant, error) {
		cur.Plan, cur.Status, cur.Overrides = plan, status, overrides
		return cur, nil
	}
}

func setConfig(cfg store.TopicConfig) func(store.Topic) (store.TopicConfig, error) {
	return func(store.Topic) (store.TopicConfig, error) { return cfg, nil }
}

func testTopicDelete(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, _ := createTopic(t, s, ten.ID, "gone", 3)
	keep, keepParts := createTopic(t, s, ten.ID, "kept", 2)

	got, err := s.DeleteTopic(ctx, ten.ID, "gone")
	require.NoError(t, err)
	require.Equal(t, storedTopic(tp), got)

	_, err = s.GetTopic(ctx, ten.ID, "gone")
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetTopicByID(ctx, tp.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	parts, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Empty(t, parts, "partitions deleted with the topic")
	require.ErrorIs(t, s.UpdatePartition(ctx, store.Partition{TopicID: tp.ID, Partition: 0, PartitionEpoch: 1}, 0), store.ErrNotFound)

	_, err = s.DeleteTopic(ctx, ten.ID, "gone")
	require.ErrorIs(t, err, store.ErrNotFound)

	parts, err = s.ListPartitions(ctx, keep.ID)
	require.NoError(t, err)
	require.Equal(t, keepParts, parts)

	// The name can be used again, by a topic with a new id.
	again, _ := createTopic(t, s, ten.ID, "gone", 1)
	require.NotEqual(t, tp.ID, again.ID)
	got, err = s.GetTopic(ctx, ten.ID, "gone")
	require.NoError(t, err)
	require.Equal(t, storedTopic(again), got)
}

func testTopicLimitTopics(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	other, _ := createTenant(t, s)
	limits := store.CountLimits{MaxTopics: 2}
	for i := range 2 {
		tp, parts := newTopicValue(ten.ID, topicName("t", i), 1)
		require.NoError(t, s.CreateTopic(ctx, tp, parts, limits))
	}
	tp, parts := newTopicValue(ten.ID, "third", 1)
	requireLimit(t, s.CreateTopic(ctx, tp, parts, limits), store.LimitError{Limit: "topics", Current: 2, Request: 1, Max: 2})
	_, err := s.GetTopicByID(ctx, tp.ID)
	require.ErrorIs(t, err, store.ErrNotFound)

	// The limit counts the tenant's own topics only.
	for i := range 2 {
		tp, parts := newTopicValue(other.ID, topicName("t", i), 1)
		require.NoError(t, s.CreateTopic(ctx, tp, parts, limits))
	}

	// A higher limit, or none, lets it through.
	require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{MaxTopics: 3}))
	tp, parts = newTopicValue(ten.ID, "fourth", 1)
	require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))

	u, err := s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 4, Partitions: 4}, u)
}

func testTopicLimitPartitions(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	limits := store.CountLimits{MaxTopics: 100, MaxPartitions: 10}

	tp, parts := newTopicValue(ten.ID, "four", 4)
	require.NoError(t, s.CreateTopic(ctx, tp, parts, limits))

	tp, parts = newTopicValue(ten.ID, "seven", 7)
	requireLimit(t, s.CreateTopic(ctx, tp, parts, limits), store.LimitError{Limit: "partitions", Current: 4, Request: 7, Max: 10})
	// A request over the limit on its own still reports what is in use
	// (the API's quota message quotes Current).
	tp, parts = newTopicValue(ten.ID, "eleven", 11)
	requireLimit(t, s.CreateTopic(ctx, tp, parts, limits), store.LimitError{Limit: "partitions", Current: 4, Request: 11, Max: 10})
	u, err := s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 1, Partitions: 4}, u, "the usage the API's early check reads")

	tp, parts = newTopicValue(ten.ID, "six", 6)
	require.NoError(t, s.CreateTopic(ctx, tp, parts, limits), "exactly at the limit")

	tp, parts = newTopicValue(ten.ID, "one", 1)
	requireLimit(t, s.CreateTopic(ctx, tp, parts, limits), store.LimitError{Limit: "partitions", Current: 10, Request: 1, Max: 10})

	// The topic limit is checked first.
	requireLimit(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{MaxTopics: 2, MaxPartitions: 10}),
		store.LimitError{Limit: "topics", Current: 2, Request: 1, Max: 2})

	u, err = s.TenantUsage(ctx, ten.ID)
	require.NoError(t, err)
	require.Equal(t, store.TenantUsage{Topics: 2, Partitions: 10}, u)
}

// ---- partitions ----

func testPartitionUpdateCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	ten, _ := createTenant(t, s)
	tp, parts := createTopic(t, s, ten.ID, "cas", 3)

	p := parts[1]
	p.Leader = p.Replicas[1]
	p.LeaderEpoch = 1
	p.ISR = []int32{p.Replicas[1], p.Replicas[2]}
	p.PartitionEpoch = 1
	require.NoError(t, s.UpdatePartition(ctx, p, 0))

	got, err := s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	want := append([]store.Partition(nil), parts...)
	want[1] = p
	require.Equal(t, want, got)

	// Stale expected epoch: conflict, nothing changes.
	stale := p
	stale.Leader, stale.PartitionEpoch = p.Replicas[2], 2
	require.ErrorIs(t, s.UpdatePartition(ctx, stale, 0), store.ErrConflict)
	require.ErrorIs(t, s.UpdatePartition(ctx, stale, 7), store.ErrConflict)
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// Offline: no leader, empty ISR; replicas may change too (reassignment).
	off := p
	off.Leader, off.LeaderEpoch, off.ISR, off.PartitionEpoch = -1, 2, nil, 2
	off.Replicas = []int32{7, 8, 9}
	require.NoError(t, s.UpdatePartition(ctx, off, 1))
	got, err = s.ListPartitions(ctx, tp.ID)
	require.NoError(t, err)
	want[1] = off
	require.Equal(t, want, got)

	missing := p
	missing.Partition = 3
	require.ErrorIs(t, s.UpdatePartition(ctx, missing, 0), store.ErrNotFound)
	missing = p
	missing.TopicID = store.NewID()
	require.ErrorIs(t, s.UpdatePartition(ctx, missing, 0), store.ErrNotFound)
	missing.TopicID = "not-a-uuid"
	require.ErrorIs(t, s.UpdatePartition(ctx, missing, 0), store.ErrNotFound)
}

// ---- brokers ----

func testBrokerRegister(t *testing.T, s store.Store) {
	ctx := t.Context()
	brokers, err := s.ListBrokers(ctx)
	require.NoError(t, err)
	require.Empty(t, brokers)

	b2 := store.Broker{ID: 2, Address: "127.0.0.1:9002", ExternalAddress: "https://b2.example.com:443", KafkaAddress: "b2.example.com:9092", Rack: "b", Epoch: 99, LeaseExpiresAt: at(10 * time.Second), RegisteredAt: at(0)}
	got2, err := s.RegisterBroker(ctx, b2)
	require.NoError(t, err)
	want2 := store.Broker{ID: 2, Address: "127.0.0.1:9002", ExternalAddress: "https://b2.example.com:443", KafkaAddress: "b2.example.com:9092", Rack: "b", Epoch: 1, LeaseExpiresAt: ms(at(10 * time.Second)), RegisteredAt: ms(at(0))}
	require.Equal(t, want2, got2, "first registration: epoch 1, whatever the caller said")
	requireUTC(t, got2.LeaseExpiresAt, got2.RegisteredAt)

	b1 := store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: at(10 * time.Second), RegisteredAt: at(0)}
	got1, err := s.RegisterBroker(ctx, b1)
	require.NoError(t, err)
	require.EqualValues(t, 1, got1.Epoch)

	// Re-registration (a restart): new addresses (no external or Kafka
	// listener any more), epoch bumped, new lease.
	b2.Address, b2.ExternalAddress, b2.KafkaAddress, b2.Rack, b2.LeaseExpiresAt, b2.RegisteredAt = "127.0.0.1:9102", "", "", "c", at(time.Minute), at(50*time.Second)
	got2, err = s.RegisterBroker(ctx, b2)
	require.NoError(t, err)
	want2 = store.Broker{ID: 2, Address: "127.0.0.1:9102", Rack: "c", Epoch: 2, LeaseExpiresAt: ms(at(time.Minute)), RegisteredAt: ms(at(50 * time.Second))}
	require.Equal(t, want2, got2)
	got2, err = s.RegisterBroker(ctx, b2)
	require.NoError(t, err)
	require.EqualValues(t, 3, got2.Epoch)
	want2.Epoch = 3

	brokers, err = s.ListBrokers(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Broker{got1, want2}, brokers, "ordered by id")
}

func testBrokerHeartbeat(t *testing.T, s store.Store) {
	ctx := t.Context()
	b, err := s.RegisterBroker(ctx, store.Broker{ID: 5, Address: "127.0.0.1:9005", Rack: "a", LeaseExpiresAt: at(10 * time.Second), RegisteredAt: at(0)})
	require.NoError(t, err)
	require.True(t, b.Live(at(9*time.Second)))
	require.False(t, b.Live(at(11*time.Second)))

	got, err := s.HeartbeatBroker(ctx, 5, b.Epoch, at(20*time.Second))
	require.NoError(t, err)
	want := b
	want.LeaseExpiresAt = ms(at(20 * time.Second))
	require.Equal(t, want, got)
	require.True(t, got.Live(at(19*time.Second)))

	// A late heartbeat never shortens the lease.
	got, err = s.HeartbeatBroker(ctx, 5, b.Epoch, at(15*time.Second))
	require.NoError(t, err)
	require.Equal(t, want, got)

	// After a re-registration the old epoch is a zombie.
	b2, err := s.RegisterBroker(ctx, store.Broker{ID: 5, Address: "127.0.0.1:9005", Rack: "a", LeaseExpiresAt: at(30 * time.Second), RegisteredAt: at(25 * time.Second)})
	require.NoError(t, err)
	require.Equal(t, b.Epoch+1, b2.Epoch)
	_, err = s.HeartbeatBroker(ctx, 5, b.Epoch, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.HeartbeatBroker(ctx, 5, b2.Epoch+1, at(time.Hour))
	require.ErrorIs(t, err, store.ErrConflict, "a future epoch is not current either")

	brokers, err := s.ListBrokers(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Broker{b2}, brokers, "the zombie's heartbeat changed nothing")

	got, err = s.HeartbeatBroker(ctx, 5, b2.Epoch, at(40*time.Second))
	require.NoError(t, err)
	require.Equal(t, ms(at(40*time.Second)), got.LeaseExpiresAt)

	_, err = s.HeartbeatBroker(ctx, 6, 1, at(time.Hour))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testProducerIDBlocks: blocks are consecutive and never overlap, even when
// allocated concurrently, and only the current broker epoch may allocate.
func testProducerIDBlocks(t *testing.T, s store.Store) {
	ctx := t.Context()
	b, err := s.RegisterBroker(ctx, store.Broker{ID: 1, Address: "127.0.0.1:9001", LeaseExpiresAt: at(time.Hour), RegisteredAt: at(0)})
	require.NoError(t, err)

	first, err := s.AllocateProducerIDs(ctx, 1, b.Epoch, 1000, at(0))
	require.NoError(t, err)
	require.Equal(t, int64(0), first)
	second, err := s.AllocateProducerIDs(ctx, 1, b.Epoch, 10, at(0))
	require.NoError(t, err)
	require.Equal(t, int64(1000), second)

	_, err = s.AllocateProducerIDs(ctx, 1, b.Epoch+1, 10, at(0))
	require.ErrorIs(t, err, store.ErrConflict)
	_, err = s.AllocateProducerIDs(ctx, 2, 1, 10, at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.AllocateProducerIDs(ctx, 1, b.Epoch, 0, at(0))
	require.Error(t, err)

	const n = 20
	firsts := make(chan int64, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			f, err := s.AllocateProducerIDs(ctx, 1, b.Epoch, 100, at(0))
			errs <- err
			firsts <- f
		}()
	}
	var got []int64
	for range n {
		require.NoError(t, <-errs)
		got = append(got, <-firsts)
	}
	slices.Sort(got)
	for i, f := range got {
		require.Equal(t, int64(1010+100*i), f, "blocks of 100 from 1010, without gaps or overlaps")
	}
}

// ---- time ----

// testTimeRoundTripUTC stores times from several zones with nanoseconds in
// every time column and checks they come back truncated to the millisecond,
// in UTC, and equal as instants.
func testTimeRoundTripUTC(t *testing.T, s store.Store) {
	ctx := t.Context()
	zones := []*time.Location{time.UTC, time.FixedZone("west", -7*3600), time.FixedZone("east", 9*3600+1800)}
	for i, loc := range zones {
		tm := time.Date(2031, time.December, 31, 23, 59, 59, 999_999_999, loc).Add(time.Duration(i) * time.Hour)
		want := time.UnixMilli(tm.UnixMilli()).UTC()

		ten, key := newTenantValue()
		ten.CreatedAt, key.CreatedAt = tm, tm
		require.NoError(t, s.CreateTenant(ctx, ten, key))
		gotTen, err := s.GetTenant(ctx, ten.ID)
		require.NoError(t, err)
		require.Equal(t, want, gotTen.CreatedAt)
		require.True(t, gotTen.CreatedAt.Equal(tm.Truncate(time.Millisecond)))

		gotKey, err := s.RevokeAPIKey(ctx, ten.ID, key.ID, tm)
		require.NoError(t, err)
		require.Equal(t, want, gotKey.CreatedAt)
		require.Equal(t, want, gotKey.RevokedAt)

		tp, parts := newTopicValue(ten.ID, "clock", 1)
		tp.CreatedAt, tp.UpdatedAt = tm, tm
		require.NoError(t, s.CreateTopic(ctx, tp, parts, store.CountLimits{}))
		gotTopic, err := s.GetTopicByID(ctx, tp.ID)
		require.NoError(t, err)
		require.Equal(t, want, gotTopic.CreatedAt)
		require.Equal(t, want, gotTopic.UpdatedAt)

		b, err := s.RegisterBroker(ctx, store.Broker{ID: int32(100 + i), Address: "x", LeaseExpiresAt: tm, RegisteredAt: tm})
		require.NoError(t, err)
		require.Equal(t, want, b.LeaseExpiresAt)
		require.Equal(t, want, b.RegisteredAt)

		kid := "clock-" + store.NewID()
		require.NoError(t, s.InsertSigningKey(ctx, store.SigningKey{KID: kid, Private: []byte{1}, CreatedAt: tm}))
		require.NoError(t, s.RetireSigningKey(ctx, kid, tm))
		keys, err := s.ListSigningKeys(ctx)
		require.NoError(t, err)
		found := false
		for _, k := range keys {
			if k.KID == kid {
				found = true
				require.Equal(t, want, k.CreatedAt)
				require.Equal(t, want, k.RetiredAt)
			}
		}
		require.True(t, found)
	}

	// Times before 1970 and the zero time survive too.
	old := time.Date(1969, time.July, 20, 20, 17, 40, 123_456_789, time.UTC)
	b, err := s.RegisterBroker(ctx, store.Broker{ID: 200, Address: "x", LeaseExpiresAt: old, RegisteredAt: old})
	require.NoError(t, err)
	require.Equal(t, ms(old), b.LeaseExpiresAt)
	b, err = s.RegisterBroker(ctx, store.Broker{ID: 201, Address: "x", RegisteredAt: old})
	require.NoError(t, err)
	require.True(t, b.LeaseExpiresAt.IsZero(), "zero lease: %v", b.LeaseExpiresAt)
	require.False(t, b.Live(time.Now()))
}
