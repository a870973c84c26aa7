// Package alerts decides a tenant's lag alerts from forecasts (package
// forecast): for each consumer group × partition, three kinds of alert,
// each with the states pending → firing → resolved.
//
//   - lag-growing: the age of the oldest unconsumed record has been
//     trending up (a confident least-squares fit) for Policy.GrowingFor.
//   - retention-expiry-risk: the oldest unconsumed record will expire
//     within Policy.RiskThreshold (default 24 h), or is due now, for
//     Policy.RiskFor.
//   - retention-expired: unconsumed records were deleted by retention:
//     fires at once, with the lost offset range, since the loss has
//     happened.
//
// A condition must hold for the kind's "for" duration before a pending
// alert fires (so one noisy sample does not page anyone), and must be
// gone for Policy.ResolveAfter before a firing alert resolves (so an alert
// does not flap). An alert that resolves while pending is dropped without
// ever firing. Evaluate is pure: the caller stores the states and
// delivers the transitions (webhooks, API).
package alerts

import (
	"fmt"
	"time"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// Kind is what an alert is about.
type Kind string

const (
	KindLagGrowing  Kind = "lag-growing"
	KindExpiryRisk  Kind = "retention-expiry-risk"
	KindExpired     Kind = "retention-expired"
	minConfidenceR2      = 0.5 // a lag-age trend must explain at least half the variance
)

// Kinds lists every kind, in the order Evaluate considers them.
var Kinds = []Kind{KindLagGrowing, KindExpiryRisk, KindExpired}

// State is where an alert is in its life.
type State string

const (
	StatePending  State = "pending"
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// Policy holds a tenant's thresholds.
type Policy struct {
	// RiskThreshold: retention-expiry-risk when the time to data loss is
	// below it (default 24 h).
	RiskThreshold time.Duration
	// GrowingFor and RiskFor: how long the condition must hold before a
	// pending alert fires (defaults 15 min and 1 min).
	GrowingFor, RiskFor time.Duration
	// ResolveAfter: how long the condition must be gone before a firing
	// alert resolves (default 5 min).
	ResolveAfter time.Duration
}

// DefaultPolicy returns the defaults.
func DefaultPolicy() Policy {
	return Policy{RiskThreshold: 24 * time.Hour, GrowingFor: 15 * time.Minute, RiskFor: time.Minute, ResolveAfter: 5 * time.Minute}
}

func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.RiskThreshold <= 0 {
		p.RiskThreshold = d.RiskThreshold
	}
	if p.GrowingFor <= 0 {
		p.GrowingFor = d.GrowingFor
	}
	if p.RiskFor <= 0 {
		p.RiskFor = d.RiskFor
	}
	if p.ResolveAfter <= 0 {
		p.ResolveAfter = d.ResolveAfter
	}
	return p
}

// Alert is the remembered state of one alert of one kind on one group ×
// partition.
type Alert struct {
	Kind  Kind
	State State
	// Since is when the condition was first seen (pending) this time.
	Since time.Time
	// FiredAt is when it fired; zero while pending.
	FiredAt time.Time
	// ClearSince is when the condition was last seen gone while firing;
	// zero while it holds.
	ClearSince time.Time
	// ResolvedAt is when it resolved.
	ResolvedAt time.Time
	Details    Details
}

// Details describe an alert for people: the numbers behind it and what to
// do.
type Details struct {
	Lag           int64         `json:"lag_messages"`
	LagAge        time.Duration `json:"lag_age_ns"`
	GrowthRate    float64       `json:"lag_age_growth_seconds_per_second"`
	GrowthWindow  time.Duration `json:"lag_age_growth_window_ns,omitempty"`
	TimeToLoss    time.Duration `json:"time_to_data_loss_ns,omitempty"`
	ExpiresAt     time.Time     `json:"expires_at,omitzero"`
	Retention     time.Duration `json:"retention_ns,omitempty"`
	LostFrom      int64         `json:"lost_from_offset,omitempty"`
	LostTo        int64         `json:"lost_to_offset,omitempty"` // exclusive
	LostCount     int64         `json:"lost_records,omitempty"`
	Status        string        `json:"forecast_status"`
	Summary       string        `json:"summary"`
	Advice        string        `json:"advice"`
	ConsumerRate  float64       `json:"consumption_records_per_second"`
	ProducerRate  float64       `json:"production_records_per_second"`
	GrowthFitR2   float64       `json:"growth_fit_r2"`
	SampledAt     time.Time     `json:"sampled_at,omitzero"`
	ForecastedNow time.Time     `json:"evaluated_at"`
}

// Subject names the group × partition an evaluation is about, for the
// texts.
type Subject struct {
	Group, Topic string
	Partition    int32
}

// Transition is a state change Evaluate decided.
type Transition struct {
	Kind     Kind
	From, To State // From is "" for a new alert
	Alert    Alert // the alert after the change
}

// Evaluate decides the alerts of one group × partition from a forecast.
// prev holds the current (not resolved) alerts by kind; the result holds
// the alerts to keep (not resolved ones) and the transitions to deliver,
// in Kinds order.
func Evaluate(now time.Time, s Subject, r forecast.Result, prev map[Kind]Alert, p Policy) (map[Kind]Alert, []Transition) {
	p = p.withDefaults()
	next := map[Kind]Alert{}
	var out []Transition
	for _, k := range Kinds {
		holds, d := condition(k, s, r, p)
		a, had := prev[k]
		switch {
		case !had && holds:
			a = Alert{Kind: k, State: StatePending, Since: now, Details: d}
			out = append(out, Transition{Kind: k, To: StatePending, Alert: a})
			if k == KindExpired { // the loss happened: no waiting
				a = fire(a, now)
				out = append(out, Transition{Kind: k, From: StatePending, To: StateFiring, Alert: a})
			}
			next[k] = a
		case !had:
			// Nothing to say.
		case a.State == StatePending && holds:
			a.Details = d
			if now.Sub(a.Since) >= forDuration(k, p) {
				a = fire(a, now)
				out = append(out, Transition{Kind: k, From: StatePending, To: StateFiring, Alert: a})
			}
			next[k] = a
		case a.State == StatePending:
			// Gone before it fired: forget it quietly.
		case a.State == StateFiring && holds:
			a.Details, a.ClearSince = d, time.Time{}
			next[k] = a
		case a.State == StateFiring:
			if a.ClearSince.IsZero() {
				a.ClearSince = now
			}
			if now.Sub(a.ClearSince) >= p.ResolveAfter || k == KindExpired {
				a.State, a.ResolvedAt = StateResolved, now
				a.Details.ForecastedNow = now
				out = append(out, Transition{Kind: k, From: StateFiring, To: StateResolved, Alert: a})
				continue
			}
			next[k] = a
		}
	}
	return next, out
}

func fire(a Alert, now time.Time) Alert {
	a.State, a.FiredAt = StateFiring, now
	return a
}

func forDuration(k Kind, p Policy) time.Duration {
	switch k {
	case KindLagGrowing:
		return p.GrowingFor
	case KindExpiryRisk:
		return p.RiskFor
	}
	return 0
}

// condition says whether kind k's condition holds in r, and describes it.
func condition(k Kind, s Subject, r forecast.Result, p Policy) (bool, Details) {
	d := Details{
		Lag: r.Lag, LagAge: r.LagAge, GrowthRate: r.Growth, GrowthWindow: r.GrowthWindow, GrowthFitR2: r.GrowthFit.R2,
		Retention: r.Retention.Time, Status: r.Status.String(), SampledAt: r.SampledAt, ForecastedNow: r.Now,
		ConsumerRate: r.ConsumptionRate, ProducerRate: r.ProductionRate,
	}
	where := fmt.Sprintf("group %q on topic %q partition %d", s.Group, s.Topic, s.Partition)
	add := "Add consumers to the group (at most one per partition does work: add partitions if the group already has one per partition), make each record's processing faster, or raise the topic's retention."
	switch k {
	case KindLagGrowing:
		holds := r.LagAgeTrend == forecast.TrendGrowing && r.LagAgeFit.R2 >= minConfidenceR2 && r.LagAge > 0
		d.Summary = fmt.Sprintf("The consumer %s is falling behind: its oldest unconsumed record is %s old and that age grows by %.2f s every second.",
			where, r.LagAge.Round(time.Second), r.Growth)
		d.Advice = "The group consumes more slowly than the topic is written. " + add
		return holds, d
	case KindExpiryRisk:
		holds := r.Status == forecast.StatusExpiryDue || (r.Status == forecast.StatusExpiring && r.TimeToLoss < p.RiskThreshold)
		d.TimeToLoss, d.ExpiresAt = r.TimeToLoss, r.ExpiresAt
		d.Summary = fmt.Sprintf("Unconsumed records of the %s will be deleted by retention in %s (at %s) unless it catches up.",
			where, r.TimeToLoss.Round(time.Second), r.ExpiresAt.UTC().Format(time.RFC3339))
		d.Advice = add
		return holds, d
	case KindExpired:
		holds := r.Status == forecast.StatusDataLost && r.Lost.Count() > 0
		d.LostFrom, d.LostTo, d.LostCount = r.Lost.From, r.Lost.To, r.Lost.Count()
		d.Summary = fmt.Sprintf("Retention deleted %d records the %s had not consumed: offsets %d to %d.",
			r.Lost.Count(), where, r.Lost.From, r.Lost.To-1)
		d.Advice = "Those records are gone. To stop it happening again: " + add
		return holds, d
	}
	return false, d
}
