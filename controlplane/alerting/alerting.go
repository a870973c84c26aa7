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
package alerting

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
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
	Now    func() time.Time
}

// Alerter samples, evaluates and delivers.
type Alerter struct {
	cfg     Config
	st      store.Store
	metrics *collector
}

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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sender == nil {
		cfg.Sender = NewSender(Guard{}, 10*time.Second, cfg.Now)
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
	t := time.NewTicker(a.cfg.SampleInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		if err := a.Sample(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("lag alerts: sample", "err", err)
		}
		if err := a.Evaluate(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("lag alerts: evaluate", "err", err)
		}
		if round%20 == 0 {
			now := a.cfg.Now()
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
		case <-t.C:
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
	now := a.cfg.Now()
	topics := map[string]*store.Topic{}
	var samples []store.LagSample
	var errs []error
	for _, b := range brokers {
		if !b.Live(now) {
			continue
		}
		rc := sluicev1connect.NewReplicaServiceClient(a.cfg.HTTP, "http://"+b.Address, connect.WithGRPC(),
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
// alert transitions.
func (a *Alerter) Evaluate(ctx context.Context) error {
	now := a.cfg.Now()
	latest, err := a.st.AllLatestLagSamples(ctx)
	if err != nil {
		return err
	}
	active, err := a.st.ListActiveAlerts(ctx)
	if err != nil {
		return err
	}
	// The tenants' thresholds, read once per round.
	stored, err := a.st.ListAlertPolicies(ctx)
	if err != nil {
		return err
	}
	policies := make(map[string]alerts.Policy, len(stored))
	for _, p := range stored {
		pol := a.cfg.Policy
		pol.RiskThreshold = p.ExpiryRiskThreshold
		policies[p.TenantID] = pol
	}
	byKey := map[store.LagKey]map[alerts.Kind]store.Alert{}
	for _, al := range active {
		k := store.LagKey{TenantID: al.TenantID, Group: al.Group, TopicID: al.TopicID, Partition: al.Partition}
		if byKey[k] == nil {
			byKey[k] = map[alerts.Kind]store.Alert{}
		}
		byKey[k][alerts.Kind(al.Kind)] = al
	}
	var rows []metricRow
	var errs []error
	for _, s := range latest {
		hist, err := a.st.ListLagSamples(ctx, s.LagKey, now.Add(-a.cfg.Window), time.Time{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fs := make([]forecast.Sample, 0, len(hist))
		for _, h := range hist {
			if !h.SampledAt.After(now) {
				fs = append(fs, h.Forecast())
			}
		}
		r, err := forecast.Compute(now, fs, a.forecastConfig())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rows = append(rows, metricRow{sample: s, result: r})
		pol, ok := policies[s.TenantID]
		if !ok {
			pol = a.cfg.Policy
		}
		if err := a.decide(ctx, now, s, r, byKey[s.LagKey], pol); err != nil {
			errs = append(errs, err)
		}
		delete(byKey, s.LagKey)
	}
	// Alerts of group × partitions no longer sampled at all (the topic or
	// the group was deleted and its samples pruned): nothing holds, so they
	// resolve like any other.
	for k, stored := range byKey {
		var s store.LagSample
		for _, al := range stored {
			s = store.LagSample{LagKey: k, TopicName: al.TopicName}
		}
		pol, ok := policies[k.TenantID]
		if !ok {
			pol = a.cfg.Policy
		}
		if err := a.decide(ctx, now, s, forecast.Result{Status: forecast.StatusNoData, Now: now}, stored, pol); err != nil {
			errs = append(errs, err)
		}
	}
	a.metrics.update(rows)
	return errors.Join(errs...)
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

// decide runs alerts.Evaluate for one key and stores what changed.
func (a *Alerter) decide(ctx context.Context, now time.Time, s store.LagSample, r forecast.Result, stored map[alerts.Kind]store.Alert, policy alerts.Policy) error {
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
	var errs []error
	apply := func(k alerts.Kind, to store.AlertState, al alerts.Alert, notify bool) {
		details, err := json.Marshal(al.Details)
		if err != nil {
			errs = append(errs, err)
			return
		}
		tr := store.AlertTransition{
			Key:       store.AlertKey{TenantID: s.TenantID, Kind: store.AlertKind(k), Group: s.Group, TopicID: s.TopicID, Partition: s.Partition},
			TopicName: s.TopicName, ID: ids[k], From: states[k], To: to, Details: details, ClearSince: al.ClearSince, At: now,
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
	for k := range stored {
		if seen[k] {
			continue
		}
		if al, ok := next[k]; ok {
			apply(k, store.AlertState(al.State), al, false) // refresh the numbers
		} else {
			// Pending, and gone before it fired: nobody was told, so
			// nobody is told it resolved either.
			apply(k, store.AlertResolved, prev[k], false)
		}
	}
	return errors.Join(errs...)
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
