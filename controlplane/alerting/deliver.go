package alerting

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
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
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if _, err := a.Deliver(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("webhooks: deliver", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Deliver sends the deliveries that are due, a few at a time, and returns
// how many it sent successfully. A slow or failing webhook only delays
// its own deliveries: evaluation never waits for it.
func (a *Alerter) Deliver(ctx context.Context) (int, error) {
	claimed, err := a.st.ClaimDeliveries(ctx, a.cfg.Now(), time.Minute, 16)
	if err != nil {
		return 0, err
	}
	ok := 0
	for _, d := range claimed {
		status, err := a.send(ctx, d.URL, d.Secret, d.ID, d.Payload)
		now := a.cfg.Now()
		if err == nil {
			if _, err := a.st.MarkDelivered(ctx, d.ID, d.LeaseToken, now); err != nil {
				a.cfg.Logger.Warn("webhooks: mark delivered", "delivery", d.ID, "err", err)
			}
			ok++
			continue
		}
		// 4xx other than 408/429: the endpoint refuses it; retrying cannot help.
		permanent := status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
		if _, merr := a.st.MarkDeliveryFailed(ctx, d.ID, d.LeaseToken, store.DeliveryFailure{At: now, Error: err.Error(), Permanent: permanent}, Retry); merr != nil {
			a.cfg.Logger.Warn("webhooks: mark failed", "delivery", d.ID, "err", merr)
		}
	}
	return ok, nil
}

// send POSTs one delivery and answers the HTTP status (0 when there was
// none) and an error unless it was 2xx.
func (a *Alerter) send(ctx context.Context, url string, secret []byte, id string, body []byte) (int, error) {
	ts := a.cfg.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Sluice-Webhooks/1")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(secret, ts, body))
	req.Header.Set(HeaderDelivery, id)
	res, err := a.cfg.Webhook.Do(req)
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
