package controlplane_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

func group(tenantID, name string, token int64) *sluicev1.ObjectReservation {
	return &sluicev1.ObjectReservation{TenantId: tenantID, Kind: sluicev1.CountedKind_COUNTED_KIND_GROUP, Name: name, Token: token}
}

func txnID(tenantID, name string, token int64) *sluicev1.ObjectReservation {
	return &sluicev1.ObjectReservation{TenantId: tenantID, Kind: sluicev1.CountedKind_COUNTED_KIND_TRANSACTIONAL_ID, Name: name, Token: token}
}

func (c *cluster) reserve(broker int32, epoch int64, objs ...*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
	return c.reserveCtx(context.Background(), broker, epoch, objs...)
}

func (c *cluster) reserveCtx(ctx context.Context, broker int32, epoch int64, objs ...*sluicev1.ObjectReservation) ([]*sluicev1.ObjectReservationResult, error) {
	res, err := c.brokers(brokerToken).ReserveObjects(ctx, connect.NewRequest(&sluicev1.ReserveObjectsRequest{
		BrokerId: broker, BrokerEpoch: epoch, Reservations: objs,
	}))
	if err != nil {
		return nil, err
	}
	return res.Msg.GetResults(), nil
}

func granted(res []*sluicev1.ObjectReservationResult) []bool {
	out := make([]bool, len(res))
	for i, r := range res {
		out[i] = r.GetGranted()
	}
	return out
}

// TestControlPlaneReserveObjects: ReserveObjects grants a tenant's new
// groups and transactional ids up to its limits, counting what the
// brokers report plus what is reserved and not yet reported; a quota
// exchange confirming a reservation hands its count over to the report;
// an unknown tenant's are refused; a stale broker epoch, a malformed
// reservation and a tenant's token are refused.
func TestControlPlaneReserveObjects(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL)
		ctx := context.Background()
		e1, e2 := c.register(t, 1), c.register(t, 2)
		alice := c.signup(t, "alice")
		bob := c.signup(t, "bob")
		_, err := c.operator(operatorToken).UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{
			TenantId: alice.tenantID, Overrides: &sluicev1.LimitOverrides{MaxGroups: ptr(int32(2)), MaxTransactionalIds: ptr(int32(1))}}))
		require.NoError(t, err)
		a := alice.tenantID

		// One call, two tenants, both kinds, in order.
		res, err := c.reserve(1, e1, group(a, "g1", 1), txnID(a, "t1", 2), group(bob.tenantID, "g1", 3), group(a, "g2", 4),
			group(a, "g3", 5), txnID(a, "t2", 6), group(a, "g1", 7))
		require.NoError(t, err)
		require.Equal(t, []bool{true, true, true, true, false, false, true}, granted(res))
		require.Equal(t, int64(2), res[4].GetCount())
		require.Equal(t, int64(2), res[4].GetLimit())
		require.Equal(t, int64(100), res[2].GetLimit(), "bob: the free plan's")

		// Broker 1 created g1 and g2 and confirms them: the report counts
		// them instead, from any broker's point of view.
		_, err = c.brokers(brokerToken).ExchangeQuotas(ctx, connect.NewRequest(&sluicev1.ExchangeQuotasRequest{
			BrokerId: 1, BrokerEpoch: e1, Tenants: []*sluicev1.TenantQuotaReport{{TenantId: a, Groups: 2, TransactionalIds: 1}},
			Applied: []*sluicev1.ObjectReservation{group(a, "g1", 7), group(a, "g2", 4), txnID(a, "t1", 2)},
		}))
		require.NoError(t, err)
		res, err = c.reserve(2, e2, group(a, "g3", 8))
		require.NoError(t, err)
		require.Equal(t, []bool{false}, granted(res))
		require.Equal(t, int64(2), res[0].GetCount())
		// One deleted: room for one.
		_, err = c.exchange(1, e1, &sluicev1.TenantQuotaReport{TenantId: a, Groups: 1, TransactionalIds: 1})
		require.NoError(t, err)
		res, err = c.reserve(2, e2, group(a, "g3", 9), group(a, "g4", 10))
		require.NoError(t, err)
		require.Equal(t, []bool{true, false}, granted(res))

		// An unknown tenant's: refused.
		res, err = c.reserve(1, e1, group("01a24a75-33ad-72dd-85c1-71ad89e25b7a", "g", 11))
		require.NoError(t, err)
		require.Equal(t, []bool{false}, granted(res))

		_, err = c.reserve(1, e1+1, group(a, "g9", 12))
		requireCode(t, connect.CodeFailedPrecondition, err, "stale")
		for name, o := range map[string]*sluicev1.ObjectReservation{
			"no kind":    {TenantId: a, Name: "g", Token: 1},
			"empty name": group(a, "", 1),
			"long name":  group(a, string(make([]byte, 256)), 1),
			"bad tenant": group("nope", "g", 1),
		} {
			_, err = c.reserve(1, e1, o)
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", name, err)
			_, err = c.brokers(brokerToken).ExchangeQuotas(ctx, connect.NewRequest(&sluicev1.ExchangeQuotasRequest{BrokerId: 1, BrokerEpoch: e1, Applied: []*sluicev1.ObjectReservation{o}}))
			require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%s: %v", name, err)
		}
		_, err = c.brokers(alice.token).ReserveObjects(ctx, connect.NewRequest(&sluicev1.ReserveObjectsRequest{BrokerId: 1, BrokerEpoch: e1,
			Reservations: []*sluicev1.ObjectReservation{group(a, "g9", 13)}}))
		require.Contains(t, []connect.Code{connect.CodePermissionDenied, connect.CodeUnauthenticated}, connect.CodeOf(err), "a tenant's token: %v", err)
	})
}

// TestControlPlaneCountLimitsTwoReplicas (issue 29 item 3): creations
// racing on two control-plane replicas over one Postgres never pass a
// count limit together. 1,000 reservations of new groups from three
// brokers, half through each replica, grant exactly max_groups; 40
// concurrent CreateTopic of one partition each create exactly max_topics;
// 40 concurrent CreatePartitions growing them by one each stop exactly at
// max_partitions.
//
// Both replicas run on one fake clock that nothing moves: the brokers,
// which never heartbeat here, stay live, and no reservation expires
// (quota.ReservationTTL), however long the races take on a loaded
// machine.
func TestControlPlaneCountLimitsTwoReplicas(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	clk := clock.NewFake(time.Now())
	replicas := []*cluster{startAt(t, url, clk, nil), startAt(t, url, clk, nil)}
	replicas[0].registerBrokers(t, 3)
	epochs := map[int32]int64{}
	for id := int32(1); id <= 3; id++ {
		epochs[id] = replicas[1].register(t, id) // registered again: the current epochs
	}
	ctx := context.Background()
	alice := replicas[0].signup(t, "alice")
	const maxGroups, maxTopics, maxPartitions = 100, 10, 25
	_, err := replicas[0].operator(operatorToken).UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: alice.tenantID,
		Overrides: &sluicev1.LimitOverrides{MaxGroups: ptr(int32(maxGroups)), MaxTopics: ptr(int32(maxTopics)), MaxPartitions: ptr(int32(maxPartitions))}}))
	require.NoError(t, err)
	for _, c := range replicas {
		// Both replicas see the overrides (the other one's limit cache
		// holds none of alice's yet).
		res, err := c.reserve(1, epochs[1], group(alice.tenantID, "warm", 1))
		require.NoError(t, err)
		require.Equal(t, int64(maxGroups), res[0].GetLimit())
	}

	// race starts n calls at once. The calls queue: one tenant's
	// decisions take its row lock in turn, and each call costs 8-10 ms of
	// the test process's CPU under the race detector (as much one at a
	// time as 400 at once), so the last of 1,000 ends 27-40 s after the
	// first at load average 16-19: past the API clients' 30 s timeout,
	// which is for one call, not for a queue. So the calls have no
	// timeout (untimed); they fail when no call of the race has ended for
	// 30 s: a stall, not a long queue.
	race := func(n int, call func(ctx context.Context, i int) error, refused func(error) bool) int {
		ctx, ended := progress(t, 30*time.Second)
		var ok atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				err := call(ctx, i)
				ended()
				switch {
				case err == nil:
					ok.Add(1)
				case !refused(err):
					assert.NoError(t, err, "call %d (%v)", i, context.Cause(ctx))
				}
			})
		}
		began := time.Now()
		close(start)
		wg.Wait()
		t.Logf("%d concurrent calls ended within %s", n, time.Since(began).Round(time.Millisecond))
		return int(ok.Load())
	}
	untimed := []*cluster{replicas[0].untimed(), replicas[1].untimed()}
	var grants atomic.Int32
	race(1000, func(ctx context.Context, i int) error {
		broker := int32(i%3 + 1)
		res, err := untimed[i%2].reserveCtx(ctx, broker, epochs[broker], group(alice.tenantID, fmt.Sprintf("g-%04d", i), int64(i+2)))
		if err == nil && res[0].GetGranted() {
			grants.Add(1)
		}
		return err
	}, func(error) bool { return false })
	require.Equal(t, int32(maxGroups-1), grants.Load(), "the warm-up's group is pending too")

	resourceExhausted := func(err error) bool { return connect.CodeOf(err) == connect.CodeResourceExhausted }
	created := race(40, func(ctx context.Context, i int) error {
		_, err := untimed[i%2].topics(alice.token).CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{Name: fmt.Sprintf("t%02d", i), PartitionCount: 1, ReplicationFactor: 1}))
		return err
	}, resourceExhausted)
	require.Equal(t, maxTopics, created, "topics created")
	listed, err := replicas[0].topics(alice.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
	require.NoError(t, err)
	require.Len(t, listed.Msg.GetTopics(), maxTopics)

	// Each call grows one topic by one partition (topic i%10 to i/10+2
	// partitions: each growth of a topic asks for the next count, so calls
	// on one topic may also conflict and be refused as concurrent).
	var names []string
	for _, tp := range listed.Msg.GetTopics() {
		names = append(names, tp.GetName())
	}
	grown := race(40, func(ctx context.Context, i int) error {
		name := names[i%len(names)]
		for {
			d, err := untimed[i%2].topics(alice.token).DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: name}))
			if err != nil {
				return err
			}
			_, err = untimed[i%2].topics(alice.token).CreatePartitions(ctx, connect.NewRequest(&sluicev1.CreatePartitionsRequest{
				Name: name, PartitionCount: d.Msg.GetTopic().GetPartitionCount() + 1}))
			if code := connect.CodeOf(err); code == connect.CodeAborted || code == connect.CodeInvalidArgument {
				continue // grown meanwhile: ask for the next count
			}
			return err
		}
	}, resourceExhausted)
	require.Equal(t, maxPartitions-maxTopics, grown, "partitions added")
	total := 0
	listed, err = replicas[1].topics(alice.token).ListTopics(ctx, connect.NewRequest(&sluicev1.ListTopicsRequest{}))
	require.NoError(t, err)
	for _, tp := range listed.Msg.GetTopics() {
		total += int(tp.GetPartitionCount())
	}
	require.Equal(t, maxPartitions, total)
}

// progress returns a context for calls that queue behind each other and
// ended, which each call runs when it ends: the context is cancelled
// (with a cause saying so) when stall passes without a call ending, so
// that a long queue is waited for and a stuck one fails. It is cancelled
// at the test's end.
func progress(t *testing.T, stall time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var n atomic.Int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped; cancel(nil) })
	go func() {
		defer close(stopped)
		tick := time.NewTicker(stall / 10)
		defer tick.Stop()
		last, at := n.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if cur := n.Load(); cur != last {
				last, at = cur, time.Now()
			} else if time.Since(at) >= stall {
				cancel(fmt.Errorf("no call ended for %s (%d ended)", stall, cur))
				return
			}
		}
	}()
	return ctx, func() { n.Add(1) }
}
