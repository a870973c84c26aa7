package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// Lag and retention-expiry alerts (DESIGN.md §8, issue 8): the store keeps
// the sampled lag history the forecast (alerts/forecast) is computed from,
// the alerts raised from it, the tenants' webhook endpoints and the durable
// outbox of webhook deliveries. The evaluation loop, the sender and the API
// live elsewhere; the decisions both drivers share (validation, the alert
// state machine, retry backoff) live here.

// AlertStore is the part of Store that serves lag and retention-expiry
// alerts. Every tenant-facing read takes the tenant id and answers
// ErrNotFound (or nothing) for another tenant's objects; the methods named
// All… or taking no tenant are for the control plane's own loops (sampler,
// evaluator, sender), never for answering a tenant.
type AlertStore interface {
	// AddLagSamples stores samples in one transaction: all or none. A sample whose key and
	// SampledAt are stored already is skipped (a retried batch is stored once). A malformed
	// sample (CheckLagSample) → an error that is none of the sentinels; an unknown tenant →
	// ErrNotFound. The sampler is trusted to name a topic of the tenant: samples are not
	// checked against topics, and outlive a deleted topic until pruned.
	AddLagSamples(ctx context.Context, samples []LagSample) error
	// ListLagSamples returns the samples of key taken in [since, until] (a zero until means no
	// upper bound), oldest first: the history forecast.Compute takes (LagSample.Forecast).
	// Another tenant's key, or an unknown one, has none.
	ListLagSamples(ctx context.Context, key LagKey, since, until time.Time) ([]LagSample, error)
	// ListLagHistories is ListLagSamples of many keys in one read, as forecast.Compute takes
	// them: out[i] holds the samples of keys[i] taken in [since, until] (a zero until means no
	// upper bound), oldest first, each as LagSample.Forecast converts it. An unknown or
	// malformed key, or another tenant's, has none; a key named twice has its samples twice. At most
	// MaxLagHistoryKeys keys per call, else an error that is none of the sentinels: the
	// evaluator reads a round's histories in chunks of that many.
	ListLagHistories(ctx context.Context, keys []LagKey, since, until time.Time) ([][]forecast.Sample, error)
	// LatestLagSamples returns the newest sample of each key of the tenant, ordered by group,
	// topic id and partition.
	LatestLagSamples(ctx context.Context, tenantID string) ([]LagSample, error)
	// AllLatestLagSamples is LatestLagSamples over every tenant, ordered by tenant id first:
	// the evaluator's scan. Not for answering a tenant.
	AllLatestLagSamples(ctx context.Context) ([]LagSample, error)
	// PruneLagSamples bounds the history: it deletes every sample taken before `before`, and
	// every sample of a key but its maxPerKey newest (maxPerKey ≤ 0: no per-key cap).
	// Returns how many samples it deleted.
	PruneLagSamples(ctx context.Context, before time.Time, maxPerKey int) (int64, error)

	// TransitionAlert moves the active alert of tr.Key from tr.From to tr.To in one
	// transaction, compare-and-set on the stored state, and returns the alert as stored
	// (CheckAlertTransition decides which moves are legal):
	//
	//   - From == AlertNone creates the key's active alert (id tr.NewID, or a new one when
	//     empty) in state To: ErrConflict when the key has an active alert already, so of
	//     concurrent creations one wins;
	//   - otherwise the tenant's alert tr.ID must be the key's and be in state From, else
	//     ErrConflict (another replica moved it first; re-read with GetAlert) or ErrNotFound
	//     (no such alert in that tenant). From == To refreshes Details and UpdatedAt only.
	//
	// A key has at most one active (pending or firing) alert; a resolved alert is final, and
	// the key's next episode is a new alert. FiredAt is set on entering firing, ResolvedAt on
	// entering resolved. When the state changes and tr.Payload is set, the transaction also
	// enqueues, for every webhook of the tenant, a delivery of Payload(alert) for the new
	// state (idempotent as EnqueueDelivery): the change and its notifications commit together.
	TransitionAlert(ctx context.Context, tr AlertTransition) (Alert, error)
	// RefreshAlerts applies, in one transaction, refreshes: transitions with From == To (a
	// state) that replace an active alert's Details, ClearSince and UpdatedAt (At) and nothing
	// else, each compare-and-set as TransitionAlert's (the tenant's alert ID, of the key, still
	// in state From). applied[i] is false for a refresh that found no such alert (another
	// replica moved it first); it changes nothing. No refresh enqueues deliveries: the state
	// does not change. A malformed refresh (CheckAlertTransition, or From ≠ To), one alert id
	// named twice, or more than MaxAlertRefreshes → an error that is none of the sentinels, and
	// nothing applied.
	RefreshAlerts(ctx context.Context, refreshes []AlertTransition) (applied []bool, err error)
	// GetAlert returns the tenant's alert id → ErrNotFound (also for another tenant's id).
	GetAlert(ctx context.Context, tenantID, id string) (Alert, error)
	// ListAlerts returns the tenant's alerts newest first (CreatedAt, then id, descending),
	// only those in one of q.States unless it is empty, only q.Group's unless it is "", at most q.Limit (≤ 0: 100, capped at
	// 1000) after q.AfterID (the last id of the previous page; an id the tenant does not
	// have → ErrNotFound).
	ListAlerts(ctx context.Context, tenantID string, q AlertQuery) ([]Alert, error)
	// ListActiveAlerts returns the pending and firing alerts of every tenant, ordered by
	// tenant id, group, topic id, partition and kind: the evaluator's view. Not for answering
	// a tenant.
	ListActiveAlerts(ctx context.Context) ([]Alert, error)

	// GetAlertPolicy returns the tenant's stored alert policy → ErrNotFound when it has
	// stored none (it has the defaults) or the tenant is unknown.
	GetAlertPolicy(ctx context.Context, tenantID string) (AlertPolicy, error)
	// PutAlertPolicy stores the tenant's alert policy, replacing any (UpdatedAt: now when
	// zero), and returns it as stored. A malformed policy (CheckAlertPolicy) → an error that
	// is none of the sentinels; an unknown tenant → ErrNotFound.
	PutAlertPolicy(ctx context.Context, p AlertPolicy) (AlertPolicy, error)
	// ListAlertPolicies returns every stored policy, ordered by tenant id: the evaluator's
	// view (tenants without one have the defaults). Not for answering a tenant.
	ListAlertPolicies(ctx context.Context) ([]AlertPolicy, error)

	// CreateWebhook stores a webhook endpoint of w.TenantID (w.ID: a new UUID, or "" for one
	// chosen by the store) with its signing secret, refusing with *LimitError ("webhooks") when
	// the tenant has maxPerTenant already (≤ 0: no limit), checked atomically with the insert.
	// Unknown tenant → ErrNotFound; a malformed webhook (CheckWebhook) → an error that is none
	// of the sentinels. Returns the stored webhook.
	CreateWebhook(ctx context.Context, w Webhook, secret []byte, maxPerTenant int) (Webhook, error)
	// GetWebhook returns the tenant's webhook id → ErrNotFound.
	GetWebhook(ctx context.Context, tenantID, id string) (Webhook, error)
	// ListWebhooks returns the tenant's webhooks in creation order.
	ListWebhooks(ctx context.Context, tenantID string) ([]Webhook, error)
	// DeleteWebhook deletes the tenant's webhook id and its deliveries → ErrNotFound.
	DeleteWebhook(ctx context.Context, tenantID, id string) error

	// EnqueueDelivery adds a pending delivery of d.Payload to the tenant's webhook d.WebhookID,
	// due at d.NextAttemptAt (CreatedAt when zero; CreatedAt is now when zero). It is
	// idempotent on (webhook, alert, alert state): when that delivery exists already it
	// returns the stored one and created = false, changing nothing. A delivery without an
	// alert (AlertID "", AlertState "test": a webhook test) is never deduplicated. The
	// webhook, and the alert when named, must be the tenant's → ErrNotFound.
	EnqueueDelivery(ctx context.Context, d Delivery) (stored Delivery, created bool, err error)
	// ClaimDeliveries leases up to limit pending deliveries due at now (next attempt at or
	// before now, no unexpired lease), oldest due first, until now+lease, and returns them
	// with what sending needs (URL, secret, lease token). Concurrent claims, from this process
	// or another replica, never return the same delivery while its lease runs; a sender that
	// dies leaves its deliveries to be claimed again once the lease expires.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]ClaimedDelivery, error)
	// ClaimDelivery leases the tenant's pending delivery id until now+lease whatever its due
	// time (a webhook test sends the delivery it has just enqueued), and returns it as
	// ClaimDeliveries does. Another tenant's or an unknown delivery → ErrNotFound; one that
	// is not pending, or is leased until after now → ErrConflict.
	ClaimDelivery(ctx context.Context, tenantID, id string, now time.Time, lease time.Duration) (ClaimedDelivery, error)
	// MarkDelivered records a successful send of the claimed delivery: status delivered,
	// attempts + 1, DeliveredAt = at. The lease token must be the delivery's current one (its
	// lease may have expired, as long as no one claimed it since), else ErrConflict; unknown
	// id → ErrNotFound.
	MarkDelivered(ctx context.Context, id, leaseToken string, at time.Time) (Delivery, error)
	// MarkDeliveryFailed records a failed send of the claimed delivery: attempts + 1,
	// LastError = f.Error, and either pending again at the time policy.Next gives, or failed
	// for good (f.Permanent, or the attempts reached policy.MaxAttempts). The token is checked
	// as by MarkDelivered.
	MarkDeliveryFailed(ctx context.Context, id, leaseToken string, f DeliveryFailure, policy RetryPolicy) (Delivery, error)
	// ListDeliveries returns the delivery log of the tenant's webhook, newest first
	// (CreatedAt, then id, descending), at most limit (≤ 0: 100, capped at 1000). Another
	// tenant's webhook, or an unknown one → ErrNotFound.
	ListDeliveries(ctx context.Context, tenantID, webhookID string, limit int) ([]Delivery, error)
	// PruneDeliveries deletes delivered and failed deliveries created before `before`,
	// returning how many. Pending ones are kept whatever their age.
	PruneDeliveries(ctx context.Context, before time.Time) (int64, error)
}

// ---- lag samples ----

// LagKey names one group's lag on one partition of one tenant's topic.
type LagKey struct {
	TenantID  string
	Group     string
	TopicID   string
	Partition int32
}

// LagSample is one observation of a group on a partition, as the control
// plane samples it: everything forecast.Sample needs (see Forecast) and
// what an alert reports.
type LagSample struct {
	LagKey
	// TopicName is the topic's name when sampled (ids are never reused,
	// names may be).
	TopicName string
	SampledAt time.Time
	// Offline: the partition had no leader; only SampledAt is meaningful.
	Offline bool
	// CommittedOffset is the group's next offset to read; NoCommittedOffset
	// (-1) when it has committed none on the partition.
	CommittedOffset int64
	// LogStartOffset is the first offset not deleted by retention, counting
	// the tiered copy.
	LogStartOffset int64
	// LogEndOffset is the high watermark: what a consumer can read up to.
	LogEndOffset int64
	// LagMessages is LogEndOffset − CommittedOffset, 0 when caught up or
	// without a committed offset; with transactions, the broker's count of
	// what a read_committed consumer can still read (up to the last stable
	// offset, markers and aborted batches after CommittedOffset skipped).
	LagMessages int64
	// LagAgeMs is SampledAt minus the append time of the record at
	// CommittedOffset (the first one a read_committed consumer is given),
	// in milliseconds; 0 when caught up.
	LagAgeMs int64
	// PartitionBytes is the partition's size from LogStartOffset to
	// LogEndOffset, tiered copy included.
	PartitionBytes int64
	// UnconsumedBytes is the size from CommittedOffset to LogEndOffset; 0
	// when unknown.
	UnconsumedBytes int64
	// RetentionMs and RetentionBytes are the topic's retention.ms and
	// retention.bytes when sampled; -1 is unlimited.
	RetentionMs    int64
	RetentionBytes int64
}

// MaxLagHistoryKeys bounds the keys of one ListLagHistories call.
const MaxLagHistoryKeys = 1000

// CheckLagHistoryKeys validates the keys of a ListLagHistories call: at most
// MaxLagHistoryKeys. It returns, for each key, its canonical ids, and ok
// false for a malformed key, which has no samples whatever is stored.
func CheckLagHistoryKeys(keys []LagKey) (out []LagKey, ok []bool, err error) {
	if len(keys) > MaxLagHistoryKeys {
		return nil, nil, fmt.Errorf("list lag histories: %d keys, more than %d", len(keys), MaxLagHistoryKeys)
	}
	out, ok = make([]LagKey, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		tid, ok1 := CanonicalID(k.TenantID)
		pid, ok2 := CanonicalID(k.TopicID)
		k.TenantID, k.TopicID = tid, pid
		out[i], ok[i] = k, ok1 && ok2 && k.Group != "" && PlainText(k.Group) && k.Partition >= 0
	}
	return out, ok, nil
}

// NoCommittedOffset is LagSample.CommittedOffset for a group that has
// committed nothing on the partition.
const NoCommittedOffset = forecast.NoOffset

// Forecast is the sample as alerts/forecast takes it.
func (s LagSample) Forecast() forecast.Sample {
	r := forecast.Retention{}
	if s.RetentionMs > 0 {
		r.Time = time.Duration(s.RetentionMs) * time.Millisecond
	}
	if s.RetentionBytes > 0 {
		r.Bytes = s.RetentionBytes
	}
	return forecast.Sample{
		Time:            s.SampledAt,
		Offline:         s.Offline,
		CommittedOffset: s.CommittedOffset,
		LogStartOffset:  s.LogStartOffset,
		LogEndOffset:    s.LogEndOffset,
		LagAge:          time.Duration(s.LagAgeMs) * time.Millisecond,
		PartitionBytes:  s.PartitionBytes,
		UnconsumedBytes: s.UnconsumedBytes,
		Retention:       r,
	}
}

// ForecastSamples converts a history (ListLagSamples) for forecast.Compute.
func ForecastSamples(samples []LagSample) []forecast.Sample {
	out := make([]forecast.Sample, len(samples))
	for i, s := range samples {
		out[i] = s.Forecast()
	}
	return out
}

// SortForecastSamples sorts a history oldest first, as a driver reading it
// in another order returns it; a history newest first is reversed.
func SortForecastSamples(h []forecast.Sample) {
	older := func(a, b forecast.Sample) int { return a.Time.Compare(b.Time) }
	if slices.IsSortedFunc(h, older) {
		return
	}
	slices.Reverse(h)
	if !slices.IsSortedFunc(h, older) {
		slices.SortFunc(h, older)
	}
}

// CheckLagKey validates a key about to be written and returns it with
// canonical ids.
func CheckLagKey(k LagKey) (LagKey, error) {
	var err error
	if k.TenantID, err = CheckNewID("tenant", k.TenantID); err != nil {
		return LagKey{}, err
	}
	if k.TopicID, err = CheckNewID("topic", k.TopicID); err != nil {
		return LagKey{}, err
	}
	if k.Group == "" || !PlainText(k.Group) {
		return LagKey{}, fmt.Errorf("invalid lag key: group %q is empty or not UTF-8 text", k.Group)
	}
	if k.Partition < 0 {
		return LagKey{}, fmt.Errorf("invalid lag key: negative partition %d", k.Partition)
	}
	return k, nil
}

// CheckLagSample validates a sample about to be stored: a valid key, a
// SampledAt, no negative counts, CommittedOffset ≥ -1, LogStartOffset ≤
// LogEndOffset, retentions ≥ -1. It returns the sample with canonical ids.
func CheckLagSample(s LagSample) (LagSample, error) {
	k, err := CheckLagKey(s.LagKey)
	if err != nil {
		return LagSample{}, err
	}
	s.LagKey = k
	bad := func(format string, args ...any) (LagSample, error) {
		return LagSample{}, fmt.Errorf("invalid lag sample of group %q on %s/%d: %s", s.Group, s.TopicID, s.Partition, fmt.Sprintf(format, args...))
	}
	switch {
	case s.SampledAt.IsZero():
		return bad("no sample time")
	case !PlainText(s.TopicName):
		return bad("topic name is not UTF-8 text")
	case s.CommittedOffset < NoCommittedOffset:
		return bad("committed offset %d below -1", s.CommittedOffset)
	case s.LogStartOffset < 0 || s.LogEndOffset < s.LogStartOffset:
		return bad("log start %d, log end %d", s.LogStartOffset, s.LogEndOffset)
	case s.LagMessages < 0 || s.LagAgeMs < 0 || s.PartitionBytes < 0 || s.UnconsumedBytes < 0:
		return bad("negative lag, lag age or bytes")
	case s.RetentionMs < -1 || s.RetentionBytes < -1:
		return bad("retention below -1")
	}
	return s, nil
}

// ---- alerts ----

// AlertKind is what an alert warns of.
type AlertKind string

// The alert kinds (DESIGN.md §8).
const (
	// AlertLagGrowing: the lag age has been trending up for a window.
	AlertLagGrowing AlertKind = "lag-growing"
	// AlertRetentionExpiryRisk: the time to data loss is below the
	// tenant's threshold.
	AlertRetentionExpiryRisk AlertKind = "retention-expiry-risk"
	// AlertRetentionExpired: unconsumed records were deleted.
	AlertRetentionExpired AlertKind = "retention-expired"
)

// Valid reports whether k is one of the kinds.
func (k AlertKind) Valid() bool {
	switch k {
	case AlertLagGrowing, AlertRetentionExpiryRisk, AlertRetentionExpired:
		return true
	}
	return false
}

// AlertState is where an alert is in its life: pending → firing →
// resolved, or pending → resolved (it cleared before firing), or straight
// to firing.
type AlertState string

// The alert states. AlertNone is no state: the key has no active alert.
const (
	AlertNone     AlertState = ""
	AlertPending  AlertState = "pending"
	AlertFiring   AlertState = "firing"
	AlertResolved AlertState = "resolved"
)

// Valid reports whether s is pending, firing or resolved.
func (s AlertState) Valid() bool {
	switch s {
	case AlertPending, AlertFiring, AlertResolved:
		return true
	}
	return false
}

// Active reports whether s is pending or firing.
func (s AlertState) Active() bool { return s == AlertPending || s == AlertFiring }

// AlertKey names the one active alert a kind may have on a group's
// partition.
type AlertKey struct {
	TenantID  string
	Kind      AlertKind
	Group     string
	TopicID   string
	Partition int32
}

// MaxAlertDetailsBytes bounds an alert's details JSON.
const MaxAlertDetailsBytes = 64 << 10

// Alert is one episode of a kind of trouble on a group's partition.
type Alert struct {
	ID string
	AlertKey
	TopicName string
	State     AlertState
	// Details is what the alert says (lag, lag age, growth rate, time to
	// data loss, lost range, advice): a JSON object whose shape the
	// evaluator owns (alerts.Details), stored and returned byte for byte.
	Details    json.RawMessage
	CreatedAt  time.Time // when the condition was first seen this episode
	UpdatedAt  time.Time // of the latest transition or refresh (a change of Details or ClearSince)
	FiredAt    time.Time // zero until it fired
	ResolvedAt time.Time // zero until resolved
	// ClearSince is the evaluator's: while firing, since when the condition
	// has been seen gone (zero while it holds). Stored as given by each
	// transition.
	ClearSince time.Time
}

// AlertTransition asks TransitionAlert to move the active alert of Key from
// From to To.
type AlertTransition struct {
	Key AlertKey
	// TopicName is stored on creation (ignored otherwise).
	TopicName string
	// ID is the alert's id when From is a state; NewID the id of a new
	// alert when From is AlertNone ("" lets the store choose).
	ID    string
	NewID string
	From  AlertState
	To    AlertState
	// Details (a JSON object; nil is {}) and ClearSince replace the stored
	// ones.
	Details    json.RawMessage
	ClearSince time.Time
	// At is the time of the transition (now when zero).
	At time.Time
	// Payload, when set and the state changes, builds the body of the
	// webhook deliveries enqueued with the change, from the alert as stored.
	// It runs inside the transaction: keep it pure. An error aborts the
	// transition and is returned as is.
	Payload func(Alert) ([]byte, error)
}

// AlertQuery selects a page of a tenant's alerts.
type AlertQuery struct {
	States  []AlertState // empty: all
	Group   string       // "": every group
	Limit   int          // ≤ 0: DefaultPageSize; capped at MaxPageSize
	AfterID string       // the last id of the previous page; "" from the newest
}

// Page sizes of the alert and delivery lists.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// PageSize is the number of rows a list asked for limit returns at most.
func PageSize(limit int) int {
	if limit <= 0 {
		return DefaultPageSize
	}
	return min(limit, MaxPageSize)
}

// CheckAlertTransition validates tr and returns it with canonical ids (and
// a new id when creating without one). The legal moves are none → pending,
// none → firing, pending → firing, pending → resolved, firing → resolved,
// and pending → pending, firing → firing (a refresh of the details).
func CheckAlertTransition(tr AlertTransition) (AlertTransition, error) {
	bad := func(format string, args ...any) (AlertTransition, error) {
		return AlertTransition{}, fmt.Errorf("invalid alert transition: %s", fmt.Sprintf(format, args...))
	}
	var err error
	if tr.Key.TenantID, err = CheckNewID("tenant", tr.Key.TenantID); err != nil {
		return AlertTransition{}, err
	}
	if tr.Key.TopicID, err = CheckNewID("topic", tr.Key.TopicID); err != nil {
		return AlertTransition{}, err
	}
	switch {
	case !tr.Key.Kind.Valid():
		return bad("unknown kind %q", tr.Key.Kind)
	case tr.Key.Group == "" || !PlainText(tr.Key.Group):
		return bad("group %q is empty or not UTF-8 text", tr.Key.Group)
	case !PlainText(tr.TopicName):
		return bad("topic name is not UTF-8 text")
	case tr.Key.Partition < 0:
		return bad("negative partition %d", tr.Key.Partition)
	case tr.From != AlertNone && !tr.From.Valid():
		return bad("unknown state %q", tr.From)
	case !tr.To.Valid():
		return bad("unknown state %q", tr.To)
	case !alertTransitions[tr.From][tr.To]:
		from := tr.From
		if from == AlertNone {
			from = "none"
		}
		return bad("%s → %s is not a legal move", from, tr.To)
	}
	if tr.Details, err = checkDetails(tr.Details); err != nil {
		return AlertTransition{}, err
	}
	if tr.From == AlertNone {
		if tr.NewID == "" {
			tr.NewID = NewID()
		} else if tr.NewID, err = CheckNewID("alert", tr.NewID); err != nil {
			return AlertTransition{}, err
		}
	} else if tr.ID, err = CheckNewID("alert", tr.ID); err != nil {
		return AlertTransition{}, err
	}
	return tr, nil
}

// MaxAlertRefreshes bounds the refreshes of one RefreshAlerts call.
const MaxAlertRefreshes = 1000

// CheckAlertRefreshes validates the refreshes of a RefreshAlerts call and
// returns them with canonical ids; the At of each, when zero, is now.
func CheckAlertRefreshes(refreshes []AlertTransition) ([]AlertTransition, error) {
	if len(refreshes) > MaxAlertRefreshes {
		return nil, fmt.Errorf("refresh alerts: %d refreshes, more than %d", len(refreshes), MaxAlertRefreshes)
	}
	out := make([]AlertTransition, len(refreshes))
	now := time.Now()
	seen := make(map[string]bool, len(refreshes))
	for i, tr := range refreshes {
		if tr.From == AlertNone || tr.From != tr.To {
			return nil, fmt.Errorf("invalid alert refresh of %q: from %q to %q is not a refresh", tr.ID, tr.From, tr.To)
		}
		tr, err := CheckAlertTransition(tr)
		if err != nil {
			return nil, err
		}
		if seen[tr.ID] {
			return nil, fmt.Errorf("invalid alert refresh: alert %s named twice", tr.ID)
		}
		seen[tr.ID] = true
		if tr.At.IsZero() {
			tr.At = now
		}
		tr.ClearSince = tr.ClearSince.Truncate(time.Millisecond)
		if !tr.ClearSince.IsZero() {
			tr.ClearSince = tr.ClearSince.UTC()
		}
		out[i] = tr
	}
	return out, nil
}

var alertTransitions = map[AlertState]map[AlertState]bool{
	AlertNone:    {AlertPending: true, AlertFiring: true},
	AlertPending: {AlertPending: true, AlertFiring: true, AlertResolved: true},
	AlertFiring:  {AlertFiring: true, AlertResolved: true},
}

// ApplyAlertTransition returns cur (the stored alert, zero when creating)
// after tr at `at`: state, details and the times.
func ApplyAlertTransition(cur Alert, tr AlertTransition, at time.Time) Alert {
	if tr.From == AlertNone {
		cur = Alert{ID: tr.NewID, AlertKey: tr.Key, TopicName: tr.TopicName, CreatedAt: at}
	}
	cur.State, cur.Details, cur.UpdatedAt, cur.ClearSince = tr.To, tr.Details, at, tr.ClearSince.Truncate(time.Millisecond)
	if !cur.ClearSince.IsZero() {
		cur.ClearSince = cur.ClearSince.UTC()
	}
	if tr.To == AlertFiring && tr.From != AlertFiring {
		cur.FiredAt = at
	}
	if tr.To == AlertResolved {
		cur.ResolvedAt = at
	}
	return cur
}

// checkDetails validates alert details: a JSON object of at most
// MaxAlertDetailsBytes that every driver can store as text; nil is {}.
func checkDetails(d json.RawMessage) (json.RawMessage, error) {
	if len(d) == 0 {
		return json.RawMessage("{}"), nil
	}
	var obj map[string]json.RawMessage
	switch {
	case len(d) > MaxAlertDetailsBytes:
		return nil, fmt.Errorf("invalid alert details: longer than %d bytes", MaxAlertDetailsBytes)
	case !PlainText(string(d)):
		return nil, fmt.Errorf("invalid alert details: not UTF-8 text without NUL")
	case json.Unmarshal(d, &obj) != nil || obj == nil:
		return nil, fmt.Errorf("invalid alert details: not a JSON object")
	}
	return slices.Clone(d), nil
}

// DecideAlertTransition decides tr (From a state) on cur, the tenant's
// alert tr.ID as read inside the write's transaction: ErrConflict when it
// is not in tr.From (another writer moved it first) or is another key's
// alert; otherwise the alert after the transition at `at`.
func DecideAlertTransition(cur Alert, tr AlertTransition, at time.Time) (Alert, error) {
	if cur.AlertKey != tr.Key {
		return Alert{}, fmt.Errorf("alert %s is not the %s alert of group %q on %s/%d: %w",
			cur.ID, tr.Key.Kind, tr.Key.Group, tr.Key.TopicID, tr.Key.Partition, ErrConflict)
	}
	if cur.State != tr.From {
		return Alert{}, fmt.Errorf("alert %s is %s, not %s: %w", cur.ID, cur.State, tr.From, ErrConflict)
	}
	return ApplyAlertTransition(cur, tr, at), nil
}
