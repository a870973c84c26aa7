package storetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Count reservations (issue 29): a tenant's new groups and transactional ids
// reserved against its count limits, atomically with the brokers' quota
// reports that confirm them.

func init() {
	tests = append(tests, reservationTests...)
	concurrentTests = append(concurrentTests, reservationConcurrentTests...)
}

var reservationTests = []test{
	{name: "ReservationDecide", fn: testReservationDecide},
	{name: "ReservationConfirm", fn: testReservationConfirm},
	{name: "ReservationExpiry", fn: testReservationExpiry},
	{name: "ReservationInvalid", fn: testReservationInvalid},
}

var reservationConcurrentTests = []test{
	{name: "ConcurrentReservationLimit", fn: testConcurrentReservationLimit},
}

// reservationLimits are the suite's limits: 3 groups, 2 transactional ids.
var reservationLimits = map[store.ObjectKind]int64{store.ObjectGroup: 3, store.ObjectTransactionalID: 2}

// reserve decides the tenant's reservations of broker at when, counting
// the reports of the last 3 s, with a 60 s TTL; names are groups unless
// they start with "t" (transactional ids). It returns which were granted.
func reserve(t *testing.T, s store.Store, tenantID string, broker int32, when time.Time, token int64, names ...string) []bool {
	t.Helper()
	res, err := s.ReserveObjects(t.Context(), reservations(tenantID, broker, when, token, names...))
	require.NoError(t, err)
	require.Len(t, res, len(names))
	out := make([]bool, len(res))
	for i, r := range res {
		out[i] = r.Granted
	}
	return out
}

func reservations(tenantID string, broker int32, when time.Time, token int64, names ...string) store.Reservations {
	r := store.Reservations{TenantID: tenantID, BrokerID: broker, At: when, TTL: time.Minute, ReportedAfter: when.Add(-3 * time.Second), Limits: reservationLimits}
	for _, n := range names {
		r.Objects = append(r.Objects, object(tenantID, n, token))
	}
	return r
}

func object(tenantID, name string, token int64) store.ObjectReservation {
	kind := store.ObjectGroup
	if name[0] == 't' {
		kind = store.ObjectTransactionalID
	}
	return store.ObjectReservation{TenantID: tenantID, Kind: kind, Name: name, Token: token}
}

// testReservationDecide: a name is granted while the tenant's reported
// count (fresh reports only) plus its pending names is below the limit of
// its kind, and again while it is pending (one object); each kind and
// each tenant counts on its own; the results carry the count and limit.
func testReservationDecide(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b, _ := createTenant(t, s)
	b1, _ := usageBroker(t, s)
	b2, _ := usageBroker(t, s)
	// a holds one group at b1; b2's report is stale (more than 3 s old).
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(10*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 1}}, nil))
	require.NoError(t, s.PutQuotaReports(t.Context(), b2, at(5*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 5, TransactionalIDs: 5}}, nil))

	res, err := s.ReserveObjects(t.Context(), reservations(a.ID, b1, at(11*time.Second), 1, "g1", "g2", "g3", "g1", "t1", "t2", "t3"))
	require.NoError(t, err)
	require.Equal(t, []store.ReservationResult{
		{Granted: true, Count: 1, Limit: 3}, {Granted: true, Count: 2, Limit: 3},
		{Granted: false, Count: 3, Limit: 3}, {Granted: true, Count: 3, Limit: 3},
		{Granted: true, Count: 0, Limit: 2}, {Granted: true, Count: 1, Limit: 2}, {Granted: false, Count: 2, Limit: 2},
	}, res)
	// Pending names count in later calls, from any broker; a pending name
	// is granted again.
	require.Equal(t, []bool{false, true, true}, reserve(t, s, a.ID, b2, at(12*time.Second), 2, "g4", "g2", "t2"))
	// Another tenant is not affected.
	require.Equal(t, []bool{true, true, true, false}, reserve(t, s, b.ID, b1, at(12*time.Second), 3, "g1", "g2", "g3", "g4"))
	// An unknown tenant.
	_, err = s.ReserveObjects(t.Context(), reservations(store.NewID(), b1, at(12*time.Second), 4, "g1"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// testReservationConfirm: a quota report confirming a name (its broker and
// token) ends its reservation in the same write, so the name is counted
// once, by the report; a confirmation of another token (the name reserved
// again since) or from another broker ends nothing; a report that no
// longer counts an object frees its place.
func testReservationConfirm(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b1, _ := usageBroker(t, s)
	b2, _ := usageBroker(t, s)
	require.Equal(t, []bool{true, true, true}, reserve(t, s, a.ID, b1, at(time.Second), 1, "g1", "g2", "g3"))
	require.Equal(t, []bool{false}, reserve(t, s, a.ID, b1, at(time.Second), 2, "g4"))

	// b1 created g1 and g2, and failed to create g3: it reports 2 groups
	// and confirms all three. Room for one.
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(2*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 2}},
		[]store.ObjectReservation{object(a.ID, "g1", 1), object(a.ID, "g2", 1), object(a.ID, "g3", 1)}))
	require.Equal(t, []bool{true, false}, reserve(t, s, a.ID, b1, at(3*time.Second), 3, "g4", "g5"))

	// g4 reserved again (token 4) after its first grant (3): the
	// confirmation of token 3, or one from b2, leaves it pending.
	require.Equal(t, []bool{true}, reserve(t, s, a.ID, b1, at(3*time.Second), 4, "g4"))
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(4*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 2}},
		[]store.ObjectReservation{object(a.ID, "g4", 3)}))
	require.NoError(t, s.PutQuotaReports(t.Context(), b2, at(4*time.Second), nil, []store.ObjectReservation{object(a.ID, "g4", 4)}))
	res, err := s.ReserveObjects(t.Context(), reservations(a.ID, b1, at(5*time.Second), 5, "g5"))
	require.NoError(t, err)
	require.Equal(t, []store.ReservationResult{{Granted: false, Count: 3, Limit: 3}}, res, "g4 still pending")

	// Confirmed with its token: counted by the report instead.
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(6*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 3}},
		[]store.ObjectReservation{object(a.ID, "g4", 4)}))
	res, err = s.ReserveObjects(t.Context(), reservations(a.ID, b1, at(7*time.Second), 6, "g5"))
	require.NoError(t, err)
	require.Equal(t, []store.ReservationResult{{Granted: false, Count: 3, Limit: 3}}, res)
	// A group deleted: the report counts 2.
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(8*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 2}}, nil))
	require.Equal(t, []bool{true}, reserve(t, s, a.ID, b1, at(9*time.Second), 7, "g5"))
	// Confirming an unknown or ended reservation changes nothing.
	require.NoError(t, s.PutQuotaReports(t.Context(), b1, at(10*time.Second), []store.QuotaReport{{TenantID: a.ID, Groups: 2}},
		[]store.ObjectReservation{object(a.ID, "g1", 1), object(a.ID, "nope", 9)}))
	require.Equal(t, []bool{false}, reserve(t, s, a.ID, b1, at(11*time.Second), 8, "g6"), "g5 still pending")
}

// testReservationExpiry: a reservation never confirmed stops counting at
// its TTL (its broker crashed).
func testReservationExpiry(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b1, _ := usageBroker(t, s)
	require.Equal(t, []bool{true, true, true, false}, reserve(t, s, a.ID, b1, at(0), 1, "g1", "g2", "g3", "g4"))
	require.Equal(t, []bool{false}, reserve(t, s, a.ID, b1, at(time.Minute-time.Millisecond), 2, "g4"))
	require.Equal(t, []bool{true, true, true, false}, reserve(t, s, a.ID, b1, at(time.Minute), 3, "g4", "g5", "g6", "g7"))
}

// testReservationInvalid: malformed reservations and confirmations are
// refused (not a sentinel) and change nothing.
func testReservationInvalid(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	b1, _ := usageBroker(t, s)
	long := string(make([]byte, store.MaxObjectName+1))
	for name, mod := range map[string]func(*store.Reservations){
		"bad tenant":   func(r *store.Reservations) { r.TenantID = "x" },
		"no time":      func(r *store.Reservations) { r.At = time.Time{} },
		"no ttl":       func(r *store.Reservations) { r.TTL = 0 },
		"bad kind":     func(r *store.Reservations) { r.Objects[0].Kind = "topic" },
		"empty name":   func(r *store.Reservations) { r.Objects[0].Name = "" },
		"long name":    func(r *store.Reservations) { r.Objects[0].Name = long },
		"nul in name":  func(r *store.Reservations) { r.Objects[0].Name = "a\x00b" },
		"invalid utf8": func(r *store.Reservations) { r.Objects[0].Name = "a\xffb" },
		"too many": func(r *store.Reservations) {
			r.Objects = make([]store.ObjectReservation, store.MaxReservations+1)
			for i := range r.Objects {
				r.Objects[i] = object(a.ID, fmt.Sprintf("g%d", i), 1)
			}
		},
	} {
		r := reservations(a.ID, b1, at(0), 1, "g1")
		mod(&r)
		_, err := s.ReserveObjects(t.Context(), r)
		require.Error(t, err, name)
		require.False(t, isSentinel(err), name)
		err = s.PutQuotaReports(t.Context(), b1, at(0), nil, r.Objects)
		if name != "bad tenant" && name != "no time" && name != "no ttl" {
			require.Error(t, err, name)
			require.False(t, isSentinel(err), name)
		}
	}
	require.Equal(t, []bool{true, true, true, false}, reserve(t, s, a.ID, b1, at(0), 1, "g1", "g2", "g3", "g4"), "nothing reserved")
}

// testConcurrentReservationLimit: creations over three brokers at once,
// each reserving its name, "creating" it when granted and confirming it in
// its broker's next report (the applied names taken before the count, as a
// broker does), while the brokers keep reporting: exactly the limit is
// granted, never more, however the reports and the decisions interleave.
func testConcurrentReservationLimit(t *testing.T, s store.Store) {
	a, _ := createTenant(t, s)
	const limit = 20
	limits := map[store.ObjectKind]int64{store.ObjectGroup: limit, store.ObjectTransactionalID: limit}
	type broker struct {
		id      int32
		mu      sync.Mutex
		created map[string]bool
		applied []store.ObjectReservation
	}
	var brokers []*broker
	for range 3 {
		id, _ := usageBroker(t, s)
		brokers = append(brokers, &broker{id: id, created: map[string]bool{}})
	}
	now := func() time.Time { return time.Now() }
	report := func(b *broker) error {
		b.mu.Lock()
		applied := slices.Clone(b.applied)
		b.mu.Unlock()
		b.mu.Lock()
		n := len(b.created)
		b.mu.Unlock()
		if err := s.PutQuotaReports(t.Context(), b.id, now(), []store.QuotaReport{{TenantID: a.ID, Groups: int32(n)}}, applied); err != nil {
			return err
		}
		b.mu.Lock()
		b.applied = b.applied[len(applied):]
		b.mu.Unlock()
		return nil
	}
	stop := make(chan struct{})
	var reporters sync.WaitGroup
	for _, b := range brokers {
		reporters.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				assert.NoError(t, report(b))
			}
		})
	}
	var granted atomic.Int64
	var token atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range goroutines {
		b := brokers[i%len(brokers)]
		name := fmt.Sprintf("g%d", i)
		wg.Go(func() {
			<-start
			tok := token.Add(1)
			res, err := s.ReserveObjects(t.Context(), store.Reservations{TenantID: a.ID, BrokerID: b.id, At: now(), TTL: time.Minute,
				ReportedAfter: now().Add(-time.Minute), Limits: limits, Objects: []store.ObjectReservation{object(a.ID, name, tok)}})
			if !assert.NoError(t, err) || !res[0].Granted {
				return
			}
			granted.Add(1)
			b.mu.Lock()
			b.created[name] = true
			b.applied = append(b.applied, object(a.ID, name, tok))
			b.mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	reporters.Wait()
	require.Equal(t, int64(limit), granted.Load(), "granted exactly the limit")
	total := 0
	for _, b := range brokers {
		require.NoError(t, report(b))
		total += len(b.created)
		require.Empty(t, b.applied)
	}
	require.Equal(t, limit, total)
	res, err := s.ReserveObjects(t.Context(), store.Reservations{TenantID: a.ID, BrokerID: brokers[0].id, At: now(), TTL: time.Minute,
		ReportedAfter: now().Add(-time.Minute), Limits: limits, Objects: []store.ObjectReservation{object(a.ID, "late", token.Add(1))}})
	require.NoError(t, err)
	require.Equal(t, []store.ReservationResult{{Granted: false, Count: limit, Limit: limit}}, res, "at the limit, every grant confirmed and counted by the reports")
}
