package broker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/tenants"
)

// TestBrokerQuotaRefusedFromHeaders: a call of a tenant whose requests/s
// bucket is in debt is refused by the gate from its headers, before its
// body is read or decoded: a body that is not even a message is answered
// resource_exhausted, the rate refusal (it used to be decoded first, and
// refused invalid_argument). Produce and fetch are refused likewise while
// their buckets are in debt. The refusal mutes the caller's connection
// for its delay: a call sent on it meanwhile waits the delay out, unread.
func TestBrokerQuotaRefusedFromHeaders(t *testing.T) {
	t.Parallel()
	c := startQuotaCluster(t)
	leader := c.leaderOf(t, 0)
	url := "http://" + leader.cfg.Advertised() + sluicev1connect.RecordServiceListOffsetsProcedure
	post := func(hc *http.Client, body string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/proto")
		req.Header.Set("Authorization", "Bearer "+c.token)
		res, err := hc.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(out)
	}
	hc := &http.Client{Transport: &http.Transport{}}
	code, body := post(hc, "not a protobuf message \xff\xff")
	require.Equal(t, http.StatusBadRequest, code, "in budget, the body is decoded: %s", body)

	c.allot(&sluicev1.TenantAllotment{TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{RequestsPerSec: 0.1},
		Limits: &sluicev1.Limits{RequestsPerSec: 1}})
	// The first call takes the bucket (a fortieth of a request) into
	// about ten seconds of debt.
	_, _ = post(&http.Client{Transport: &http.Transport{}}, "")
	code, body = post(&http.Client{Transport: &http.Transport{}}, "not a protobuf message \xff\xff")
	require.Equal(t, http.StatusTooManyRequests, code, "refused before the body is read: %s", body)
	require.Contains(t, body, "requests_per_sec quota")

	// Produce and fetch in debt: refused from the headers too.
	rc := sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+leader.cfg.Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
	c.allot(&sluicev1.TenantAllotment{TenantId: c.tenantID, Rates: &sluicev1.QuotaRates{ProduceBytesPerSec: 1 << 10, FetchBytesPerSec: 1 << 10},
		Limits: &sluicev1.Limits{ProduceBytesPerSec: 3 << 10, FetchBytesPerSec: 3 << 10}})
	tenantCtx := tenants.WithPrincipal(context.Background(), tenants.Principal{Kind: tenants.PrincipalTenant, TenantID: c.tenantID})
	require.NoError(t, leader.quota.AdmitProduce(tenantCtx, 64<<10))
	require.NoError(t, leader.quota.CheckFetch(tenantCtx, 0))
	leader.quota.ChargeFetch(tenantCtx, 64<<10)
	refusedBefore := gatheredSum(t, leader.Registry(), "sluice_broker_gate_refused_total", "reason", "admit")
	_, err := rc.Produce(context.Background(), valueOf(0, 10))
	_, v := quotaDetails(t, err)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
	_, err = rc.Fetch(context.Background(), connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 0}))
	_, v = quotaDetails(t, err)
	require.Equal(t, "fetch_bytes_per_sec", v.GetDescription())
	require.Equal(t, refusedBefore+2, gatheredSum(t, leader.Registry(), "sluice_broker_gate_refused_total", "reason", "admit"), "refused by the gate")

	// The mute: after a refusal with a delay of about a minute (64 KiB
	// of debt at 1 KiB/s, capped at 5 s), a call on the same connection
	// waits before it is decided; one on another connection does not.
	muted := gatheredSum(t, leader.Registry(), "sluice_broker_gate_muted_total", "", "")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = rc.Produce(ctx, valueOf(0, 10))
	require.True(t, errors.Is(err, context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded, "held on the muted connection: %v", err)
	other := sluicev1connect.NewRecordServiceClient(h2c.Client(), "http://"+leader.cfg.Advertised(), connect.WithInterceptors(tenants.Bearer(c.token)))
	_, err = other.Produce(context.Background(), valueOf(0, 10))
	_, v = quotaDetails(t, err)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription(), "another connection is refused at once")
	require.Equal(t, muted+1, gatheredSum(t, leader.Registry(), "sluice_broker_gate_muted_total", "", ""))
}

// TestBrokerQuotaNewTenantWaitsForItsAllotment: a tenant's first calls at
// a broker that has no allotment for it wait for the exchange they ask
// for, so they are decided by the tenant's limits: the call after a large
// first produce is refused at once. They used to be admitted unthrottled
// until the answer.
func TestBrokerQuotaNewTenantWaitsForItsAllotment(t *testing.T) {
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
	// 256 KiB against an allotment of a third of 64 KiB/s, at least: 4 s
	// of debt, or more.
	_, err = rc.Produce(ctx, valueOf(0, 256<<10))
	require.NoError(t, err)
	require.NotNil(t, leader.quota.Allotment(c.tenantID), "the first call waited for the allotment")
	_, err = rc.Produce(ctx, valueOf(0, 10))
	_, v := quotaDetails(t, err)
	require.Equal(t, "produce_bytes_per_sec", v.GetDescription())
}
