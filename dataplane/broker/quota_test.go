package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/dataplane/admission"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// startQuotaCluster starts the in-process cluster with quota exchanges a
// minute apart, so that the only exchanges while a test runs are the ones
// a tenant new to a broker asks for.
func startQuotaCluster(t *testing.T) *lagCluster {
	t.Helper()
	return startTestCluster(t, testClusterOpts{broker: func(c *Config) { c.QuotaExchangeInterval = time.Minute }})
}

// allot puts allotments in force on every broker, as an exchange's answer
// would, for the rest of the test (pinned: the exchanges that the
// tenant's first calls asked for do not replace them).
func (c *lagCluster) allot(allotments ...*sluicev1.TenantAllotment) {
	for _, b := range c.brokers {
		b.quota.Pin(allotments)
	}
}

// allotProduce allots the tenant rate produce bytes/s at every broker, of
// a cluster-wide limit (allot).
func (c *lagCluster) allotProduce(rate, limit int64) {
	c.allot(&sluicev1.TenantAllotment{
		TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{ProduceBytesPerSec: float64(rate)},
		Limits: &sluicev1.Limits{ProduceBytesPerSec: limit},
	})
}

// leaderRecords is a RecordService client of the leader of a partition of
// "orders" (nothing forwarded).
func (c *lagCluster) leaderRecords(t *testing.T, partition int32) sluicev1connect.RecordServiceClient {
	t.Helper()
	b := c.leaderOf(t, partition)
	return sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+b.cfg.Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
}

// valueOf is a produce request of one record with a value of n bytes.
func valueOf(partition int32, n int) *connect.Request[sluicev1.ProduceRequest] {
	return connect.NewRequest(&sluicev1.ProduceRequest{
		Topic: "orders", Partition: partition, Acks: sluicev1.Acks_ACKS_ALL,
		Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: []*sluicev1.Record{{Value: make([]byte, n)}}}},
	})
}

// quotaDetails returns a ResourceExhausted refusal's RetryInfo (nil
// without one) and its QuotaFailure's one violation.
func quotaDetails(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure_Violation) {
	t.Helper()
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
	var ce *connect.Error
	require.True(t, errors.As(err, &ce))
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			ri = v
		case *errdetails.QuotaFailure:
			qf = v
		}
	}
	require.NotNil(t, qf, "a QuotaFailure detail: %v", err)
	require.Len(t, qf.GetViolations(), 1)
	return ri, qf.GetViolations()[0]
}

func (c *lagCluster) highWatermark(t *testing.T, rc sluicev1connect.RecordServiceClient, partition int32) int64 {
	t.Helper()
	res, err := rc.ListOffsets(context.Background(), connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: partition, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
	require.NoError(t, err)
	return res.Msg.GetHighWatermark()
}

// TestBrokerQuotaProduce: a produce over the broker's allotment of the
// tenant's produce rate is answered ResourceExhausted with a RetryInfo
// (the debt's time to pay off) and a QuotaFailure naming the limit, its
// message giving the cluster-wide limit and the broker's share; nothing of
// it is appended; once the delay has passed a produce is admitted again.
// ProduceMany is charged too. Another tenant (the system tenant's writes:
// group commits) is not limited.
func TestBrokerQuotaProduce(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	rc := c.leaderRecords(t, 0)
	c.allotProduce(32<<10, 96<<10)
	// 100 KiB against a bucket of 8 KiB (a quarter second of 32 KiB/s):
	// admitted, and 92 KiB (2.875 s) in debt.
	start := time.Now()
	_, err := rc.Produce(ctx, valueOf(0, 100<<10))
	require.NoError(t, err)
	hw := c.highWatermark(t, rc, 0)
	_, err = rc.Produce(ctx, valueOf(0, 100<<10))
	elapsed := time.Since(start)
	ri, v := quotaDetails(t, err)
	require.NotNil(t, ri, "a rate refusal carries a RetryInfo")
	delay := ri.GetRetryDelay().AsDuration()
	require.LessOrEqual(t, delay, 2875*time.Millisecond)
	require.GreaterOrEqual(t, delay, 2875*time.Millisecond-elapsed, "the debt less what %s paid", elapsed)
	require.Equal(t, "tenant:"+c.tenantID, v.GetSubject())
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
	require.ErrorContains(t, err, "produce_bytes_per_sec quota (96 KiB/s across the cluster, 32 KiB/s of it at this broker now)")
	require.Equal(t, hw, c.highWatermark(t, rc, 0), "the refused produce appended nothing")
	require.Equal(t, 1.0, gatheredSum(t, c.leaderOf(t, 0).Registry(), "sluice_broker_quota_throttled_requests_total", "dimension", "produce_bytes"))

	// ProduceMany is charged and refused the same way while in debt.
	_, err = rc.ProduceMany(ctx, connect.NewRequest(&sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{
		{Topic: "orders", Partition: 0, Batches: &sluicev1.RecordBatches{Data: plainBatch(t, 1)}},
	}}))
	ri, v = quotaDetails(t, err)
	require.NotNil(t, ri)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())

	// The client that waits the delay is admitted.
	testenv.Wait(t, 10*time.Second, "a produce admitted after the delay", func() error {
		_, err := rc.Produce(ctx, valueOf(0, 10))
		return err
	})
	require.Equal(t, hw+1, c.highWatermark(t, rc, 0))
}

// TestBrokerQuotaRequests is the ListOffsets example: a tenant
// sending ListOffsets as fast as it can to one broker is admitted no more
// than that broker's allotment of its requests/s (plus the burst, a quarter second of it);
// the others are refused with a RetryInfo. A broker acting for the tenant
// with the broker credential (the group lag reads) is not counted.
func TestBrokerQuotaRequests(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	rc := c.leaderRecords(t, 0)
	const rate = 50
	c.allot(&sluicev1.TenantAllotment{
		TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{RequestsPerSec: rate},
		Limits: &sluicev1.Limits{RequestsPerSec: 3 * rate},
	})
	admitted, refused := 0, 0
	start := time.Now()
	for range 400 {
		_, err := rc.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
		if err == nil {
			admitted++
			continue
		}
		ri, v := quotaDetails(t, err)
		require.NotNil(t, ri)
		require.Equal(t, "requests_per_sec", v.GetDescription())
		require.ErrorContains(t, err, "150 requests/s across the cluster, 50 requests/s of it at this broker now")
		refused++
	}
	elapsed := time.Since(start).Seconds()
	t.Logf("%d admitted, %d refused in %.2fs", admitted, refused, elapsed)
	require.Positive(t, refused)
	require.LessOrEqual(t, float64(admitted), rate*(elapsed+0.25)+1, "at most the burst and the rate")

	// In debt now: the tenant's next call is refused, the broker's call
	// for it answered.
	_, err := rc.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
	if err != nil { // unless the loop ended just as the debt was paid
		quotaDetails(t, err)
	}
	// The metrics: throttled requests by dimension; by tenant, the tenants
	// throttled longest in the last exchange window get their own label
	// at the exchange, the others count as "other".
	leader := c.leaderOf(t, 0)
	reg := leader.Registry()
	require.Equal(t, float64(rate), gatheredSum(t, reg, "sluice_broker_quota_allotment", "dimension", "requests"))
	throttled := gatheredSum(t, reg, "sluice_broker_quota_throttled_requests_total", "dimension", "requests")
	require.GreaterOrEqual(t, throttled, float64(refused))
	require.Equal(t, throttled, gatheredSum(t, reg, "sluice_broker_quota_tenant_throttled_requests_total", "tenant", admission.OtherTenants))
	require.Positive(t, gatheredSum(t, reg, "sluice_broker_quota_throttle_seconds_total", "dimension", "requests"))
	require.NotNil(t, leader.quota.Report(ctx))
	testenv.Wait(t, 10*time.Second, "a refusal counted under the tenant's own label", func() error {
		for range 2 * rate {
			_, _ = rc.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
		}
		if gatheredSum(t, reg, "sluice_broker_quota_tenant_throttled_requests_total", "tenant", c.tenantID) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	for range 3 * rate {
		req := connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST})
		req.Header().Set("Authorization", "Bearer "+testBrokerToken)
		req.Header().Set(actForTenantHeader, c.tenantID)
		_, err := sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+c.leaderOf(t, 0).cfg.Advertised()).ListOffsets(ctx, req)
		require.NoError(t, err, "the broker credential is not limited")
	}
}

// TestBrokerQuotaFetch: a fetch is charged the bytes it answered; the
// next one, arriving in debt, is refused before reading, with a delay of
// the debt at the broker's allotment.
func TestBrokerQuotaFetch(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	rc := c.leaderRecords(t, 0)
	for range 8 {
		_, err := rc.Produce(ctx, valueOf(0, 100<<10))
		require.NoError(t, err)
	}
	const rate = 100 << 10
	c.allot(&sluicev1.TenantAllotment{
		TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{FetchBytesPerSec: rate},
		Limits: &sluicev1.Limits{FetchBytesPerSec: 3 * rate},
	})
	fetch := func() (*connect.Response[sluicev1.FetchResponse], error) {
		return rc.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 0, Offset: 0, MaxBytes: 1 << 20, RawBatches: true}))
	}
	start := time.Now()
	res, err := fetch()
	require.NoError(t, err, "not in debt: admitted whatever it reads")
	n := len(res.Msg.GetBatches().GetData())
	require.Greater(t, n, 700<<10)
	_, err = fetch()
	ri, v := quotaDetails(t, err)
	require.NotNil(t, ri)
	require.Equal(t, "fetch_bytes_per_sec", v.GetDescription())
	// The bucket held its burst (a quarter second of the rate), less the
	// answer.
	want := time.Duration(float64(n-rate/4) / rate * float64(time.Second))
	got := ri.GetRetryDelay().AsDuration()
	require.LessOrEqual(t, got, want)
	require.GreaterOrEqual(t, got, want-time.Since(start), "the debt less what the time since the read paid")
	require.ErrorContains(t, err, "fetch_bytes_per_sec quota (300 KiB/s across the cluster, 100 KiB/s of it at this broker now)")
}

// TestBrokerQuotaCounts: at its storage limit a tenant's produce is
// refused (ResourceExhausted, QuotaFailure, no RetryInfo; the message
// names the usage and the limit) while its fetches are served. At its
// group limit (the control plane refusing the coordinator's reservation)
// a new group is refused, whether joining, committing or resetting
// offsets, and an existing one served; at its transactional-id limit
// InitProducerId with a new id is refused and with a known one served.
// With the limits raised, all are admitted.
func TestBrokerQuotaCounts(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	ctx := context.Background()
	setLimits := func(n int32) {
		operator := sluicev1connect.NewOperatorServiceClient(h2c.Client(), c.endpoint, connect.WithInterceptors(tenants.Bearer(testOperatorToken)))
		_, err := operator.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: c.tenantID,
			Overrides: &sluicev1.LimitOverrides{MaxGroups: &n, MaxTransactionalIds: &n}}))
		require.NoError(t, err)
	}
	setLimits(1)
	rc := c.leaderRecords(t, 0)
	c.produce(t, 0, 5, time.Now())
	// Reserved at the control plane and created (pending there: the
	// exchanges, a minute apart, have not reported them yet).
	c.commit(t, "existing", map[int32]int64{0: 1})
	tc := c.clientsOf(0)
	_, err := initProducer(t, tc, "known", 0)
	require.NoError(t, err)

	c.allot(&sluicev1.TenantAllotment{
		TenantId: c.tenantID, StorageExceeded: true,
		Limits:       &sluicev1.Limits{MaxTotalStorageBytes: 1 << 30, MaxGroups: 1, MaxTransactionalIds: 1},
		StorageBytes: 3 << 29,
	})

	_, err = rc.Produce(ctx, valueOf(0, 10))
	ri, v := quotaDetails(t, err)
	require.Nil(t, ri, "retrying does not help: no RetryInfo")
	require.Equal(t, "tenant:"+c.tenantID, v.GetSubject())
	require.Equal(t, "max_total_storage_bytes", v.GetDescription())
	require.ErrorContains(t, err, "holds 1.5 GiB, at or over its max_total_storage_bytes limit of 1 GiB")
	_, err = rc.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 0}))
	require.NoError(t, err, "reads are served")

	// Groups: the existing one is served, a new one refused.
	c.commit(t, "existing", map[int32]int64{0: 2})
	_, err = c.groups.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: "existing", SubscribedTopics: []string{"orders"}, SubscriptionSet: true}))
	require.NoError(t, err)
	_, err = c.groups.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: "new", SubscribedTopics: []string{"orders"}, SubscriptionSet: true}))
	ri, v = quotaDetails(t, err)
	require.Nil(t, ri)
	require.Equal(t, "max_groups", v.GetDescription())
	require.ErrorContains(t, err, `has 1 consumer groups, at or over its max_groups limit of 1: group "new" would be a new one`)
	_, err = c.groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "new2", Offsets: []*sluicev1.PartitionOffset{{Topic: "orders", Partition: 0, Offset: 1}}}))
	_, v = quotaDetails(t, err)
	require.Equal(t, "max_groups", v.GetDescription())
	// Resetting offsets creates a group too (issue 29: it did, past the
	// limit); resetting an existing group's is served.
	_, err = c.groups.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: "new3", Topic: "orders", Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST, Force: true}))
	_, v = quotaDetails(t, err)
	require.Equal(t, "max_groups", v.GetDescription())
	require.ErrorContains(t, err, `group "new3" would be a new one`)
	_, err = c.groups.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: "new3"}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "not created: %v", err)
	_, err = c.groups.ResetOffsets(ctx, connect.NewRequest(&sluicev1.ResetOffsetsRequest{Group: "existing", Topic: "orders", Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST, Force: true}))
	require.NoError(t, err)

	// Transactional ids: the known one is served, a new one refused.
	_, err = initProducer(t, tc, "known", 0)
	require.NoError(t, err)
	_, err = initProducer(t, tc, "new", 0)
	ri, v = quotaDetails(t, err)
	require.Nil(t, ri)
	require.Equal(t, "max_transactional_ids", v.GetDescription())
	require.ErrorContains(t, err, `transactional id "new" would be a new one`)

	// Under the limits again.
	c.allot(&sluicev1.TenantAllotment{TenantId: c.tenantID, Limits: &sluicev1.Limits{MaxTotalStorageBytes: 1 << 30, MaxGroups: 2, MaxTransactionalIds: 2}})
	setLimits(2)
	_, err = rc.Produce(ctx, valueOf(0, 10))
	require.NoError(t, err)
	_, err = initProducer(t, tc, "new", 0)
	require.NoError(t, err)
	c.commit(t, "new2", map[int32]int64{0: 1})
}

// TestBrokerQuotaReport: what a broker reports in its quota exchange: per
// tenant its offered and admitted rates over the window, and on the
// brokers that lead its partitions, coordinate its groups and its
// transactional ids, those holdings, with the reservations of the group
// and the id it created (applied, to confirm); never the system tenant.
// When the control plane cannot be reached the allotments in force stay.
func TestBrokerQuotaReport(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	c.waitTopicLed(t, systemTenantID, txnStateTopic)
	ctx := context.Background()
	// An allotment (no limits) everywhere: the tenant's calls ask for no
	// early exchange, so none confirms the reservations before the
	// reports below are read.
	c.allot(&sluicev1.TenantAllotment{TenantId: c.tenantID})
	for p := range int32(2) {
		_, err := c.leaderRecords(t, p).Produce(ctx, valueOf(p, 1000))
		require.NoError(t, err)
	}
	c.commit(t, "g", map[int32]int64{0: 1})
	_, err := initProducer(t, c.clientsOf(0), "job", 0)
	require.NoError(t, err)

	var hot int64
	var groups, txnIDs int32
	var offeredProduce, offeredRequests float64
	var applied []string
	for _, b := range c.brokers {
		req := b.quota.Report(ctx)
		require.NotNil(t, req)
		require.Equal(t, b.cfg.ID, req.GetBrokerId())
		require.Equal(t, b.brokerEpoch.Load(), req.GetBrokerEpoch())
		for _, o := range req.GetApplied() {
			require.Equal(t, c.tenantID, o.GetTenantId())
			applied = append(applied, o.GetKind().String()+" "+o.GetName())
		}
		for _, r := range req.GetTenants() {
			require.NotEqual(t, systemTenantID, r.GetTenantId())
			require.Equal(t, c.tenantID, r.GetTenantId())
			hot += r.GetHotStorageBytes()
			groups += r.GetGroups()
			txnIDs += r.GetTransactionalIds()
			offeredProduce += r.GetOffered().GetProduceBytesPerSec()
			offeredRequests += r.GetOffered().GetRequestsPerSec()
		}
	}
	require.Greater(t, hot, int64(2000), "the leaders' logs of both partitions")
	require.Equal(t, int32(1), groups)
	require.Equal(t, int32(1), txnIDs)
	require.ElementsMatch(t, []string{"COUNTED_KIND_GROUP g", "COUNTED_KIND_TRANSACTIONAL_ID job"}, applied,
		"the reservations of the group and the id, applied, not yet confirmed (no exchange answered since)")
	require.Positive(t, offeredProduce)
	require.Positive(t, offeredRequests)

	// An unreachable control plane: the allotment stays in force.
	b := c.leaderOf(t, 0)
	b.quota.Pin([]*sluicev1.TenantAllotment{{TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{ProduceBytesPerSec: 1}}})
	ln := listenLoopback(t)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	err = b.quota.Exchange(ctx, exchangeVia(sluicev1connect.NewBrokerServiceClient(h2c.Client(), dead)))
	require.Error(t, err)
	rc := c.leaderRecords(t, 0)
	_, err = rc.Produce(ctx, valueOf(0, 10))
	require.NoError(t, err, "not in debt yet")
	_, err = rc.Produce(ctx, valueOf(0, 10))
	ri, _ := quotaDetails(t, err)
	require.NotNil(t, ri, "still limited: %v", fmt.Sprint(err))
}

// TestBrokerQuotaThroughControlPlane: the brokers' quota exchange with
// the real control plane. A tenant's overrides reach the brokers it uses as
// allotments that sum to the cluster-wide limit, the partition leader,
// where the traffic is, holding most of it; a produce over it is refused
// with a RetryInfo, the message naming the cluster-wide limit. The groups
// the brokers report are summed against max_groups: at the limit a new
// group's reservation is refused, the existing one served; and storage
// over max_total_storage_bytes refuses produce without a RetryInfo.
func TestBrokerQuotaThroughControlPlane(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{broker: func(c *Config) { c.QuotaExchangeInterval = 200 * time.Millisecond }})
	ctx := context.Background()
	operator := sluicev1connect.NewOperatorServiceClient(h2c.Client(), c.endpoint, connect.WithInterceptors(tenants.Bearer(testOperatorToken)))
	setOverrides := func(o *sluicev1.LimitOverrides) {
		_, err := operator.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: c.tenantID, Overrides: o}))
		require.NoError(t, err)
	}
	const limit = 96 << 10
	c.commit(t, "existing", map[int32]int64{0: 0})
	setOverrides(&sluicev1.LimitOverrides{ProduceBytesPerSec: ptrTo[int64](limit), MaxGroups: ptrTo[int32](1)})
	rc := c.leaderRecords(t, 0)
	leader := c.leaderOf(t, 0)
	testenv.Wait(t, 30*time.Second, "allotments of the override summing to it, the leader's the largest", func() error {
		// Traffic at the leader, so that its share grows.
		_, _ = rc.Produce(ctx, valueOf(0, 100))
		var sum float64
		for _, b := range c.brokers {
			a := b.quota.Allotment(c.tenantID)
			if a == nil && b != leader {
				continue // the tenant has nothing here: not reported, no share
			}
			if a.GetLimits().GetProduceBytesPerSec() != limit {
				return fmt.Errorf("broker %d: allotment %v", b.cfg.ID, a)
			}
			sum += a.GetRates().GetProduceBytesPerSec()
		}
		if sum < 0.99*limit || sum > 1.01*limit {
			return fmt.Errorf("allotments sum to %.0f, not %d", sum, limit)
		}
		if own := leader.quota.Allotment(c.tenantID).GetRates().GetProduceBytesPerSec(); own < limit/2 {
			return fmt.Errorf("the leader's allotment is %.0f of %d", own, limit)
		}
		return nil
	})
	var err error
	testenv.Wait(t, 30*time.Second, "a produce over the allotment refused", func() error {
		if _, err = rc.Produce(ctx, valueOf(0, 100<<10)); err == nil {
			return errors.New("admitted")
		}
		return nil
	})
	ri, v := quotaDetails(t, err)
	require.NotNil(t, ri)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
	require.ErrorContains(t, err, "96 KiB/s across the cluster")

	// Groups: the brokers report the one group; the new group's
	// coordinator reserves it at the control plane, which refuses: the
	// tenant is at its limit.
	testenv.Wait(t, 30*time.Second, "the existing group reported", func() error {
		for _, b := range c.brokers {
			if b.quota.Allotment(c.tenantID).GetGroups() == 1 {
				return nil
			}
		}
		return errors.New("no broker's allotment counts the group")
	})
	_, err = c.groups.GroupHeartbeat(ctx, connect.NewRequest(&sluicev1.GroupHeartbeatRequest{Group: "new", SubscribedTopics: []string{"orders"}, SubscriptionSet: true}))
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "heartbeat of a new group: %v", err)
	ri, v = quotaDetails(t, err)
	require.Nil(t, ri)
	require.Equal(t, "max_groups", v.GetDescription())
	require.ErrorContains(t, err, "has 1 consumer groups, at or over its max_groups limit of 1")
	c.commit(t, "existing", map[int32]int64{0: 1})

	// Storage: over a tiny total, produce is refused without a delay.
	setOverrides(&sluicev1.LimitOverrides{MaxTotalStorageBytes: ptrTo[int64](1000)})
	testenv.Wait(t, 30*time.Second, "produce refused for storage", func() error {
		_, err = rc.Produce(ctx, valueOf(0, 10))
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			return fmt.Errorf("produce: %v", err)
		}
		if ri, _ := quotaDetails(t, err); ri != nil {
			return fmt.Errorf("a rate refusal still: %v", err)
		}
		return nil
	})
	_, v = quotaDetails(t, err)
	require.Equal(t, "max_total_storage_bytes", v.GetDescription())
	require.ErrorContains(t, err, "at or over its max_total_storage_bytes limit of 1000 B")
}

// TestBrokerQuotaNewTenantLimitedAtOnce: a tenant's first call at a
// broker that has no allotment for it makes the broker exchange quotas at
// once, so the tenant is limited within a round trip, not at the next
// interval (a minute here, longer than the test: only the asked-for
// exchange can have put the limit in force).
func TestBrokerQuotaNewTenantLimitedAtOnce(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	operator := sluicev1connect.NewOperatorServiceClient(h2c.Client(), c.endpoint, connect.WithInterceptors(tenants.Bearer(testOperatorToken)))
	_, err := operator.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: c.tenantID,
		Overrides: &sluicev1.LimitOverrides{ProduceBytesPerSec: ptrTo[int64](64 << 10)}}))
	require.NoError(t, err)
	leader := c.leaderOf(t, 0)
	require.Nil(t, leader.quota.Allotment(c.tenantID), "no exchange has named the tenant yet")
	rc := c.leaderRecords(t, 0)
	start := time.Now()
	testenv.Wait(t, 30*time.Second, "a produce over the new tenant's limit refused", func() error {
		if _, err = rc.Produce(ctx, valueOf(0, 32<<10)); err == nil {
			return errors.New("admitted")
		}
		return nil
	})
	require.Less(t, time.Since(start), time.Minute, "before the first interval's exchange")
	_, v := quotaDetails(t, err)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
	require.ErrorContains(t, err, "64 KiB/s across the cluster")
	t.Logf("refused after %s", time.Since(start))
}

// TestBrokerQuotaNoEarlyExchangesWhileFailing: while exchanges fail, the
// calls of a tenant with no allotment do not make the broker exchange
// again and again (each would ask anew, at most every 100 ms): after the
// failed exchange the first call asked for, the broker waits for its
// interval, here a minute. The tenant's calls are admitted meanwhile.
func TestBrokerQuotaNoEarlyExchangesWhileFailing(t *testing.T) {
	t.Parallel()
	var proxy *testcluster.RPCProxy
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { proxy = testcluster.NewRPCProxy(t, cfg.ListenAddr) },
		broker: func(cfg *Config) {
			cfg.QuotaExchangeInterval = time.Minute
			cfg.ControlPlane = "http://" + proxy.Addr()
		},
	})
	ctx := context.Background()
	proxy.DropAnswers("ExchangeQuotas", true)
	leader := c.leaderOf(t, 0)
	require.Nil(t, leader.quota.Allotment(c.tenantID))
	rc := c.leaderRecords(t, 0)
	_, err := rc.Produce(ctx, valueOf(0, 10))
	require.NoError(t, err, "no allotment: admitted")
	testenv.Wait(t, 30*time.Second, "the asked-for exchange failed", func() error {
		if !leader.quota.ExchangesFailing() {
			return errors.New("no failed exchange yet")
		}
		return nil
	})
	asked := proxy.Dropped()
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		_, err := rc.Produce(ctx, valueOf(0, 10))
		require.NoError(t, err, "still no allotment: admitted")
		time.Sleep(10 * time.Millisecond) // pacing: calls for a second while the exchanges fail
	}
	require.LessOrEqual(t, proxy.Dropped(), asked+1, "exchanges during a second of calls while they fail (one may have been under way)")
	require.Nil(t, leader.quota.Allotment(c.tenantID))
}

// TestBrokerQuotaRefundsUnwrittenProduce: an idempotent batch the log
// refuses out of sequence (as the batch behind one refused for rate is)
// costs its tenant nothing: the bytes charged before the append are given
// back, and the next produce finds the bucket as it was.
func TestBrokerQuotaRefundsUnwrittenProduce(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	rc := c.leaderRecords(t, 0)
	c.allotProduce(32<<10, 32<<10)
	init, err := rc.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
	require.NoError(t, err)
	// 100 KiB with sequence 5 from a producer whose next is 0: refused by
	// the producer state, not for rate, and 100 KiB against a 32 KiB
	// bucket would have left it 68 KiB (2.1 s) in debt.
	batch, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: init.Msg.GetProducerId(),
		ProducerEpoch: int16(init.Msg.GetProducerEpoch()), BaseSequence: 5}, []record.Record{{Value: make([]byte, 100<<10)}})
	require.NoError(t, err)
	hw := c.highWatermark(t, rc, 0)
	_, err = rc.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders", Partition: 0, Acks: sluicev1.Acks_ACKS_ALL,
		Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: batch}}}))
	require.Equal(t, connect.CodeFailedPrecondition, connect.CodeOf(err), "%v", err)
	require.ErrorContains(t, err, "out of order sequence")
	// Refunded: the bucket is full again, so a produce is admitted at once
	// (it would be refused for the 2.1 s debt otherwise), and it, not the
	// refused batch, takes the bucket into debt.
	_, err = rc.Produce(ctx, valueOf(0, 100<<10))
	require.NoError(t, err, "the refused batch was refunded")
	require.Equal(t, hw+1, c.highWatermark(t, rc, 0))
	_, err = rc.Produce(ctx, valueOf(0, 10))
	ri, v := quotaDetails(t, err)
	require.NotNil(t, ri)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
}

// TestBrokerQuotaRefundsProduceManyEntriesNotWritten: ProduceMany is
// charged for all its entries at once; an entry refused before it reaches
// a log (an unknown topic, a partition another broker leads) gets its
// bytes back, so the next produce finds the bucket as it was.
func TestBrokerQuotaRefundsProduceManyEntriesNotWritten(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	leader := c.leaderOf(t, 0)
	c.allotProduce(32<<10, 32<<10)
	batch, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1},
		[]record.Record{{Value: make([]byte, 100<<10)}})
	require.NoError(t, err)
	entries := []*sluicev1.ProducePartition{{Topic: "nope", Partition: 0, Batches: &sluicev1.RecordBatches{Data: batch}}}
	if other := c.leaderOf(t, 1); other != leader {
		entries = append(entries, &sluicev1.ProducePartition{Topic: "orders", Partition: 1, Batches: &sluicev1.RecordBatches{Data: batch}})
	}
	rc := c.leaderRecords(t, 0)
	res, err := rc.ProduceMany(ctx, connect.NewRequest(&sluicev1.ProduceManyRequest{Acks: sluicev1.Acks_ACKS_ALL, Partitions: entries}))
	require.NoError(t, err)
	require.Len(t, res.Msg.GetResults(), len(entries))
	require.Equal(t, int32(connect.CodeNotFound), res.Msg.GetResults()[0].GetError().GetCode(), "%v", res.Msg.GetResults()[0])
	if len(entries) > 1 {
		require.Equal(t, int32(connect.CodeFailedPrecondition), res.Msg.GetResults()[1].GetError().GetCode(), "not the leader: %v", res.Msg.GetResults()[1])
	}
	// Refunded: 100 KiB or 200 KiB against a 32 KiB bucket would have
	// left it seconds in debt, and this produce refused.
	_, err = rc.Produce(ctx, valueOf(0, 10))
	require.NoError(t, err, "the entries that reached no log were refunded")
}

// TestBrokerQuotaForwardedChargedOnce: a call a broker forwards to the
// partition's leader is charged one request where the client sent it,
// not again at the leader: a leader whose requests allotment admits one
// call answers every forwarded produce.
func TestBrokerQuotaForwardedChargedOnce(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	ctx := context.Background()
	leader := c.leaderOf(t, 0)
	var via *Broker
	for _, b := range c.brokers {
		if b != leader {
			via = b
			break
		}
	}
	leader.quota.Pin([]*sluicev1.TenantAllotment{{
		TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{RequestsPerSec: 1}, Limits: &sluicev1.Limits{RequestsPerSec: 1000},
	}})
	via.quota.Pin([]*sluicev1.TenantAllotment{{
		TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{RequestsPerSec: 999}, Limits: &sluicev1.Limits{RequestsPerSec: 1000},
	}})
	rc := sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+via.cfg.Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
	for i := range 10 {
		_, err := rc.Produce(ctx, valueOf(0, 10))
		require.NoError(t, err, "forwarded produce %d: charged at the broker it was sent to only", i)
	}
	// The leader's own calls are charged there: its bucket of one token
	// admits two (the second takes it into debt), then refuses.
	lc := c.leaderRecords(t, 0)
	var err error
	for range 3 {
		if _, err = lc.Produce(ctx, valueOf(0, 10)); err != nil {
			break
		}
	}
	_, v := quotaDetails(t, err)
	require.Equal(t, "requests_per_sec", v.GetDescription())
}
