package store

import (
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// Webhooks and their deliveries.
//
// A webhook's signing secret is write-only through the store's API:
// CreateWebhook takes it, Webhook has no field for it (GetWebhook and
// ListWebhooks cannot leak it), and only ClaimDeliveries, the sender's
// call, returns it with a delivery to sign. The store keeps the bytes it is
// given, so a caller holding a key may seal them first; the SQLite file is
// mode 0600 and the Postgres column is readable only through the control
// plane's role, as the JWT signing keys are.
//
// Deliveries are a small outbox table in the store rather than River jobs:
// the control plane runs on two drivers (Postgres and SQLite for `sluice
// dev`), and River would bring its own schema, migrations and dependencies
// to both where one table and a handful of statements do; the volume is
// tiny (a delivery per alert state change per webhook, at most a few
// webhooks per tenant); and the outbox lives in the same database as the
// alerts, so TransitionAlert enqueues a change's deliveries in the change's
// own transaction, which River's insert-in-transaction would give only on
// Postgres. A lease (a token and an expiry, taken with FOR UPDATE SKIP
// LOCKED on Postgres, under SQLite's single writer) keeps two replicas from
// sending one delivery at once; the unique (webhook, alert, alert state)
// key makes each state change be enqueued, and so delivered, once.

// MaxWebhookURLBytes and MaxWebhookDescriptionBytes bound a webhook's
// fields.
const (
	MaxWebhookURLBytes         = 2048
	MaxWebhookDescriptionBytes = 1024
	// MinWebhookSecretBytes is the shortest signing secret accepted.
	MinWebhookSecretBytes = 16
)

// Webhook is a tenant's endpoint for alert notifications. Its signing
// secret is stored with it but never returned (see ClaimedDelivery).
type Webhook struct {
	ID          string
	TenantID    string
	URL         string
	Description string
	CreatedAt   time.Time
}

// CheckWebhook validates a webhook about to be created, with its secret: a
// UUID tenant (and id, when given; a new one otherwise), an absolute http
// or https URL without user info, bounded sizes, a secret of at least
// MinWebhookSecretBytes. Whether the URL's host is one the control plane
// may call (no loopback, link-local or private address) is decided when
// registering and when sending, not here: names resolve differently over
// time.
func CheckWebhook(w Webhook, secret []byte) (Webhook, error) {
	var err error
	if w.TenantID, err = CheckNewID("tenant", w.TenantID); err != nil {
		return Webhook{}, err
	}
	if w.ID == "" {
		w.ID = NewID()
	} else if w.ID, err = CheckNewID("webhook", w.ID); err != nil {
		return Webhook{}, err
	}
	bad := func(format string, args ...any) (Webhook, error) {
		return Webhook{}, fmt.Errorf("invalid webhook: %s", fmt.Sprintf(format, args...))
	}
	if len(w.URL) > MaxWebhookURLBytes {
		return bad("URL longer than %d bytes", MaxWebhookURLBytes)
	}
	u, err := url.Parse(w.URL)
	switch {
	case err != nil:
		return bad("URL: %v", err)
	case u.Scheme != "https" && u.Scheme != "http":
		return bad("URL scheme %q is not http or https", u.Scheme)
	case u.Host == "":
		return bad("URL has no host")
	case u.User != nil:
		return bad("URL has user info")
	case !PlainText(w.URL) || !PlainText(w.Description):
		return bad("URL or description is not UTF-8 text without NUL")
	case len(w.Description) > MaxWebhookDescriptionBytes:
		return bad("description longer than %d bytes", MaxWebhookDescriptionBytes)
	case len(secret) < MinWebhookSecretBytes:
		return bad("signing secret shorter than %d bytes", MinWebhookSecretBytes)
	}
	return w, nil
}

// DeliveryStatus is where a delivery is: pending (waiting for its next
// attempt, or being sent under a lease), delivered, or failed for good.
type DeliveryStatus string

// The delivery statuses.
const (
	DeliveryPending   DeliveryStatus = "pending"
	DeliveryDelivered DeliveryStatus = "delivered"
	DeliveryFailed    DeliveryStatus = "failed"
)

// AlertStateTest is the AlertState of a webhook test delivery (one without
// an alert).
const AlertStateTest AlertState = "test"

// EventInvoiceFinalized is the AlertState of an event delivery (one without
// an alert) announcing a finalized invoice. Only FinalizeInvoice enqueues
// it, in the transaction that finalizes the invoice, so each invoice's is
// enqueued once per webhook.
const EventInvoiceFinalized AlertState = "invoice.finalized"

// Event reports whether s names an event without an alert: a webhook test
// or EventInvoiceFinalized.
func (s AlertState) Event() bool { return s == AlertStateTest || s == EventInvoiceFinalized }

// Delivery is one notification to one webhook: an alert's state change (or
// a test), its body, and the record of the attempts to send it.
type Delivery struct {
	ID         string
	TenantID   string
	WebhookID  string
	AlertID    string     // "" for a test delivery or an event
	AlertState AlertState // the state the delivery announces; AlertStateTest for a test, or the event (EventInvoiceFinalized)
	// Payload is the JSON body to send, as given.
	Payload       []byte
	Status        DeliveryStatus
	Attempts      int32
	NextAttemptAt time.Time
	LastError     string
	CreatedAt     time.Time
	DeliveredAt   time.Time // zero until delivered
}

// ClaimedDelivery is a delivery leased to one sender by ClaimDeliveries,
// with what sending needs. LeaseToken is passed back to MarkDelivered or
// MarkDeliveryFailed.
type ClaimedDelivery struct {
	Delivery
	URL            string
	Secret         []byte
	LeaseToken     string
	LeaseExpiresAt time.Time
}

// DeliveryFailure is a failed send.
type DeliveryFailure struct {
	At    time.Time // now when zero
	Error string    // kept to MaxDeliveryErrorBytes
	// Permanent: retrying cannot help (the endpoint answered 4xx other than
	// 408 and 429, say).
	Permanent bool
}

// MaxDeliveryErrorBytes bounds a stored LastError.
const MaxDeliveryErrorBytes = 1024

// RetryPolicy is how a failed delivery is retried: after MinBackoff, then
// doubling up to MaxBackoff, at most MaxAttempts attempts in all. Zero fields
// take the defaults: 8 attempts, 10 s doubling to at most 1 h, so the last
// attempt comes about 21 min after the first.
type RetryPolicy struct {
	MaxAttempts int32
	MinBackoff  time.Duration
	MaxBackoff  time.Duration
}

// Next decides a delivery that failed its attempts-th attempt (1 for the
// first) at `at`: retry at next, or give up (retry false).
func (p RetryPolicy) Next(attempts int32, at time.Time) (next time.Time, retry bool) {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 8
	}
	if p.MinBackoff <= 0 {
		p.MinBackoff = 10 * time.Second
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = time.Hour
	}
	if attempts >= p.MaxAttempts {
		return time.Time{}, false
	}
	d := p.MinBackoff
	for i := int32(1); i < attempts && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return at.Add(min(d, p.MaxBackoff)), true
}

// DecideDeliveryFailure returns the status, next attempt time and stored
// error of a delivery whose attempts-th attempt failed with f.
func DecideDeliveryFailure(attempts int32, f DeliveryFailure, p RetryPolicy) (DeliveryStatus, time.Time, string) {
	msg := CleanText(f.Error, MaxDeliveryErrorBytes)
	if f.Permanent {
		return DeliveryFailed, f.At, msg
	}
	next, retry := p.Next(attempts, f.At)
	if !retry {
		return DeliveryFailed, f.At, msg
	}
	return DeliveryPending, next, msg
}

// CheckDelivery validates a delivery about to be enqueued and returns it
// with canonical ids (a new id when empty), status pending, no attempts.
func CheckDelivery(d Delivery) (Delivery, error) {
	var err error
	if d.ID == "" {
		d.ID = NewID()
	} else if d.ID, err = CheckNewID("delivery", d.ID); err != nil {
		return Delivery{}, err
	}
	if d.TenantID, err = CheckNewID("tenant", d.TenantID); err != nil {
		return Delivery{}, err
	}
	if d.WebhookID, err = CheckNewID("webhook", d.WebhookID); err != nil {
		return Delivery{}, err
	}
	switch {
	case d.AlertID == "" && !d.AlertState.Event():
		return Delivery{}, fmt.Errorf("invalid delivery: no alert, and alert state %q is not %q or %q", d.AlertState, AlertStateTest, EventInvoiceFinalized)
	case d.AlertID != "" && d.AlertState.Event():
		return Delivery{}, fmt.Errorf("invalid delivery: alert %s with event %q", d.AlertID, d.AlertState)
	case d.AlertID != "" && !d.AlertState.Valid():
		return Delivery{}, fmt.Errorf("invalid delivery: alert state %q", d.AlertState)
	case len(d.Payload) == 0:
		return Delivery{}, fmt.Errorf("invalid delivery: empty payload")
	}
	if d.AlertID != "" {
		if d.AlertID, err = CheckNewID("alert", d.AlertID); err != nil {
			return Delivery{}, err
		}
	}
	d.Status, d.Attempts, d.LastError, d.DeliveredAt = DeliveryPending, 0, "", time.Time{}
	return d, nil
}

// CheckClaim validates the arguments of ClaimDeliveries.
func CheckClaim(lease time.Duration, limit int) error {
	if lease <= 0 {
		return fmt.Errorf("invalid delivery claim: lease %s is not positive", lease)
	}
	if limit <= 0 {
		return fmt.Errorf("invalid delivery claim: limit %d is not positive", limit)
	}
	return nil
}

// PlainText reports whether s can be stored as text by every driver: valid
// UTF-8 without NUL (Postgres text refuses both).
func PlainText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// CleanText makes s PlainText (invalid bytes and NULs become U+FFFD) and
// cuts it to at most max bytes at a rune boundary.
func CleanText(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// DecideClaimDelivery decides ClaimDelivery on d, read inside the write's
// transaction with the expiry of its current lease (zero: none): a delivery
// that is not pending, or whose lease runs past now, is ErrConflict.
func DecideClaimDelivery(d Delivery, leaseExpiresAt, now time.Time) error {
	if d.Status != DeliveryPending {
		return fmt.Errorf("delivery %s is %s: %w", d.ID, d.Status, ErrConflict)
	}
	if leaseExpiresAt.After(now.Truncate(time.Millisecond)) {
		return fmt.Errorf("delivery %s is being sent until %s: %w", d.ID, leaseExpiresAt, ErrConflict)
	}
	return nil
}
