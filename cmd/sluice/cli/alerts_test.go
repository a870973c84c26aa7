package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

var alertT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ts(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(alertT0.Add(d)) }

// fixedAlerts are the worked example of docs/alerts.md (retention 7 d,
// lag age 1 d growing 6 h a day), a stopped consumer's expiry, and a loss.
func fixedAlerts() []*sluicev1.Alert {
	return []*sluicev1.Alert{
		{
			Id: "a-risk", Kind: sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK, State: sluicev1.AlertState_ALERT_STATE_FIRING,
			Group: "billing", Topic: "orders", Partition: 3,
			CreateTime: ts(0), FireTime: ts(time.Minute), UpdateTime: ts(90 * time.Second),
			LagMessages: 120000, LagAge: durationpb.New(24 * time.Hour), LagAgeGrowthRate: 0.25,
			TimeToDataLoss: durationpb.New(24 * 24 * time.Hour), ExpireTime: ts(24 * 24 * time.Hour),
			Retention: durationpb.New(7 * 24 * time.Hour),
			Summary:   "Unconsumed records will be deleted by retention in 576h0m0s.",
			Advice:    "Add consumers to the group.",
		},
		{
			Id: "a-grow", Kind: sluicev1.AlertKind_ALERT_KIND_LAG_GROWING, State: sluicev1.AlertState_ALERT_STATE_PENDING,
			Group: "audit", Topic: "events", Partition: 0,
			CreateTime: ts(0), UpdateTime: ts(30 * time.Second),
			LagMessages: 42, LagAge: durationpb.New(95 * time.Second), LagAgeGrowthRate: 1,
		},
		{
			Id: "a-lost", Kind: sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRED, State: sluicev1.AlertState_ALERT_STATE_RESOLVED,
			Group: "billing", Topic: "orders", Partition: 1,
			CreateTime: ts(0), FireTime: ts(0), ResolveTime: ts(time.Hour), UpdateTime: ts(time.Hour),
			LagMessages: 7, LagAge: durationpb.New(2*time.Hour + 5*time.Minute), LagAgeGrowthRate: -0.1,
			Retention:      durationpb.New(2 * time.Hour),
			LostFromOffset: 100, LostToOffset: 200, LostRecords: 100,
		},
	}
}

func TestCLIAlertsFormatSpans(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{999 * time.Millisecond, "0s"},
		{45 * time.Second, "45s"},
		{95 * time.Second, "1m35s"},
		{2 * time.Minute, "2m"},
		{2*time.Hour + 5*time.Minute + 30*time.Second, "2h5m"},
		{24 * time.Hour, "1d"},
		{30 * time.Hour, "1d6h"},
		{24 * 24 * time.Hour, "24d"},
		{-6 * time.Hour, "-6h"},
	} {
		require.Equal(t, tc.want, fmtSpan(tc.d), "%v", tc.d)
	}
	require.Equal(t, "-", fmtProtoSpan(nil))
	require.Equal(t, "0.250 s/s (+6h per day)", fmtGrowth(0.25))
	require.Equal(t, "1.000 s/s (+1d per day)", fmtGrowth(1))
	require.Equal(t, "-0.100 s/s (-2h24m per day)", fmtGrowth(-0.1))
	require.Equal(t, "0.000 s/s (+0s per day)", fmtGrowth(0))
}

func TestCLIAlertsStates(t *testing.T) {
	t.Parallel()
	got, err := parseAlertStates([]string{"pending", "FIRING", "resolved"})
	require.NoError(t, err)
	require.Equal(t, []sluicev1.AlertState{sluicev1.AlertState_ALERT_STATE_PENDING, sluicev1.AlertState_ALERT_STATE_FIRING, sluicev1.AlertState_ALERT_STATE_RESOLVED}, got)
	got, err = parseAlertStates(nil)
	require.NoError(t, err)
	require.Empty(t, got)
	_, err = parseAlertStates([]string{"firing", "acked"})
	require.ErrorContains(t, err, `--state "acked": choose pending, firing or resolved`)
	require.ErrorAs(t, err, new(usageError))
	require.Equal(t, "unknown", fmtAlertKind(sluicev1.AlertKind_ALERT_KIND_UNSPECIFIED))
	require.Equal(t, "unknown", fmtAlertState(sluicev1.AlertState(42)))
}

func TestCLIAlertsListTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, table(&b, alertHeader, alertRows(fixedAlerts(), time.UTC)))
	require.Equal(t, `ID      KIND                   STATE     GROUP    TOPIC   PARTITION  LAG     LAG-AGE  TIME-TO-LOSS  UPDATED
a-risk  retention-expiry-risk  firing    billing  orders  3          120000  1d       24d           2026-03-01T12:01:30Z
a-grow  lag-growing            pending   audit    events  0          42      1m35s    -             2026-03-01T12:00:30Z
a-lost  retention-expired      resolved  billing  orders  1          7       2h5m     -             2026-03-01T13:00:00Z
`, b.String())
}

func TestCLIAlertsDescribe(t *testing.T) {
	t.Parallel()
	al := fixedAlerts()
	var b bytes.Buffer
	require.NoError(t, writeAlert(&b, al[0], time.UTC))
	require.Equal(t, `id:                a-risk
kind:              retention-expiry-risk
state:             firing
group:             billing
topic:             orders
partition:         3
created:           2026-03-01T12:00:00Z
fired:             2026-03-01T12:01:00Z
resolved:          -
updated:           2026-03-01T12:01:30Z
lag:               120000 records
lag age:           1d
growth rate:       0.250 s/s (+6h per day)
time to data loss: 24d
expires:           2026-03-25T12:00:00Z
retention:         7d
lost:              -
summary:           Unconsumed records will be deleted by retention in 576h0m0s.
advice:            Add consumers to the group.
`, b.String())

	b.Reset()
	require.NoError(t, writeAlert(&b, al[2], time.UTC))
	out := b.String()
	require.Contains(t, out, "lost:              offsets 100 to 199 (100 records)\n")
	require.Contains(t, out, "resolved:          2026-03-01T13:00:00Z\n")
	require.Contains(t, out, "time to data loss: -\n")
	require.Contains(t, out, "growth rate:       -0.100 s/s (-2h24m per day)\n")

	// Times are shown in the given zone.
	b.Reset()
	require.NoError(t, writeAlert(&b, al[1], time.FixedZone("X", 2*3600)))
	require.Contains(t, b.String(), "created:           2026-03-01T14:00:00+02:00\n")
	require.Contains(t, b.String(), "retention:         -\n")
}

func TestCLIAlertsJSON(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, printJSON(&b, &sluicev1.ListAlertsResponse{Alerts: fixedAlerts()[:1]}))
	var got struct {
		Alerts []struct {
			ID               string  `json:"id"`
			Kind             string  `json:"kind"`
			State            string  `json:"state"`
			Partition        int32   `json:"partition"`
			LagMessages      int64   `json:"lagMessages,string"`
			LagAge           string  `json:"lagAge"`
			LagAgeGrowthRate float64 `json:"lagAgeGrowthRate"`
			TimeToDataLoss   string  `json:"timeToDataLoss"`
			ExpireTime       string  `json:"expireTime"`
			ResolveTime      *string `json:"resolveTime"`
			LostRecords      int64   `json:"lostRecords,string"`
		} `json:"alerts"`
		NextPageToken *string `json:"nextPageToken"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &got), b.String())
	require.Len(t, got.Alerts, 1)
	a := got.Alerts[0]
	require.Equal(t, "a-risk", a.ID)
	require.Equal(t, "ALERT_KIND_RETENTION_EXPIRY_RISK", a.Kind)
	require.Equal(t, "ALERT_STATE_FIRING", a.State)
	require.Equal(t, int32(3), a.Partition)
	require.Equal(t, int64(120000), a.LagMessages)
	require.Equal(t, "86400s", a.LagAge)
	require.InDelta(t, 0.25, a.LagAgeGrowthRate, 1e-12)
	require.Equal(t, "2073600s", a.TimeToDataLoss)
	require.Equal(t, "2026-03-25T12:00:00Z", a.ExpireTime)
	require.Nil(t, a.ResolveTime) // unset messages are null
	require.Zero(t, a.LostRecords)
	require.NotNil(t, got.NextPageToken) // unpopulated fields are printed
}

func TestCLIAlertsPolicyAndWebhooks(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, writePolicy(&b, &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(48 * time.Hour)}))
	require.Equal(t, "expiry risk threshold: 2d\n", b.String())

	hooks := []*sluicev1.Webhook{
		{Id: "w1", Url: "https://hooks.example.com/sluice", Description: "pager", CreateTime: ts(0)},
		{Id: "w2", Url: "http://127.0.0.1:9000/hook", CreateTime: ts(time.Hour)},
	}
	b.Reset()
	require.NoError(t, table(&b, webhookHeader, webhookRows(hooks, time.UTC)))
	require.Equal(t, `ID  URL                               DESCRIPTION  CREATED
w1  https://hooks.example.com/sluice  pager        2026-03-01T12:00:00Z
w2  http://127.0.0.1:9000/hook        -            2026-03-01T13:00:00Z
`, b.String())

	b.Reset()
	require.NoError(t, writeCreatedWebhook(&b, &sluicev1.CreateWebhookResponse{Webhook: hooks[0], SigningSecret: "whsec_abc"}, time.UTC))
	require.True(t, strings.HasPrefix(b.String(), `id:             w1
url:            https://hooks.example.com/sluice
description:    pager
created:        2026-03-01T12:00:00Z
signing secret: whsec_abc
`), b.String())
	require.Contains(t, b.String(), "The signing secret is shown only once")

	ds := []*sluicev1.WebhookDelivery{
		{Id: "d2", AlertId: "a-risk", AlertState: sluicev1.AlertState_ALERT_STATE_FIRING, Status: "pending", Attempts: 2,
			LastError: "endpoint answered 503 Service Unavailable", CreateTime: ts(0), NextAttemptTime: ts(15 * time.Second)},
		{Id: "d1", AlertId: "a-lost", AlertState: sluicev1.AlertState_ALERT_STATE_RESOLVED, Status: "delivered", Attempts: 1,
			CreateTime: ts(0), DeliverTime: ts(time.Second)},
		{Id: "d0", Event: "invoice.finalized", Status: "delivered", Attempts: 1, CreateTime: ts(0), DeliverTime: ts(time.Second)},
	}
	ds[0].Event = "alert"
	b.Reset()
	require.NoError(t, table(&b, deliveryHeader, deliveryRows(ds, time.UTC)))
	require.Equal(t, `ID  EVENT              ALERT   ALERT-STATE  STATUS     ATTEMPTS  CREATED               DELIVERED             NEXT-ATTEMPT          LAST-ERROR
d2  alert              a-risk  firing       pending    2         2026-03-01T12:00:00Z  -                     2026-03-01T12:00:15Z  endpoint answered 503 Service Unavailable
d1  alert              a-lost  resolved     delivered  1         2026-03-01T12:00:00Z  2026-03-01T12:00:01Z  -                     -
d0  invoice.finalized  -       -            delivered  1         2026-03-01T12:00:00Z  2026-03-01T12:00:01Z  -                     -
`, b.String())
}

func TestCLIAlertsWebhookTestResult(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	require.NoError(t, writeTestResult(&b, "w1", &sluicev1.TestWebhookResponse{StatusCode: 204, Latency: durationpb.New(42*time.Millisecond + 300*time.Microsecond)}))
	require.Equal(t, "webhook: w1\nstatus:  204\nlatency: 42ms\nerror:   -\n", b.String())

	b.Reset()
	err := writeTestResult(&b, "w1", &sluicev1.TestWebhookResponse{StatusCode: 500, Latency: durationpb.New(time.Second)})
	require.EqualError(t, err, "test delivery to webhook w1 failed: endpoint answered HTTP 500")
	require.Contains(t, b.String(), "status:  500\n")

	b.Reset()
	err = writeTestResult(&b, "w1", &sluicev1.TestWebhookResponse{Error: "dial tcp 127.0.0.1:9: connection refused"})
	require.EqualError(t, err, "test delivery to webhook w1 failed: dial tcp 127.0.0.1:9: connection refused")
	require.Contains(t, b.String(), "status:  -\n")
	require.Contains(t, b.String(), "latency: -\n")
}

// TestCLIAlertsUsage: bad input is a usage error (exit 2) before any
// request is sent (the endpoint does not exist).
func TestCLIAlertsUsage(t *testing.T) {
	t.Parallel()
	cfg := t.TempDir() + "/config.json"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"alerts", "list", "--state", "acked"}, `--state "acked"`},
		{[]string{"alerts", "list", "--group", ""}, "--group: the group name must not be empty"},
		{[]string{"alerts", "list", "x"}, "unknown command"},
		{[]string{"alerts", "describe"}, "accepts 1 arg(s)"},
		{[]string{"alerts", "describe", " "}, "alert id must not be empty"},
		{[]string{"alerts", "policy", "set"}, `required flag(s) "expiry-risk-threshold" not set`},
		{[]string{"alerts", "policy", "set", "--expiry-risk-threshold", "30s"}, "--expiry-risk-threshold must be at least 1m"},
		{[]string{"alerts", "policy", "set", "--expiry-risk-threshold", "2days"}, "invalid argument"},
		{[]string{"webhook", "create"}, "accepts 1 arg(s)"},
		{[]string{"webhook", "create", "ftp://example.com/x"}, `webhook URL "ftp://example.com/x": want https://host/path`},
		{[]string{"webhook", "create", "https:///nohost"}, "want https://host/path"},
		{[]string{"webhook", "delete", ""}, "webhook id must not be empty"},
		{[]string{"webhook", "test", "a", "b"}, "accepts 1 arg(s)"},
		{[]string{"webhook", "deliveries", "w1", "--limit", "500"}, "--limit must be between 1 and 200"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--cli-config", cfg, "--endpoint", "http://127.0.0.1:1", "--api-key", "slk_x"}, tc.args...)
		code := Execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, ExitUsage, code, "%q: %s", tc.args, stderr.String())
		require.Contains(t, stderr.String(), tc.want, "%q", tc.args)
	}
}

// fakeAlerts answers the AlertService from fixed values: enough to check
// the commands' requests, paging and exit codes in-process.
type fakeAlerts struct {
	sluicev1connect.UnimplementedAlertServiceHandler
	lists []*sluicev1.ListAlertsRequest
}

func (f *fakeAlerts) ListAlerts(_ context.Context, req *connect.Request[sluicev1.ListAlertsRequest]) (*connect.Response[sluicev1.ListAlertsResponse], error) {
	f.lists = append(f.lists, req.Msg)
	all := fixedAlerts()
	if req.Msg.GetPageToken() == "" {
		return connect.NewResponse(&sluicev1.ListAlertsResponse{Alerts: all[:2], NextPageToken: "p2"}), nil
	}
	return connect.NewResponse(&sluicev1.ListAlertsResponse{Alerts: all[2:]}), nil
}

func (f *fakeAlerts) GetAlert(_ context.Context, req *connect.Request[sluicev1.GetAlertRequest]) (*connect.Response[sluicev1.GetAlertResponse], error) {
	if req.Msg.GetId() == "a-risk" {
		return connect.NewResponse(&sluicev1.GetAlertResponse{Alert: fixedAlerts()[0]}), nil
	}
	return nil, connect.NewError(connect.CodeNotFound, errors.New("alert not found"))
}

func (f *fakeAlerts) UpdateAlertPolicy(context.Context, *connect.Request[sluicev1.UpdateAlertPolicyRequest]) (*connect.Response[sluicev1.UpdateAlertPolicyResponse], error) {
	return nil, connect.NewError(connect.CodePermissionDenied, errors.New("the admin scope is needed"))
}

func (f *fakeAlerts) TestWebhook(context.Context, *connect.Request[sluicev1.TestWebhookRequest]) (*connect.Response[sluicev1.TestWebhookResponse], error) {
	return connect.NewResponse(&sluicev1.TestWebhookResponse{StatusCode: 500, Latency: durationpb.New(time.Millisecond)}), nil
}

type fakeAuth struct {
	sluicev1connect.UnimplementedAuthServiceHandler
}

func (fakeAuth) CreateToken(context.Context, *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	return connect.NewResponse(&sluicev1.CreateTokenResponse{Token: "jwt"}), nil
}

// TestCLIAlertsCommands runs the commands against an in-process
// AlertService: list follows pages and sends the filters, describe prints
// one alert, and errors map to the documented exit codes.
func TestCLIAlertsCommands(t *testing.T) {
	t.Parallel()
	fake := &fakeAlerts{}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewAlertServiceHandler(fake))
	mux.Handle(sluicev1connect.NewAuthServiceHandler(fakeAuth{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	cfg := t.TempDir() + "/config.json"
	run := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		args = append([]string{"--cli-config", cfg, "--endpoint", srv.URL, "--api-key", "slk_x"}, args...)
		code := Execute(t.Context(), args, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}

	out, errOut, code := run("alerts", "list", "--state", "firing,pending", "--group", "billing", "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	var listed struct {
		Alerts []struct {
			ID string `json:"id"`
		} `json:"alerts"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Alerts, 3, "both pages")
	require.Len(t, fake.lists, 2)
	require.Equal(t, "billing", fake.lists[0].GetGroup())
	require.Equal(t, []sluicev1.AlertState{sluicev1.AlertState_ALERT_STATE_FIRING, sluicev1.AlertState_ALERT_STATE_PENDING}, fake.lists[0].GetStates())
	require.Equal(t, "p2", fake.lists[1].GetPageToken())

	out, errOut, code = run("alerts", "describe", "a-risk")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "kind:              retention-expiry-risk\n")

	_, errOut, code = run("alerts", "describe", "nope")
	require.Equal(t, ExitNotFound, code)
	require.Equal(t, "sluice: describe alert nope: not_found: alert not found\n", errOut)

	_, errOut, code = run("alerts", "policy", "set", "--expiry-risk-threshold", "48h")
	require.Equal(t, ExitAuth, code)
	require.Contains(t, errOut, "permission_denied")

	_, errOut, code = run("alerts", "policy")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "get alert policy: this control plane does not serve lag alerts (AlertService); upgrade it: unimplemented")

	out, errOut, code = run("webhook", "test", "w1")
	require.Equal(t, ExitError, code)
	require.Contains(t, out, "status:  500\n")
	require.Equal(t, "sluice: test delivery to webhook w1 failed: endpoint answered HTTP 500\n", errOut)
}
