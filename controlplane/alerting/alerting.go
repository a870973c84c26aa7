// Package alerting runs a tenant's lag alerts in the control plane
// (DESIGN.md §8): every SampleInterval it samples each consumer group ×
// partition from the brokers that coordinate the groups
// (ReplicaService.ListGroupLags), stores the samples, forecasts when the
// oldest unconsumed record will expire (package forecast), decides the
// alerts (package alerts) and records their transitions, which enqueue
// the tenant's webhook deliveries in the same transaction; Deliver sends
// them, signed.
//
// Every control-plane replica may run it: samples are keyed by the
// broker's computation time (a replica storing the same sample again
// changes nothing), alert transitions are compare-and-set on the stored
// state, and deliveries are leased to one sender at a time.
//
// A round's cost is bounded (issue 15): the histories are read in chunks
// of store.MaxLagHistoryKeys keys, one query each, and only what is new —
// the Alerter keeps each key's window of samples between rounds (about
// 100 bytes a sample: some 70 MB for 2,000 groups × 3 partitions sampled every
// 30 s over an hour) and re-reads from its newest sample less an overlap,
// which catches samples another replica stores late; every resyncEvery
// rounds it reads every history whole again. Alerts are written only when
// they change (a state change through TransitionAlert with its deliveries;
// new numbers through one RefreshAlerts per 1,000), and a round that runs
// out of its interval stops, says so, and leaves the rest to the next.
package alerting

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/tenants"
)

// Config configures an Alerter.
type Config struct {
	// SampleInterval is how often groups are sampled and alerts decided.
	SampleInterval time.Duration
	// Window is how much history a forecast fits (default 1 h).
	Window time.Duration
	// Keep is how long samples are kept (default twice Window).
	Keep time.Duration
	// Policy holds the thresholds; a tenant's stored policy
	// (store.AlertPolicy) replaces its RiskThreshold for that tenant.
	Policy alerts.Policy
	// BrokerToken is the broker credential ListGroupLags needs.
	BrokerToken string
	// HTTP reaches the brokers (h2c).
	HTTP *http.Client
	// Sender sends deliveries (default: NewSender(Guard{}, 10 s, Now),
	// which refuses loopback).
	Sender *Sender
	Logger *slog.Logger
	// Clock is the time samples, forecasts and deliveries are stamped
	// with, and the rounds tick on (clock.Real when nil); a round's
	// work budget is on the real clock.
	Clock clock.Clock
}

// Alerter samples, evaluates and delivers.
type Alerter struct {
	cfg     Config
	st      store.Store
	metrics *collector

	mu     sync.Mutex   // one evaluation at a time; guards the fields below
	resume store.LagKey // where the next evaluation starts (zero: at the first key)
	// hist holds each key's history over the window as last read, so that a
	// round reads only what is new (histories); evals counts evaluations,
	// every resyncEvery of which reads every history whole again.
	hist   map[store.LagKey]*history
	histAt time.Time // the now hist was read up to; a clock going back starts over
	evals  int
}

// history is one key's samples over the window, oldest first, and the time
// of the newest one read.
type history struct {
	samples []forecast.Sample
	through time.Time
}

const (
	// resyncEvery: every so many evaluations read every history whole, as
	// if none were kept, so that a sample stored late beyond the overlap
	// (by another replica) counts within that many rounds.
	resyncEvery = 20
	// minOverlap: a round re-reads at least this much before the newest
	// sample it has of a key (more with a long interval: overlap), for
	// samples other replicas store after a newer one was read.
	minOverlap = 2 * time.Minute
)

// New makes an Alerter.
func New(st store.Store, cfg Config) *Alerter {
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = 30 * time.Second
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Hour
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 2 * cfg.Window
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Sender == nil {
		cfg.Sender = NewSender(Guard{}, 10*time.Second, cfg.Clock.Now)
	}
	return &Alerter{cfg: cfg, st: st, metrics: newCollector()}
}

// Collector exports the latest evaluation as Prometheus metrics.
func (a *Alerter) Collector() *collector { return a.metrics }

// Run samples and evaluates every SampleInterval, and delivers every
// second, until ctx ends.
func (a *Alerter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { a.deliverLoop(ctx) })
	t := a.cfg.Clock.NewTicker(a.cfg.SampleInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		// A round (sampling and evaluation) is bounded by the interval:
		// the next one is due then.
		begin := time.Now()
		if err := a.Sample(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("lag alerts: sample", "err", err)
		}
		if _, err := a.evaluate(ctx, begin.Add(a.cfg.SampleInterval)); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("lag alerts: evaluate", "err", err)
		}
		a.metrics.round(time.Since(begin))
		if round%20 == 0 {
			now := a.cfg.Clock.Now()
			if _, err := a.st.PruneLagSamples(ctx, now.Add(-a.cfg.Keep), 2000); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("lag alerts: prune samples", "err", err)
			}
			if _, err := a.st.PruneDeliveries(ctx, now.Add(-7*24*time.Hour)); err != nil && ctx.Err() == nil {
				a.cfg.Logger.Warn("lag alerts: prune deliveries", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C():
		}
	}
}

// Sample asks every live broker for the lag of the groups it coordinates
// and stores one sample per group × partition.
func (a *Alerter) Sample(ctx context.Context) error {
	brokers, err := a.st.ListBrokers(ctx)
	if err != nil {
		return err
	}
	now := a.cfg.Clock.Now()
	topics := map[string]*store.Topic{}
	var samples []store.LagSample
	var errs []error
	for _, b := range brokers {
		if !b.Live(now) {
			continue
		}
		rc := sluicev1connect.NewReplicaServiceClient(a.cfg.HTTP, endpoint.URL(b.Address, "http"), connect.WithGRPC(),
			connect.WithInterceptors(tenants.Bearer(a.cfg.BrokerToken)))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := rc.ListGroupLags(cctx, connect.NewRequest(&sluicev1.ListGroupLagsRequest{}))
		cancel()
		if err != nil {
			if code := connect.CodeOf(err); code != connect.CodeFailedPrecondition && code != connect.CodeUnavailable {
				errs = append(errs, err)
			}
			continue
		}
		at := res.Msg.GetComputeTime().AsTime()
		for _, l := range res.Msg.GetLags() {
			t, ok := topics[l.GetTopicId()]
			if !ok {
				got, err := a.st.GetTopicByID(ctx, l.GetTopicId())
				if err != nil {
					topics[l.GetTopicId()] = nil // deleted since
					continue
				}
				t = &got
				topics[l.GetTopicId()] = t
			}
			if t == nil || t.TenantID != l.GetTenantId() {
				continue
			}
			samples = append(samples, store.LagSample{
				LagKey:    store.LagKey{TenantID: l.GetTenantId(), Group: l.GetGroup(), TopicID: l.GetTopicId(), Partition: l.GetPartition()},
				TopicName: t.Name, SampledAt: at,
				CommittedOffset: l.GetCommittedOffset(), LogStartOffset: l.GetLogStartOffset(), LogEndOffset: l.GetHighWatermark(),
				LagMessages: l.GetLagMessages(), LagAgeMs: l.GetLagAgeMs(),
				RetentionMs: t.Config.RetentionMs, RetentionBytes: retentionBytes(t.Config.RetentionBytes, l.GetPartitionBytes()),
				PartitionBytes: l.GetPartitionBytes(),
			})
		}
	}
	if len(samples) > 0 {
		if err := a.st.AddLagSamples(ctx, samples); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Evaluate forecasts every sampled group × partition and records the
// alert transitions, within one SampleInterval of the real clock (see
// evaluate).
func (a *Alerter) Evaluate(ctx context.Context) error {
	_, err := a.evaluate(ctx, time.Now().Add(a.cfg.SampleInterval))
	return err
}

// evaluate is Evaluate with the round's budget. The histories are read
// store.MaxLagHistoryKeys keys at a time (only what is new since the last
// round: see histories), and once the real clock passes
// deadline the round reads no more: the keys it leaves keep their alerts as
// stored and their metrics as last exported, the next round starts with
// them, and the round says how many it left (the returned count, the
// sluice_lag_evaluation_skipped metric and a warning). Alert refreshes (the
// numbers of an alert whose state does not change) are written only when
// they change something but the evaluation time, in batches
// (store.RefreshAlerts); state changes go one by one through
// TransitionAlert, with their deliveries.
func (a *Alerter) evaluate(ctx context.Context, deadline time.Time) (skipped int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Clock.Now()
	latest, err := a.st.AllLatestLagSamples(ctx)
	if err != nil {
		return 0, err
	}
	active, err := a.st.ListActiveAlerts(ctx)
	if err != nil {
		return 0, err
	}
	// The tenants' thresholds, read once per round.
	stored, err := a.st.ListAlertPolicies(ctx)
	if err != nil {
		return 0, err
	}
	policies := make(map[string]alerts.Policy, len(stored))
	for _, p := range stored {
		pol := a.cfg.Policy
		pol.RiskThreshold = p.ExpiryRiskThreshold
		policies[p.TenantID] = pol
	}
	policy := func(tenantID string) alerts.Policy {
		if pol, ok := policies[tenantID]; ok {
			return pol
		}
		return a.cfg.Policy
	}
	byKey := map[store.LagKey]map[alerts.Kind]store.Alert{}
	for _, al := range active {
		k := store.LagKey{TenantID: al.TenantID, Group: al.Group, TopicID: al.TopicID, Partition: al.Partition}
		if byKey[k] == nil {
			byKey[k] = map[alerts.Kind]store.Alert{}
		}
		byKey[k][alerts.Kind(al.Kind)] = al
	}
	// Start where the previous round stopped, so that every key is evaluated
	// even when rounds run out of time.
	first, _ := slices.BinarySearchFunc(latest, a.resume, func(s store.LagSample, k store.LagKey) int { return compareLagKeys(s.LagKey, k) })
	order := append(slices.Clip(latest[first:]), latest[:first]...)
	a.resume = store.LagKey{}
	if a.evals%resyncEvery == 0 {
		a.hist = nil
	}
	a.evals++
	fc := a.forecastConfig()
	var (
		rows      []metricRow
		refreshes []store.AlertTransition
		errs      []error
		keep      = map[store.LagKey]bool{} // not evaluated this round
	)
	leave := func(rest []store.LagSample) {
		for _, s := range rest {
			keep[s.LagKey] = true
			delete(byKey, s.LagKey)
		}
	}
	for start := 0; start < len(order); start += store.MaxLagHistoryKeys {
		if start > 0 && time.Now().After(deadline) {
			skipped = len(order) - start
			a.resume = order[start].LagKey
			leave(order[start:])
			break
		}
		chunk := order[start:min(len(order), start+store.MaxLagHistoryKeys)]
		keys := make([]store.LagKey, len(chunk))
		for i, s := range chunk {
			keys[i] = s.LagKey
		}
		hists, err := a.histories(ctx, keys, now)
		if err != nil {
			errs = append(errs, err)
			leave(chunk)
			continue
		}
		for i, s := range chunk {
			r, err := forecast.Compute(now, hists[i], fc)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			rows = append(rows, metricRow{sample: s, result: r})
			rs, err := a.decide(ctx, now, s, r, byKey[s.LagKey], policy(s.TenantID))
			refreshes = append(refreshes, rs...)
			if err != nil {
				errs = append(errs, err)
			}
			delete(byKey, s.LagKey)
		}
	}
	// Alerts of group × partitions no longer sampled at all (the topic or
	// the group was deleted and its samples pruned): nothing holds, so they
	// resolve like any other.
	for k, stored := range byKey {
		var s store.LagSample
		for _, al := range stored {
			s = store.LagSample{LagKey: k, TopicName: al.TopicName}
		}
		rs, err := a.decide(ctx, now, s, forecast.Result{Status: forecast.StatusNoData, Now: now}, stored, policy(k.TenantID))
		refreshes = append(refreshes, rs...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	for trs := range slices.Chunk(refreshes, store.MaxAlertRefreshes) {
		applied, err := a.st.RefreshAlerts(ctx, trs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for i, ok := range applied {
			if !ok {
				// Another replica moved it first: it decides this one.
				errs = append(errs, fmt.Errorf("refresh alert %s: %w", trs[i].ID, store.ErrConflict))
			}
		}
	}
	// Forget the histories of keys no longer sampled.
	if len(a.hist) > len(latest) {
		live := make(map[store.LagKey]bool, len(latest))
		for _, s := range latest {
			live[s.LagKey] = true
		}
		for k := range a.hist {
			if !live[k] {
				delete(a.hist, k)
			}
		}
	}
	a.metrics.update(rows, keep, skipped)
	if skipped > 0 {
		a.cfg.Logger.Warn("lag alerts: the round ran out of its interval; the next one starts with the rest",
			"evaluated", len(order)-skipped, "skipped", skipped, "interval", a.cfg.SampleInterval)
	}
	return skipped, errors.Join(errs...)
}

// histories returns the history of each key over the window ending at
// now, oldest first: what ListLagHistories(keys, now − Window, now) returns,
// read in at most two queries, and from the store only for what this
// Alerter does not hold yet. Keys it has a history of are read from the
// newest sample it has of any of them less the overlap, and those samples
// replace what it held from then on; the others whole. Samples older than
// the window are dropped.
func (a *Alerter) histories(ctx context.Context, keys []store.LagKey, now time.Time) ([][]forecast.Sample, error) {
	if a.hist == nil || now.Before(a.histAt) {
		a.hist = map[store.LagKey]*history{}
	}
	a.histAt = now
	from := now.Add(-a.cfg.Window).Truncate(time.Millisecond) // the store keeps milliseconds
	overlap := max(minOverlap, 4*a.cfg.SampleInterval)
	var (
		whole, tail []int
		since       = now
	)
	for i, k := range keys {
		if h := a.hist[k]; h != nil && !h.through.Before(from) {
			tail = append(tail, i)
			if t := h.through.Add(-overlap); t.Before(since) {
				since = t
			}
		} else {
			whole = append(whole, i)
		}
	}
	read := func(idx []int, since time.Time) error {
		if len(idx) == 0 {
			return nil
		}
		if since.Before(from) {
			since = from
		}
		since = since.Truncate(time.Millisecond)
		ks := make([]store.LagKey, len(idx))
		for j, i := range idx {
			ks[j] = keys[i]
		}
		got, err := a.st.ListLagHistories(ctx, ks, since, now)
		if err != nil {
			return err
		}
		for j, k := range ks {
			h := a.hist[k]
			if h == nil {
				h = &history{}
				a.hist[k] = h
			}
			cut, _ := slices.BinarySearchFunc(h.samples, since, func(s forecast.Sample, t time.Time) int { return s.Time.Compare(t) })
			h.samples = append(h.samples[:cut], got[j]...)
			if n := len(got[j]); n > 0 && got[j][n-1].Time.After(h.through) {
				h.through = got[j][n-1].Time
			}
		}
		return nil
	}
	if err := read(whole, from); err != nil {
		return nil, err
	}
	if err := read(tail, since); err != nil {
		return nil, err
	}
	out := make([][]forecast.Sample, len(keys))
	for i, k := range keys {
		h := a.hist[k]
		old, _ := slices.BinarySearchFunc(h.samples, from, func(s forecast.Sample, t time.Time) int { return s.Time.Compare(t) })
		h.samples = h.samples[old:]
		out[i] = slices.Clip(h.samples) // read up to this now or an earlier one: none is newer
	}
	return out, nil
}

// compareLagKeys orders keys as the store orders AllLatestLagSamples:
// tenant id, group, topic id, partition.
func compareLagKeys(a, b store.LagKey) int {
	return cmp.Or(cmp.Compare(a.TenantID, b.TenantID), cmp.Compare(a.Group, b.Group),
		cmp.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
}

// forecastConfig is the forecast's configuration for the sampling interval
// Δ: a trend from 10 samples over at least min(window ÷ 4, 10 Δ), and short
// windows of 5 and 15 minutes, or 10 and 30 Δ when longer, so that a short
// window holds the 10 samples it needs to be trusted (docs/alerts.md).
func (a *Alerter) forecastConfig() forecast.Config {
	iv := a.cfg.SampleInterval
	return forecast.Config{
		Window:       a.cfg.Window,
		MinSpan:      min(a.cfg.Window/4, 10*iv),
		ShortWindows: []time.Duration{max(5*time.Minute, 10*iv), max(15*time.Minute, 30*iv)},
	}
}

// decide runs alerts.Evaluate for one key and stores its state changes;
// it returns the refreshes to store (alerts whose state holds but whose
// numbers changed), which the caller batches.
func (a *Alerter) decide(ctx context.Context, now time.Time, s store.LagSample, r forecast.Result, stored map[alerts.Kind]store.Alert, policy alerts.Policy) ([]store.AlertTransition, error) {
	prev := map[alerts.Kind]alerts.Alert{}
	for k, al := range stored {
		prev[k] = alerts.Alert{Kind: k, State: alerts.State(al.State), Since: al.CreatedAt, FiredAt: al.FiredAt, ClearSince: al.ClearSince}
	}
	next, trs := alerts.Evaluate(now, alerts.Subject{Group: s.Group, Topic: s.TopicName, Partition: s.Partition}, r, prev, policy)
	ids := map[alerts.Kind]string{}
	states := map[alerts.Kind]store.AlertState{}
	for k, al := range stored {
		ids[k], states[k] = al.ID, al.State
	}
	var (
		errs []error
		out  []store.AlertTransition
	)
	transition := func(k alerts.Kind, to store.AlertState, al alerts.Alert) store.AlertTransition {
		details, err := json.Marshal(al.Details)
		if err != nil {
			errs = append(errs, err)
			return store.AlertTransition{}
		}
		return store.AlertTransition{
			Key:       store.AlertKey{TenantID: s.TenantID, Kind: store.AlertKind(k), Group: s.Group, TopicID: s.TopicID, Partition: s.Partition},
			TopicName: s.TopicName, ID: ids[k], From: states[k], To: to, Details: details, ClearSince: al.ClearSince, At: now,
		}
	}
	apply := func(k alerts.Kind, to store.AlertState, al alerts.Alert, notify bool) {
		tr := transition(k, to, al)
		if tr.To == "" {
			return
		}
		if notify {
			tr.Payload = func(stored store.Alert) ([]byte, error) { return json.Marshal(newEvent(stored)) }
		}
		got, err := a.st.TransitionAlert(ctx, tr)
		if err != nil {
			errs = append(errs, err)
			return
		}
		ids[k], states[k] = got.ID, got.State
	}
	seen := map[alerts.Kind]bool{}
	for _, tr := range trs {
		seen[tr.Kind] = true
		// Pending is not announced: only firing and resolved are news.
		apply(tr.Kind, store.AlertState(tr.To), tr.Alert, tr.To != alerts.StatePending)
	}
	for k, cur := range stored {
		if seen[k] {
			continue
		}
		if al, ok := next[k]; ok {
			// The state holds: refresh the numbers, if they changed.
			if unchanged(cur, al) {
				continue
			}
			if tr := transition(k, store.AlertState(al.State), al); tr.To != "" {
				out = append(out, tr)
			}
		} else {
			// Pending, and gone before it fired: nobody was told, so
			// nobody is told it resolved either.
			apply(k, store.AlertResolved, prev[k], false)
		}
	}
	return out, errors.Join(errs...)
}

// unchanged reports whether storing al over cur, in the same state, would
// change nothing but the evaluation time (alerts.Details.ForecastedNow, and
// the UpdatedAt it would bump): then it is not written.
func unchanged(cur store.Alert, al alerts.Alert) bool {
	if !cur.ClearSince.Equal(al.ClearSince.Truncate(time.Millisecond)) {
		return false
	}
	var old alerts.Details
	if err := json.Unmarshal(cur.Details, &old); err != nil {
		return false
	}
	d := al.Details
	old.ForecastedNow, d.ForecastedNow = time.Time{}, time.Time{}
	was, err1 := json.Marshal(old)
	is, err2 := json.Marshal(d)
	return err1 == nil && err2 == nil && bytes.Equal(was, is)
}

// Event is the JSON body a webhook receives for an alert state change.
type Event struct {
	Type      string `json:"type"` // "alert", or "test" for a webhook test
	AlertID   string `json:"alert_id"`
	TenantID  string `json:"tenant_id"`
	Kind      string `json:"kind"`
	State     string `json:"state"`
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Details: lag, lag age, growth rate, time to data loss, lost range,
	// summary and advice (alerts.Details).
	Details   json.RawMessage `json:"details"`
	CreatedAt time.Time       `json:"created_at"`
	FiredAt   time.Time       `json:"fired_at,omitzero"`
	Resolved  time.Time       `json:"resolved_at,omitzero"`
}

func newEvent(al store.Alert) Event {
	return Event{
		Type: "alert", AlertID: al.ID, TenantID: al.TenantID, Kind: string(al.Kind), State: string(al.State),
		Group: al.Group, Topic: al.TopicName, Partition: al.Partition,
		Details: al.Details, CreatedAt: al.CreatedAt, FiredAt: al.FiredAt, Resolved: al.ResolvedAt,
	}
}

// retentionBytes is the retention.bytes a sample carries: a size-based
// horizon needs the partition's size, which brokers older than this one do
// not report; without it the sample leaves the limit out (the time-based
// forecast still applies) rather than be refused.
func retentionBytes(limit, partitionBytes int64) int64 {
	if partitionBytes <= 0 {
		return -1
	}
	return limit
}
