package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/alerting"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

func (c *cluster) alerts(token string) sluicev1connect.AlertServiceClient {
	return sluicev1connect.NewAlertServiceClient(c.hc, c.endpoint, bearer(token), connect.WithGRPC())
}

// token mints a token of a new API key of a with only these scopes.
func (c *cluster) scopedToken(t *testing.T, a account, scopes ...string) string {
	t.Helper()
	ctx := context.Background()
	k, err := c.keys(a.token).CreateAPIKey(ctx, connect.NewRequest(&sluicev1.CreateAPIKeyRequest{Name: "reader", Scopes: scopes}))
	require.NoError(t, err)
	tok, err := c.auth().CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: k.Msg.GetSecret()}))
	require.NoError(t, err)
	return tok.Msg.GetToken()
}

// raise stores an alert of tenantID as the evaluator would.
func raise(t *testing.T, st store.Store, tenantID, group string, kind store.AlertKind, to store.AlertState, d alerts.Details) store.Alert {
	t.Helper()
	details, err := json.Marshal(d)
	require.NoError(t, err)
	a, err := st.TransitionAlert(context.Background(), store.AlertTransition{
		Key:       store.AlertKey{TenantID: tenantID, Kind: kind, Group: group, TopicID: store.NewID(), Partition: 2},
		TopicName: "orders", To: to, Details: details,
	})
	require.NoError(t, err)
	return a
}

// TestControlPlaneAlerts covers AlertService: every RPC, its scopes and
// codes, two tenants that never see each other's alerts, webhooks or
// deliveries, the signing secret answered once, the webhook URL rules and
// a webhook test received and verified by an endpoint.
func TestControlPlaneAlerts(t *testing.T) {
	t.Parallel()
	drivers(t, func(t *testing.T, dbURL string) {
		c := start(t, dbURL, func(cfg *controlplane.Config) {
			cfg.WebhookAllowInsecureLoopback = true
			// The test raises alerts as the evaluator would; a running
			// evaluator's first round, at start, found them unsampled and
			// refreshed their numbers (lag 1200 read back as 0).
			cfg.LagSampleInterval = 0
		})
		ctx := context.Background()
		alice := c.signup(t, "alice")
		bob := c.signup(t, "bob")
		reader := c.scopedToken(t, alice, tenants.ScopeConsume)
		st := c.srv.Store()

		// ---- alerts ----
		expires := time.Now().Add(90 * time.Minute).UTC().Truncate(time.Second)
		risk := raise(t, st, alice.tenantID, "billing", store.AlertRetentionExpiryRisk, store.AlertFiring, alerts.Details{
			Lag: 1200, LagAge: 70 * time.Minute, GrowthRate: 1, TimeToLoss: 90 * time.Minute, ExpiresAt: expires,
			Retention: 160 * time.Minute, Summary: "billing expires in 1h30m", Advice: "add consumers",
		})
		expired := raise(t, st, alice.tenantID, "audit", store.AlertRetentionExpired, store.AlertFiring, alerts.Details{
			Lag: 10, LostFrom: 100, LostTo: 150, LostCount: 50, Summary: "50 records lost",
		})
		growing := raise(t, st, alice.tenantID, "billing", store.AlertLagGrowing, store.AlertPending, alerts.Details{Lag: 5, LagAge: time.Minute, GrowthRate: 0.5})
		bobs := raise(t, st, bob.tenantID, "billing", store.AlertLagGrowing, store.AlertFiring, alerts.Details{})

		list, err := c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{}))
		require.NoError(t, err, "reading needs no admin scope")
		require.Len(t, list.Msg.GetAlerts(), 3)
		require.Equal(t, []string{growing.ID, expired.ID, risk.ID}, alertIDs(list.Msg.GetAlerts()), "newest first")
		require.Empty(t, list.Msg.GetNextPageToken())

		got, err := c.alerts(reader).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: risk.ID}))
		require.NoError(t, err)
		a := got.Msg.GetAlert()
		require.Equal(t, sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK, a.GetKind())
		require.Equal(t, sluicev1.AlertState_ALERT_STATE_FIRING, a.GetState())
		require.Equal(t, "billing", a.GetGroup())
		require.Equal(t, "orders", a.GetTopic())
		require.Equal(t, int32(2), a.GetPartition())
		require.Equal(t, int64(1200), a.GetLagMessages())
		require.Equal(t, 70*time.Minute, a.GetLagAge().AsDuration())
		require.InDelta(t, 1.0, a.GetLagAgeGrowthRate(), 1e-9)
		require.Equal(t, 90*time.Minute, a.GetTimeToDataLoss().AsDuration())
		require.Equal(t, expires, a.GetExpireTime().AsTime())
		require.Equal(t, 160*time.Minute, a.GetRetention().AsDuration())
		require.Equal(t, "billing expires in 1h30m", a.GetSummary())
		require.Equal(t, "add consumers", a.GetAdvice())
		require.NotNil(t, a.GetCreateTime())
		require.NotNil(t, a.GetFireTime())
		require.Nil(t, a.GetResolveTime())
		got, err = c.alerts(reader).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: expired.ID}))
		require.NoError(t, err)
		require.Equal(t, []int64{100, 150, 50}, []int64{got.Msg.GetAlert().GetLostFromOffset(), got.Msg.GetAlert().GetLostToOffset(), got.Msg.GetAlert().GetLostRecords()})
		require.Nil(t, got.Msg.GetAlert().GetTimeToDataLoss())

		// Filters and pages.
		list, err = c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{States: []sluicev1.AlertState{sluicev1.AlertState_ALERT_STATE_FIRING}}))
		require.NoError(t, err)
		require.Equal(t, []string{expired.ID, risk.ID}, alertIDs(list.Msg.GetAlerts()))
		list, err = c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{Group: "billing"}))
		require.NoError(t, err)
		require.Equal(t, []string{growing.ID, risk.ID}, alertIDs(list.Msg.GetAlerts()))
		var paged []string
		tok := ""
		for range 5 {
			page, err := c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{PageSize: 2, PageToken: tok}))
			require.NoError(t, err)
			paged = append(paged, alertIDs(page.Msg.GetAlerts())...)
			if tok = page.Msg.GetNextPageToken(); tok == "" {
				break
			}
		}
		require.Equal(t, []string{growing.ID, expired.ID, risk.ID}, paged)
		_, err = c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{PageToken: "!!"}))
		requireCode(t, connect.CodeInvalidArgument, err, "page_token")
		_, err = c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{PageSize: -1}))
		requireCode(t, connect.CodeInvalidArgument, err, "page_size")
		_, err = c.alerts(reader).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{States: []sluicev1.AlertState{sluicev1.AlertState_ALERT_STATE_UNSPECIFIED}}))
		requireCode(t, connect.CodeInvalidArgument, err, "states[0]")
		_, err = c.alerts(reader).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{}))
		requireCode(t, connect.CodeInvalidArgument, err, "id")
		_, err = c.alerts(reader).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: store.NewID()}))
		requireCode(t, connect.CodeNotFound, err)

		// Bob sees only his; Alice's ids are NotFound to him, even as a page token.
		list, err = c.alerts(bob.token).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{}))
		require.NoError(t, err)
		require.Equal(t, []string{bobs.ID}, alertIDs(list.Msg.GetAlerts()))
		_, err = c.alerts(bob.token).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: risk.ID}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.alerts(alice.token).GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: bobs.ID}))
		requireCode(t, connect.CodeNotFound, err)
		page, err := c.alerts(alice.token).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{PageSize: 1}))
		require.NoError(t, err)
		_, err = c.alerts(bob.token).ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{PageToken: page.Msg.GetNextPageToken()}))
		requireCode(t, connect.CodeInvalidArgument, err, "page_token")

		// ---- policy ----
		pol, err := c.alerts(reader).GetAlertPolicy(ctx, connect.NewRequest(&sluicev1.GetAlertPolicyRequest{}))
		require.NoError(t, err)
		require.Equal(t, 24*time.Hour, pol.Msg.GetPolicy().GetExpiryRiskThreshold().AsDuration(), "the default")
		update := func(token string, d *durationpb.Duration) error {
			_, err := c.alerts(token).UpdateAlertPolicy(ctx, connect.NewRequest(&sluicev1.UpdateAlertPolicyRequest{Policy: &sluicev1.AlertPolicy{ExpiryRiskThreshold: d}}))
			return err
		}
		requireCode(t, connect.CodePermissionDenied, update(reader, durationpb.New(time.Hour)), "admin")
		requireCode(t, connect.CodeInvalidArgument, update(alice.token, durationpb.New(59*time.Second)), "policy.expiry_risk_threshold")
		requireCode(t, connect.CodeInvalidArgument, update(alice.token, durationpb.New(91*24*time.Hour)), "policy.expiry_risk_threshold")
		requireCode(t, connect.CodeInvalidArgument, update(alice.token, nil), "policy.expiry_risk_threshold")
		_, err = c.alerts(alice.token).UpdateAlertPolicy(ctx, connect.NewRequest(&sluicev1.UpdateAlertPolicyRequest{}))
		requireCode(t, connect.CodeInvalidArgument, err, "policy")
		res, err := c.alerts(alice.token).UpdateAlertPolicy(ctx, connect.NewRequest(&sluicev1.UpdateAlertPolicyRequest{Policy: &sluicev1.AlertPolicy{ExpiryRiskThreshold: durationpb.New(6 * time.Hour)}}))
		require.NoError(t, err)
		require.Equal(t, 6*time.Hour, res.Msg.GetPolicy().GetExpiryRiskThreshold().AsDuration())
		pol, err = c.alerts(reader).GetAlertPolicy(ctx, connect.NewRequest(&sluicev1.GetAlertPolicyRequest{}))
		require.NoError(t, err)
		require.Equal(t, 6*time.Hour, pol.Msg.GetPolicy().GetExpiryRiskThreshold().AsDuration())
		pol, err = c.alerts(bob.token).GetAlertPolicy(ctx, connect.NewRequest(&sluicev1.GetAlertPolicyRequest{}))
		require.NoError(t, err)
		require.Equal(t, 24*time.Hour, pol.Msg.GetPolicy().GetExpiryRiskThreshold().AsDuration(), "Bob's is his own")

		// ---- webhooks ----
		var (
			mu        sync.Mutex
			secret    []byte
			received  []http.Header
			verifyErr error
		)
		recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			if verifyErr = alerting.Verify(secret, r.Header, body, time.Now(), 5*time.Minute); verifyErr != nil {
				http.Error(w, verifyErr.Error(), http.StatusUnauthorized)
				return
			}
			var ev alerting.Event
			if verifyErr = json.Unmarshal(body, &ev); verifyErr == nil && (ev.Type != "test" || ev.TenantID != alice.tenantID) {
				http.Error(w, "unexpected event "+string(body), http.StatusBadRequest)
				return
			}
			received = append(received, r.Header.Clone())
			w.WriteHeader(http.StatusNoContent)
		}))
		defer recv.Close()

		create := func(token, url string) (*connect.Response[sluicev1.CreateWebhookResponse], error) {
			return c.alerts(token).CreateWebhook(ctx, connect.NewRequest(&sluicev1.CreateWebhookRequest{Url: url, Description: "ops"}))
		}
		_, err = create(reader, recv.URL)
		requireCode(t, connect.CodePermissionDenied, err, "admin")
		for _, bad := range []struct{ url, msg string }{
			{"", "url"},
			{"ftp://93.184.215.14/x", "not https"},
			{"http://93.184.215.14/x", "only to loopback"},
			{"https://10.0.0.7/x", "private"},
			{"https://192.168.1.1/x", "private"},
			{"https://169.254.169.254/latest/meta-data/", "link-local"},
			{"https://[fe80::1]/x", "link-local"},
			{"https://0.0.0.0/x", "unspecified"},
			{"https://239.0.0.1/x", "multicast"},
			{"https://[::a9fe:a9fe]/latest/meta-data/", "IPv4-compatible"}, // 169.254.169.254
			{"https://[::a00:1]/x", "IPv4-compatible"},                     // 10.0.0.1
			{"https://[::ffff:a9fe:a9fe]/x", "link-local"},
			{"https://[64:ff9b::a9fe:a9fe]/x", "NAT64 address of 169.254.169.254"},
			{"https://[2002:a00:1::1]/x", "6to4 address of 10.0.0.1"},
			{"https://[2001:0:5db8:d70e::f5ff:fffe]/x", "Teredo (client) address of 10.0.0.1"},
			{"https://user:pw@93.184.215.14/x", "user info"},
		} {
			_, err := create(alice.token, bad.url)
			requireCode(t, connect.CodeInvalidArgument, err, bad.msg)
		}

		hook, err := create(alice.token, recv.URL+"/sluice")
		require.NoError(t, err)
		w := hook.Msg.GetWebhook()
		require.Equal(t, recv.URL+"/sluice", w.GetUrl())
		require.Equal(t, "ops", w.GetDescription())
		require.NotNil(t, w.GetCreateTime())
		secretHex := hook.Msg.GetSigningSecret()
		mu.Lock()
		secret = []byte(secretHex) // the key is the text as given
		mu.Unlock()
		require.NoError(t, err)
		require.Len(t, secret, 64, "32 random bytes, in hex")

		// The secret is answered only once: not by the list, not by anything else.
		hooks, err := c.alerts(reader).ListWebhooks(ctx, connect.NewRequest(&sluicev1.ListWebhooksRequest{}))
		require.NoError(t, err)
		require.Len(t, hooks.Msg.GetWebhooks(), 1)
		require.Equal(t, w.GetId(), hooks.Msg.GetWebhooks()[0].GetId())
		require.NotContains(t, hooks.Msg.String(), secretHex)
		public, err := create(alice.token, "https://93.184.215.14/hook")
		require.NoError(t, err, "https:// to a public address")
		require.NotEqual(t, secretHex, public.Msg.GetSigningSecret(), "a secret per webhook")

		// Test: a signed event reaches the endpoint, which verifies it.
		_, err = c.alerts(reader).TestWebhook(ctx, connect.NewRequest(&sluicev1.TestWebhookRequest{Id: w.GetId()}))
		requireCode(t, connect.CodePermissionDenied, err, "admin")
		tr, err := c.alerts(alice.token).TestWebhook(ctx, connect.NewRequest(&sluicev1.TestWebhookRequest{Id: w.GetId()}))
		require.NoError(t, err)
		mu.Lock()
		require.NoError(t, verifyErr)
		require.Len(t, received, 1)
		mu.Unlock()
		require.Equal(t, int32(http.StatusNoContent), tr.Msg.GetStatusCode())
		require.Empty(t, tr.Msg.GetError())
		require.Positive(t, tr.Msg.GetLatency().AsDuration())

		// A failing endpoint: answered, and logged as failed.
		recv.Close()
		tr, err = c.alerts(alice.token).TestWebhook(ctx, connect.NewRequest(&sluicev1.TestWebhookRequest{Id: w.GetId()}))
		require.NoError(t, err)
		require.Zero(t, tr.Msg.GetStatusCode())
		require.NotEmpty(t, tr.Msg.GetError())

		log, err := c.alerts(reader).ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: w.GetId()}))
		require.NoError(t, err)
		require.Len(t, log.Msg.GetDeliveries(), 2)
		failed, delivered := log.Msg.GetDeliveries()[0], log.Msg.GetDeliveries()[1]
		require.Equal(t, "failed", failed.GetStatus())
		require.Equal(t, tr.Msg.GetError(), failed.GetLastError())
		require.Equal(t, "delivered", delivered.GetStatus())
		require.Equal(t, received[0].Get(alerting.HeaderDelivery), delivered.GetId())
		for _, d := range log.Msg.GetDeliveries() {
			require.Empty(t, d.GetAlertId(), "a test has no alert")
			require.Equal(t, sluicev1.AlertState_ALERT_STATE_UNSPECIFIED, d.GetAlertState())
			require.Equal(t, "test", d.GetEvent())
			require.EqualValues(t, 1, d.GetAttempts())
			require.Nil(t, d.GetNextAttemptTime(), "a test is not retried")
		}
		log, err = c.alerts(reader).ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: w.GetId(), PageSize: 1}))
		require.NoError(t, err)
		require.Len(t, log.Msg.GetDeliveries(), 1)
		_, err = c.alerts(reader).ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{}))
		requireCode(t, connect.CodeInvalidArgument, err, "webhook_id")

		// Bob never sees Alice's webhooks or their deliveries, and cannot test or delete them.
		hooks, err = c.alerts(bob.token).ListWebhooks(ctx, connect.NewRequest(&sluicev1.ListWebhooksRequest{}))
		require.NoError(t, err)
		require.Empty(t, hooks.Msg.GetWebhooks())
		_, err = c.alerts(bob.token).ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: w.GetId()}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.alerts(bob.token).TestWebhook(ctx, connect.NewRequest(&sluicev1.TestWebhookRequest{Id: w.GetId()}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.alerts(bob.token).DeleteWebhook(ctx, connect.NewRequest(&sluicev1.DeleteWebhookRequest{Id: w.GetId()}))
		requireCode(t, connect.CodeNotFound, err)

		// The limit: 10 per tenant.
		for range controlplaneAPIMaxWebhooks - 2 {
			_, err := create(alice.token, "https://93.184.215.14/hook")
			require.NoError(t, err)
		}
		_, err = create(alice.token, "https://93.184.215.14/hook")
		requireCode(t, connect.CodeResourceExhausted, err, "webhook limit")
		_, err = create(bob.token, "https://93.184.215.14/hook")
		require.NoError(t, err, "Bob's limit is his own")

		// Delete.
		_, err = c.alerts(reader).DeleteWebhook(ctx, connect.NewRequest(&sluicev1.DeleteWebhookRequest{Id: w.GetId()}))
		requireCode(t, connect.CodePermissionDenied, err, "admin")
		_, err = c.alerts(alice.token).DeleteWebhook(ctx, connect.NewRequest(&sluicev1.DeleteWebhookRequest{}))
		requireCode(t, connect.CodeInvalidArgument, err, "id")
		_, err = c.alerts(alice.token).DeleteWebhook(ctx, connect.NewRequest(&sluicev1.DeleteWebhookRequest{Id: w.GetId()}))
		require.NoError(t, err)
		_, err = c.alerts(alice.token).DeleteWebhook(ctx, connect.NewRequest(&sluicev1.DeleteWebhookRequest{Id: w.GetId()}))
		requireCode(t, connect.CodeNotFound, err)
		_, err = c.alerts(alice.token).ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: w.GetId()}))
		requireCode(t, connect.CodeNotFound, err) // its log went with it
		_, err = create(alice.token, "https://93.184.215.14/hook")
		require.NoError(t, err, "room again")

		// Unauthenticated callers get nothing.
		_, err = c.alerts("").ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{}))
		requireCode(t, connect.CodeUnauthenticated, err)
	})
}

// TestControlPlaneAlertsLoopbackNeedsFlag: without
// --webhook-allow-insecure-loopback, loopback endpoints are refused,
// http:// and https:// alike, and so is a test of a webhook stored on one.
func TestControlPlaneAlertsLoopbackNeedsFlag(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	ctx := context.Background()
	alice := c.signup(t, "alice")
	for _, u := range []string{"http://127.0.0.1:8080/x", "https://127.0.0.1/x", "https://localhost/x", "https://[::1]/x"} {
		_, err := c.alerts(alice.token).CreateWebhook(ctx, connect.NewRequest(&sluicev1.CreateWebhookRequest{Url: u}))
		requireCode(t, connect.CodeInvalidArgument, err, "url")
	}
	// One stored behind the API's back (as if the name had resolved
	// elsewhere when it was registered): the send is refused at dial time.
	w, err := c.srv.Store().CreateWebhook(ctx, store.Webhook{TenantID: alice.tenantID, URL: "https://127.0.0.1:1/x"}, []byte("0123456789abcdef0123456789abcdef"), 0)
	require.NoError(t, err)
	tr, err := c.alerts(alice.token).TestWebhook(ctx, connect.NewRequest(&sluicev1.TestWebhookRequest{Id: w.ID}))
	require.NoError(t, err)
	require.Zero(t, tr.Msg.GetStatusCode())
	require.Contains(t, tr.Msg.GetError(), "127.0.0.1 is a loopback address")
}

const controlplaneAPIMaxWebhooks = 10

func alertIDs(as []*sluicev1.Alert) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.GetId())
	}
	return out
}
