package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/alerting"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// webhookReceiver records the signed deliveries it gets.
type webhookReceiver struct {
	srv    *httptest.Server
	secret []byte

	mu     sync.Mutex
	events []alerting.Event
	ids    map[string]int // Sluice-Delivery-Id → times received
	bad    []string
}

func newWebhookReceiver(t *testing.T) *webhookReceiver {
	w := &webhookReceiver{ids: map[string]int{}}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err := alerting.Verify(w.secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
			w.bad = append(w.bad, err.Error())
			http.Error(rw, err.Error(), http.StatusUnauthorized)
			return
		}
		id := r.Header.Get(alerting.HeaderDelivery)
		w.ids[id]++
		if w.ids[id] > 1 {
			return // a delivery again (at least once): counted, not a new event
		}
		var ev alerting.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			w.bad = append(w.bad, err.Error())
			return
		}
		w.events = append(w.events, ev)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// states returns each alert's announced states in order, by kind.
func (w *webhookReceiver) states() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for _, ev := range w.events {
		if ev.Type == "alert" {
			out[ev.Kind] = append(out[ev.Kind], ev.State)
		}
	}
	return out
}

// TestAlertsLagEndToEnd: a topic with one minute of retention, written at
// 10 records/s, and a group that consumes 4 records/s (its lag age grows
// 0.6 s every second). retention-expiry-risk fires before the first
// unconsumed record expires, forecasting the loss within 20% of when it
// happens; when retention deletes them, retention-expired fires with the
// lost range; once the group catches up everything resolves. A webhook
// receiver checks every delivery's signature and gets each state change of
// each alert, at least once (a delivery again only after a failed attempt,
// as documented). Another tenant sees none of it.
func TestAlertsLagEndToEnd(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{
		Bin: plainBin, DatabaseURL: testenv.PostgresURL(t),
		ExtraControlPlaneArgs: []string{
			"--lag-sample-interval", "500ms", "--lag-window", "20s",
			"--lag-alert-risk-for", "1s", "--lag-alert-growing-for", "2s", "--lag-alert-resolve-after", "2s",
			"--webhook-allow-insecure-loopback",
		},
		ExtraBrokerArgs: []string{"--group-lag-metrics-interval", "500ms", "--retention-check-interval", "500ms"},
	})
	retention := int64(60_000)
	a := c.NewClientWithConfig(t, "alerted", "events", 1, &sluicev1.TopicConfig{RetentionMs: &retention})
	b := c.NewClient(t, "bystander", "other", 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	alertsOf := func(cl *testcluster.Client) sluicev1connect.AlertServiceClient {
		return sluicev1connect.NewAlertServiceClient(c.HTTPClient(), c.ControlPlane(), connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(cl.Token())))
	}
	as := alertsOf(a)

	recv := newWebhookReceiver(t)
	wh, err := as.CreateWebhook(ctx, connect.NewRequest(&sluicev1.CreateWebhookRequest{Url: recv.srv.URL + "/sluice", Description: "e2e"}))
	require.NoError(t, err)
	recv.mu.Lock()
	recv.secret = []byte(wh.Msg.GetSigningSecret())
	recv.mu.Unlock()

	// A producer writes 10 records/s throughout; the group consumes 4
	// records/s (committing its position twice a second) until told to
	// catch up. Both keep to the clock, not to a pause after each call, so
	// that slow calls on a busy machine do not change the rates the
	// assertions below are about: a producer behind its schedule sends
	// what is due in one batch.
	go func() {
		const every = 100 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		t0 := time.Now()
		for sent := 0; ctx.Err() == nil; {
			if due := int(time.Since(t0)/every) + 1; due > sent {
				values := make([]string, 0, due-sent)
				for i := sent; i < due; i++ {
					values = append(values, fmt.Sprintf("r%d", i))
				}
				if res := a.Produce(ctx, 0, values, sluicev1.Acks_ACKS_ALL, 5*time.Second); res.Err == nil {
					sent = due
				}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	groups := sluicev1connect.NewGroupServiceClient(c.HTTPClient(), "http://"+c.Broker(1).ListenAddr, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(a.Token())))
	commit := func(off int64) {
		testenv.Wait(t, 30*time.Second, "commit", func() error {
			_, err := groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
				Group: "slow", Offsets: []*sluicev1.PartitionOffset{{Topic: "events", Partition: 0, Offset: off}},
			}))
			return err
		})
	}
	start := time.Now()
	commit(0)
	slow, stopSlow := context.WithCancel(ctx)
	slowDone := make(chan struct{})
	var committed atomic.Int64 // the group's position
	go func() {
		defer close(slowDone)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for slow.Err() == nil {
			select {
			case <-slow.Done():
				return
			case <-tick.C:
			}
			off := 4 * time.Since(start).Milliseconds() / 1000 // 4 records/s since the first commit
			if _, err := groups.CommitOffsets(slow, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
				Group: "slow", Offsets: []*sluicev1.PartitionOffset{{Topic: "events", Partition: 0, Offset: off}},
			})); err == nil {
				committed.Store(off)
			}
		}
	}()

	get := func(kind sluicev1.AlertKind, state sluicev1.AlertState) *sluicev1.Alert {
		res, err := as.ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{States: []sluicev1.AlertState{state}}))
		require.NoError(t, err)
		for _, al := range res.Msg.GetAlerts() {
			if al.GetKind() == kind {
				return al
			}
		}
		return nil
	}
	var risk *sluicev1.Alert
	testenv.Wait(t, 60*time.Second, "retention-expiry-risk firing", func() error {
		if risk = get(sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK, sluicev1.AlertState_ALERT_STATE_FIRING); risk == nil {
			return fmt.Errorf("not firing")
		}
		return nil
	})
	require.Equal(t, "slow", risk.GetGroup())
	require.Equal(t, "events", risk.GetTopic())
	forecastAt := risk.GetExpireTime().AsTime()
	firedAt := risk.GetFireTime().AsTime()
	t.Logf("retention-expiry-risk fired %s after the group stopped, forecasting the loss at +%s", firedAt.Sub(start).Round(time.Millisecond), forecastAt.Sub(start).Round(time.Millisecond))
	require.InDelta(t, 0.6, risk.GetLagAgeGrowthRate(), 0.2, "the group consumes 4 of 10 records a second: its lag age grows 0.6 s every second")
	require.NotEmpty(t, risk.GetAdvice())

	// Wait for retention to delete records the group has not consumed:
	// the actual loss.
	var lostAt time.Time
	testenv.Wait(t, 150*time.Second, "retention deletes unconsumed records", func() error {
		res, err := a.Records(1).ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "events", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
		if err != nil {
			return err
		}
		if pos := committed.Load(); res.Msg.GetLogStartOffset() <= pos {
			return fmt.Errorf("log starts at %d, the group is at %d", res.Msg.GetLogStartOffset(), pos)
		}
		lostAt = time.Now()
		return nil
	})
	require.True(t, firedAt.Before(lostAt), "the risk alert fired before the loss")
	left := lostAt.Sub(firedAt)
	require.InDelta(t, 0, forecastAt.Sub(lostAt).Seconds(), 0.2*left.Seconds(),
		"forecast loss at +%s, actual +%s (%s after the alert)", forecastAt.Sub(start), lostAt.Sub(start), left)
	t.Logf("records lost at +%s: forecast off by %s of %s (%.0f%%)", lostAt.Sub(start).Round(time.Millisecond),
		forecastAt.Sub(lostAt).Round(time.Millisecond), left.Round(time.Millisecond), 100*forecastAt.Sub(lostAt).Abs().Seconds()/left.Seconds())

	var expired *sluicev1.Alert
	testenv.Wait(t, 30*time.Second, "retention-expired firing", func() error {
		if expired = get(sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRED, sluicev1.AlertState_ALERT_STATE_FIRING); expired == nil {
			return fmt.Errorf("not firing")
		}
		return nil
	})
	require.Positive(t, expired.GetLostFromOffset(), "the group had consumed the first records")
	require.Positive(t, expired.GetLostToOffset())
	require.Equal(t, expired.GetLostToOffset()-expired.GetLostFromOffset(), expired.GetLostRecords())

	// The group catches up (commits the high watermark as it grows):
	// everything resolves.
	stopSlow()
	<-slowDone
	testenv.Wait(t, 60*time.Second, "every alert resolved", func() error {
		off, err := a.Records(1).ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "events", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}))
		if err != nil {
			return err
		}
		commit(off.Msg.GetOffset())
		for _, k := range []sluicev1.AlertKind{sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRED, sluicev1.AlertKind_ALERT_KIND_LAG_GROWING, sluicev1.AlertKind_ALERT_KIND_RETENTION_EXPIRY_RISK} {
			for _, st := range []sluicev1.AlertState{sluicev1.AlertState_ALERT_STATE_PENDING, sluicev1.AlertState_ALERT_STATE_FIRING} {
				if al := get(k, st); al != nil {
					return fmt.Errorf("%s still %s", k, st)
				}
			}
		}
		return nil
	})

	// The webhook got each state change of each alert, signed; at least
	// once, as documented: a delivery received more than once must have
	// had an attempt fail from the sender's side (no answer within its
	// timeout: seen once with every core busy), which its log records.
	testenv.Wait(t, 30*time.Second, "webhook deliveries", func() error {
		got := recv.states()
		if len(got["retention-expired"]) < 2 || len(got["retention-expiry-risk"]) < 2 {
			return fmt.Errorf("received %v", got)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // absence: any duplicate delivery would arrive now
	recv.mu.Lock()
	require.Empty(t, recv.bad, "every delivery verified")
	received := maps.Clone(recv.ids)
	recv.mu.Unlock()
	log, err := as.ListWebhookDeliveries(ctx, connect.NewRequest(&sluicev1.ListWebhookDeliveriesRequest{WebhookId: wh.Msg.GetWebhook().GetId()}))
	require.NoError(t, err)
	attempts := map[string]*sluicev1.WebhookDelivery{}
	for _, d := range log.Msg.GetDeliveries() {
		attempts[d.GetId()] = d
	}
	for id, n := range received {
		d := attempts[id]
		require.NotNil(t, d, "delivery %s received but not in the webhook's log", id)
		if n > 1 {
			require.GreaterOrEqual(t, int(d.GetAttempts()), n, "delivery %s received %d times in %d attempts", id, n, d.GetAttempts())
			require.NotEmpty(t, d.GetLastError(), "delivery %s received %d times with no failed attempt", id, n)
			t.Logf("delivery %s received %d times: %d attempts, last error %q", id, n, d.GetAttempts(), d.GetLastError())
		}
	}
	got := recv.states()
	require.Equal(t, []string{"firing", "resolved"}, got["retention-expired"])
	require.Equal(t, []string{"firing", "resolved"}, got["retention-expiry-risk"])

	// Tenant isolation: the bystander sees no alert, cannot read this one,
	// and has no webhook.
	bs := alertsOf(b)
	res, err := bs.ListAlerts(ctx, connect.NewRequest(&sluicev1.ListAlertsRequest{}))
	require.NoError(t, err)
	require.Empty(t, res.Msg.GetAlerts())
	_, err = bs.GetAlert(ctx, connect.NewRequest(&sluicev1.GetAlertRequest{Id: risk.GetId()}))
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err))
	whs, err := bs.ListWebhooks(ctx, connect.NewRequest(&sluicev1.ListWebhooksRequest{}))
	require.NoError(t, err)
	require.Empty(t, whs.Msg.GetWebhooks())
}
