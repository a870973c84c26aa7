package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// burstCreations is how many new groups (then transactional ids) the burst
// asks for at once, burstLimit the tenant's max_groups and
// max_transactional_ids.
const (
	burstCreations = 1000
	burstLimit     = 100
)

// TestQuotaCountLimitsBurst (issue 29 item 3): a count limit is a count. On 3
// brokers and the control plane on Postgres, a tenant with max_groups and
// max_transactional_ids of 100 (its rates lifted, so that only the counts
// refuse) asks for 1,000 new groups at once (CommitOffsets, sent to the
// three brokers in turn, each forwarding to the group's coordinator), then
// for 1,000 new transactional ids at once (InitProducerId, likewise):
// exactly 100 of each are accepted, every other call is refused
// resource_exhausted naming the limit, and the tenant then has exactly 100
// groups. A group deleted then frees its place within seconds: the
// brokers' quota reports confirm the reservations they created.
func TestQuotaCountLimitsBurst(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: plainBin, DatabaseURL: testenv.PostgresURL(t)})
	limit, lifted := int32(burstLimit), int32(1_000_000)
	cl := c.NewTenant(t, "burst", &sluicev1.LimitOverrides{
		MaxGroups: &limit, MaxTransactionalIds: &limit,
		RequestsPerSec: &lifted, ProducerIdsPerHour: &lifted,
	})
	cl = cl.NewTopic(t, "orders", 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	hc := h2c()
	bearer := connect.WithInterceptors(tenants.Bearer(cl.Token()))
	ids := c.BrokerIDs()
	var groups []sluicev1connect.GroupServiceClient
	var records []sluicev1connect.RecordServiceClient
	for _, id := range ids {
		groups = append(groups, sluicev1connect.NewGroupServiceClient(hc, "http://"+c.Broker(id).ListenAddr, connect.WithGRPC(), bearer))
		records = append(records, sluicev1connect.NewRecordServiceClient(hc, "http://"+c.Broker(id).ListenAddr, connect.WithGRPC(), bearer))
	}
	// Every coordinator of either internal topic loaded and answering
	// before the burst, so that the burst measures admission, not a cold
	// start (a DescribeGroup of an unknown group, an InitProducerId of no
	// id, create nothing).
	testenv.Wait(t, 60*time.Second, "the group coordinators answering", func() error {
		for i := range 64 {
			_, err := groups[i%len(groups)].DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: fmt.Sprintf("warm-%d", i)}))
			if connect.CodeOf(err) != connect.CodeNotFound {
				return fmt.Errorf("describe an unknown group: %v", err)
			}
		}
		return nil
	})

	groupsAccepted := burst(t, ctx, "max_groups", func(i int) error {
		_, err := groups[i%len(groups)].CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
			Group: fmt.Sprintf("g-%04d", i), Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: int32(i % 3), Offset: 0}},
		}))
		return err
	})
	txnAccepted := burst(t, ctx, "max_transactional_ids", func(i int) error {
		_, err := records[i%len(records)].InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionalId: fmt.Sprintf("t-%04d", i)}))
		return err
	})
	t.Logf("accepted %d of %d new groups and %d of %d new transactional ids against limits of %d",
		groupsAccepted, burstCreations, txnAccepted, burstCreations, burstLimit)

	listed, err := groups[0].ListGroups(ctx, connect.NewRequest(&sluicev1.ListGroupsRequest{}))
	require.NoError(t, err)
	require.Len(t, listed.Msg.GetGroups(), groupsAccepted, "the groups the tenant has")
	// Exact, unless a reservation found the control plane not answering
	// within 5 s (a machine far busier than this test is meant for): such
	// a creation is admitted unreserved, the documented bound
	// (docs/quotas-and-billing.md), counted in
	// sluice_broker_count_reservations_total{result="unreserved"}.
	requireExact := func(kind, what string, accepted int) {
		t.Helper()
		var unreserved float64
		for _, id := range c.BrokerIDs() {
			v, err := labelledMetric(c.HTTPClient(), c.Broker(id).MetricsAddr, "sluice_broker_count_reservations_total", `kind="`+kind+`",result="unreserved"`)
			require.NoError(t, err)
			unreserved += v
		}
		if unreserved == 0 {
			require.Equal(t, burstLimit, accepted, "new %s accepted", what)
			return
		}
		t.Logf("%.0f new %s admitted unreserved: the control plane did not answer their reservations within 5 s", unreserved, what)
		require.GreaterOrEqual(t, accepted, burstLimit, "new %s accepted", what)
		require.LessOrEqual(t, accepted, burstLimit+int(unreserved), "new %s accepted: at most the limit and those admitted unreserved", what)
	}
	requireExact("group", "groups", groupsAccepted)
	requireExact("transactional_id", "transactional ids", txnAccepted)

	// The brokers' reports take over the count from the reservations
	// (confirmed, not left to expire after 2 minutes): a group deleted
	// frees its place within a few exchanges.
	_, err = groups[0].DeleteGroup(ctx, connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: listed.Msg.GetGroups()[0].GetGroup()}))
	require.NoError(t, err)
	freed := time.Now()
	testenv.Wait(t, 30*time.Second, "a new group admitted in the deleted one's place", func() error {
		_, err := groups[1].CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
			Group: "after", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 0}},
		}))
		return err
	})
	t.Logf("a new group admitted %s after one was deleted", time.Since(freed).Round(time.Millisecond))
	_, err = groups[2].CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
		Group: "one-too-many", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 0}},
	}))
	require.True(t, isCountRefusal(err, "max_groups"), "at the limit again: %v", err)
}

// burst makes burstCreations calls of create at once (i is the call's
// number) and returns how many succeeded. A call refused for another
// reason than the count limit named, or failing, fails the test; one
// answered unavailable (a coordinator moving or loading) is made again.
func burst(t *testing.T, ctx context.Context, limit string, create func(i int) error) int {
	t.Helper()
	var (
		mu       sync.Mutex
		accepted int
		errs     []error
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range burstCreations {
		wg.Go(func() {
			<-start
			for {
				err := create(i)
				if connect.CodeOf(err) == connect.CodeUnavailable && ctx.Err() == nil {
					pause(ctx, 50*time.Millisecond) // not synchronisation: a retry's pace
					continue
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					accepted++
				case !isCountRefusal(err, limit):
					errs = append(errs, fmt.Errorf("call %d: %w", i, err))
				}
				return
			}
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d calls in %s", burstCreations, time.Since(began).Round(time.Millisecond))
	require.NoError(t, errors.Join(errs...))
	return accepted
}

// isCountRefusal reports whether err is resource_exhausted with a
// QuotaFailure naming limit and no RetryInfo.
func isCountRefusal(err error, limit string) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		return false
	}
	named := false
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			return false
		}
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			return false
		case *errdetails.QuotaFailure:
			for _, q := range v.GetViolations() {
				named = named || q.GetDescription() == limit
			}
		}
	}
	return named
}
