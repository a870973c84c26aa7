package alerting

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/controlplane/store"
)

// Webhook deliveries are signed like Stripe's: the Sluice-Signature header
// is the hex HMAC-SHA256, keyed with the webhook's secret, of
// "<Sluice-Timestamp>.<body>"; Sluice-Timestamp is the Unix time in
// seconds of the attempt, so a receiver can refuse replays (older than a
// few minutes). Sluice-Delivery-Id names the delivery: the same state
// change of the same alert is delivered under one id, at least once.

const (
	HeaderSignature = "Sluice-Signature"
	HeaderTimestamp = "Sluice-Timestamp"
	HeaderDelivery  = "Sluice-Delivery-Id"
)

// Sign returns the signature of body sent at ts with secret.
func Sign(secret []byte, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%d.", ts.Unix())
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery's signature and that it is at most maxAge old.
func Verify(secret []byte, header http.Header, body []byte, now time.Time, maxAge time.Duration) error {
	sec, err := strconv.ParseInt(header.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("bad %s header", HeaderTimestamp)
	}
	ts := time.Unix(sec, 0)
	if now.Sub(ts) > maxAge || ts.Sub(now) > maxAge {
		return fmt.Errorf("timestamp %s is more than %s away", ts, maxAge)
	}
	want := Sign(secret, ts, body)
	if !hmac.Equal([]byte(want), []byte(header.Get(HeaderSignature))) {
		return fmt.Errorf("signature mismatch")
	}
	return nil
}

// Retry is how deliveries are retried: 8 attempts, backoff from 5 s to
// 10 min.
var Retry = store.RetryPolicy{MaxAttempts: 8, MinBackoff: 5 * time.Second, MaxBackoff: 10 * time.Minute}

func (a *Alerter) deliverLoop(ctx context.Context) {
	t := a.cfg.Clock.NewTicker(time.Second)
	defer t.Stop()
	for {
		if _, err := a.Deliver(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("webhooks: deliver", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Deliver sends the deliveries that are due, a few at a time, and returns
// how many it sent successfully. A slow or failing webhook only delays
// its own deliveries: evaluation never waits for it.
func (a *Alerter) Deliver(ctx context.Context) (int, error) {
	claimed, err := a.st.ClaimDeliveries(ctx, a.cfg.Clock.Now(), time.Minute, 16)
	if err != nil {
		return 0, err
	}
	ok := 0
	for _, d := range claimed {
		status, err := a.cfg.Sender.Send(ctx, d.URL, d.Secret, d.ID, d.Payload)
		now := a.cfg.Clock.Now()
		if err == nil {
			if _, err := a.st.MarkDelivered(ctx, d.ID, d.LeaseToken, now); err != nil {
				a.cfg.Logger.Warn("webhooks: mark delivered", "delivery", d.ID, "err", err)
			}
			ok++
			continue
		}
		// 4xx other than 408/429: the endpoint refuses it; retrying cannot help.
		permanent := status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
		marked, merr := a.st.MarkDeliveryFailed(ctx, d.ID, d.LeaseToken, store.DeliveryFailure{At: now, Error: err.Error(), Permanent: permanent}, Retry)
		if merr != nil {
			a.cfg.Logger.Warn("webhooks: mark failed", "delivery", d.ID, "err", merr)
			continue
		}
		// The endpoint's problem, not the control plane's: Info, with
		// what an operator needs to tell a slow endpoint (a timeout,
		// after which the retry may deliver it twice) from a refusing one.
		a.cfg.Logger.Info("webhooks: delivery attempt failed", "tenant", d.TenantID, "webhook", d.WebhookID, "delivery", d.ID,
			"attempt", marked.Attempts, "status", status, "err", withoutURL(err), "outcome", string(marked.Status), "next_attempt", marked.NextAttemptAt)
	}
	return ok, nil
}

// withoutURL is err without the request's URL that net/http puts in it:
// a webhook's URL may carry the tenant's secret (a token in its path or
// query), which has no place in the control plane's logs.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// Sender POSTs signed deliveries to webhooks through Guard's checks: the
// Alerter's deliveries and the API's webhook tests share it.
type Sender struct {
	guard Guard
	https *http.Client // any allowed address
	http  *http.Client // plain http://: loopback only, when the guard allows it
	now   func() time.Time
}

// NewSender returns a Sender whose every request ends within timeout
// (10 s when ≤ 0).
func NewSender(g Guard, timeout time.Duration, now func() time.Time) *Sender {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	client := func(loopbackOnly bool) *http.Client {
		return &http.Client{
			Timeout: timeout,
			Transport: &http.Transport{
				Proxy:                 nil, // the dial check must see the endpoint's address
				DialContext:           g.dialer(loopbackOnly).DialContext,
				ForceAttemptHTTP2:     true,
				TLSHandshakeTimeout:   timeout,
				ResponseHeaderTimeout: timeout,
				MaxIdleConns:          16,
				IdleConnTimeout:       time.Minute,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Sender{guard: g, https: client(false), http: client(true), now: now}
}

// Guard is the sender's address policy.
func (s *Sender) Guard() Guard { return s.guard }

// Send POSTs body to rawURL signed with secret under delivery id, and
// answers the HTTP status (0 when there was none) and an error unless it
// was 2xx. A URL or an address the guard refuses is an error wrapping
// ErrAddressRefused, before anything is sent.
func (s *Sender) Send(ctx context.Context, rawURL string, secret []byte, id string, body []byte) (int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	var c *http.Client
	switch {
	case u.Scheme == "https":
		c = s.https
	case u.Scheme == "http" && s.guard.AllowInsecureLoopback:
		c = s.http
	default:
		return 0, fmt.Errorf("%w: scheme %q (https:// only)", ErrAddressRefused, u.Scheme)
	}
	ts := s.now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhooks/1")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	req.Header.Set(HeaderDelivery, id)
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.StatusCode, fmt.Errorf("endpoint answered %s", res.Status)
	}
	return res.StatusCode, nil
}

// TestResult is what a webhook test got.
type TestResult struct {
	// Status is the endpoint's HTTP status; 0 when it was not reached.
	Status int
	// Error says why the test failed; "" when the endpoint answered 2xx.
	Error    string
	Latency  time.Duration
	Delivery store.Delivery // as recorded in the delivery log
}

// testLease holds a test delivery for its sender; it is enqueued due only
// after it, so the delivery loop never sends it too.
const testLease = time.Minute

// TestWebhook sends a signed test event to the tenant's webhook now
// (within the sender's timeout) and records it in the webhook's delivery
// log as a test delivery (store.AlertStateTest), delivered or failed for
// good (a test is not retried). Another tenant's or an unknown webhook →
// store.ErrNotFound. A failed send is a result, not an error.
func (s *Sender) TestWebhook(ctx context.Context, st store.Store, tenantID, webhookID string) (TestResult, error) {
	w, err := st.GetWebhook(ctx, tenantID, webhookID)
	if err != nil {
		return TestResult{}, err
	}
	now := s.now()
	body, err := json.Marshal(Event{
		Type: "test", TenantID: w.TenantID, State: string(store.AlertStateTest), CreatedAt: now.UTC(),
		Details: json.RawMessage(`{"summary":"A test event from Sluice: this webhook is reachable and its signatures verify."}`),
	})
	if err != nil {
		return TestResult{}, err
	}
	d, _, err := st.EnqueueDelivery(ctx, store.Delivery{TenantID: w.TenantID, WebhookID: w.ID, AlertState: store.AlertStateTest,
		Payload: body, CreatedAt: now, NextAttemptAt: now.Add(testLease)})
	if err != nil {
		return TestResult{}, err
	}
	c, err := st.ClaimDelivery(ctx, w.TenantID, d.ID, now, testLease)
	if err != nil {
		return TestResult{}, err
	}
	start := time.Now()
	status, sendErr := s.Send(ctx, c.URL, c.Secret, c.ID, c.Payload)
	res := TestResult{Status: status, Latency: time.Since(start)}
	// Record the outcome even when the caller went away meanwhile.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if sendErr == nil {
		res.Delivery, err = st.MarkDelivered(mctx, c.ID, c.LeaseToken, s.now())
	} else {
		res.Error = store.CleanText(sendErr.Error(), store.MaxDeliveryErrorBytes)
		res.Delivery, err = st.MarkDeliveryFailed(mctx, c.ID, c.LeaseToken, store.DeliveryFailure{At: s.now(), Error: res.Error, Permanent: true}, Retry)
	}
	if err != nil {
		return res, fmt.Errorf("record test delivery: %w", err)
	}
	return res, nil
}
