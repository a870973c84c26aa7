package alerts

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

var subject = Subject{Group: "billing", Topic: "orders", Partition: 3}

func growing(now time.Time, ttl time.Duration) forecast.Result {
	return forecast.Result{
		Status: forecast.StatusExpiring, Now: now, Lag: 1000, LagAge: time.Hour,
		LagAgeFit: forecast.Fit{Slope: 0.5, R2: 0.95}, LagAgeTrend: forecast.TrendGrowing,
		Growth: 0.5, GrowthWindow: time.Hour, GrowthFit: forecast.Fit{Slope: 0.5, R2: 0.95},
		Retention:  forecast.Retention{Time: 7 * 24 * time.Hour},
		TimeToLoss: ttl, ExpiresAt: now.Add(ttl),
	}
}

func caughtUp(now time.Time) forecast.Result {
	return forecast.Result{Status: forecast.StatusCaughtUp, Now: now, LagAgeTrend: forecast.TrendHolding, LagAgeFit: forecast.Fit{R2: 1}}
}

// run feeds results one minute apart and collects every transition.
func run(t *testing.T, p Policy, results ...func(time.Time) forecast.Result) ([]Transition, map[Kind]Alert) {
	t.Helper()
	state := map[Kind]Alert{}
	var all []Transition
	for i, r := range results {
		now := t0.Add(time.Duration(i) * time.Minute)
		var tr []Transition
		state, tr = Evaluate(now, subject, r(now), state, p)
		all = append(all, tr...)
	}
	return all, state
}

func kinds(trs []Transition, k Kind) []State {
	var out []State
	for _, tr := range trs {
		if tr.Kind == k {
			out = append(out, tr.To)
		}
	}
	return out
}

func repeat(n int, f func(time.Time) forecast.Result) []func(time.Time) forecast.Result {
	out := make([]func(time.Time) forecast.Result, n)
	for i := range out {
		out[i] = f
	}
	return out
}

func TestRiskFiresAfterItsForDurationAndResolvesAfterItClears(t *testing.T) {
	p := Policy{RiskThreshold: 24 * time.Hour, RiskFor: 2 * time.Minute, GrowingFor: time.Hour, ResolveAfter: 3 * time.Minute}
	soon := func(now time.Time) forecast.Result { return growing(now, 6*time.Hour) }
	// 4 minutes at risk, then caught up for 5.
	trs, state := run(t, p, append(repeat(4, soon), repeat(5, caughtUp)...)...)
	require.Equal(t, []State{StatePending, StateFiring, StateResolved}, kinds(trs, KindExpiryRisk))
	var fired, resolved Transition
	for _, tr := range trs {
		if tr.Kind == KindExpiryRisk && tr.To == StateFiring {
			fired = tr
		}
		if tr.Kind == KindExpiryRisk && tr.To == StateResolved {
			resolved = tr
		}
	}
	require.Equal(t, t0.Add(2*time.Minute), fired.Alert.FiredAt, "fires once the condition held RiskFor")
	require.Equal(t, 6*time.Hour, fired.Alert.Details.TimeToLoss)
	require.Contains(t, fired.Alert.Details.Summary, `group "billing" on topic "orders" partition 3`)
	require.Contains(t, fired.Alert.Details.Advice, "Add consumers")
	require.Equal(t, t0.Add(4*time.Minute+3*time.Minute), resolved.Alert.ResolvedAt, "resolves once clear for ResolveAfter")
	require.Empty(t, state, "nothing left once resolved")
	// The lag-growing condition held only 4 minutes of its hour: pending,
	// then dropped without firing.
	require.Equal(t, []State{StatePending}, kinds(trs, KindLagGrowing))
}

func TestRiskNeedsTheThreshold(t *testing.T) {
	far := func(now time.Time) forecast.Result { return growing(now, 24*24*time.Hour) } // the 7-day example: 24 days
	trs, _ := run(t, DefaultPolicy(), repeat(10, far)...)
	require.Empty(t, kinds(trs, KindExpiryRisk), "24 days away is no risk at a 24 h threshold")
	tight := Policy{RiskThreshold: 30 * 24 * time.Hour}
	trs, _ = run(t, tight, repeat(3, far)...)
	require.Equal(t, []State{StatePending, StateFiring}, kinds(trs, KindExpiryRisk), "a tenant's 30-day threshold")
}

func TestExpiryDueCountsAsRisk(t *testing.T) {
	due := func(now time.Time) forecast.Result {
		r := growing(now, 0)
		r.Status = forecast.StatusExpiryDue
		return r
	}
	trs, _ := run(t, Policy{RiskFor: time.Minute}, repeat(2, due)...)
	require.Equal(t, []State{StatePending, StateFiring}, kinds(trs, KindExpiryRisk))
}

func TestFlappingConditionDoesNotResolve(t *testing.T) {
	p := Policy{RiskFor: time.Minute, ResolveAfter: 3 * time.Minute}
	soon := func(now time.Time) forecast.Result { return growing(now, time.Hour) }
	// Firing, then clear / at risk / clear / at risk: never clear for 3 min.
	trs, state := run(t, p, soon, soon, caughtUp, soon, caughtUp, caughtUp, soon, caughtUp)
	require.Equal(t, []State{StatePending, StateFiring}, kinds(trs, KindExpiryRisk))
	require.Equal(t, StateFiring, state[KindExpiryRisk].State)
}

func TestLagGrowingNeedsAConfidentTrend(t *testing.T) {
	p := Policy{GrowingFor: 2 * time.Minute}
	noisy := func(now time.Time) forecast.Result {
		r := growing(now, 30*24*time.Hour)
		r.LagAgeFit.R2 = 0.2
		return r
	}
	trs, _ := run(t, p, repeat(5, noisy)...)
	require.Empty(t, kinds(trs, KindLagGrowing), "a trend explaining 20% of the variance is noise")
	steady := func(now time.Time) forecast.Result { return growing(now, 30*24*time.Hour) }
	trs, _ = run(t, p, repeat(5, steady)...)
	require.Equal(t, []State{StatePending, StateFiring}, kinds(trs, KindLagGrowing))
	shrinking := func(now time.Time) forecast.Result {
		r := growing(now, 0)
		r.Status, r.LagAgeTrend, r.LagAgeFit.Slope = forecast.StatusShrinking, forecast.TrendShrinking, -0.3
		return r
	}
	trs, _ = run(t, p, repeat(5, shrinking)...)
	require.Empty(t, trs, "a shrinking lag raises nothing")
}

func TestExpiredFiresAtOnceWithTheLostRange(t *testing.T) {
	lost := func(now time.Time) forecast.Result {
		return forecast.Result{Status: forecast.StatusDataLost, Now: now, Lag: 50, Lost: forecast.LostRange{From: 100, To: 350}}
	}
	trs, state := run(t, DefaultPolicy(), lost, lost, caughtUp)
	require.Equal(t, []State{StatePending, StateFiring, StateResolved}, kinds(trs, KindExpired))
	f := trs[1].Alert
	require.Equal(t, t0, f.FiredAt)
	require.EqualValues(t, 100, f.Details.LostFrom)
	require.EqualValues(t, 350, f.Details.LostTo)
	require.EqualValues(t, 250, f.Details.LostCount)
	require.Contains(t, f.Details.Summary, "deleted 250 records")
	require.Contains(t, f.Details.Summary, "offsets 100 to 349")
	require.Empty(t, state)
}

func TestEvaluateDoesNotChangeItsInput(t *testing.T) {
	prev := map[Kind]Alert{KindExpiryRisk: {Kind: KindExpiryRisk, State: StatePending, Since: t0}}
	next, _ := Evaluate(t0.Add(5*time.Minute), subject, growing(t0.Add(5*time.Minute), time.Hour), prev, DefaultPolicy())
	require.Equal(t, StatePending, prev[KindExpiryRisk].State)
	require.Equal(t, StateFiring, next[KindExpiryRisk].State)
}

// TestRiskFiresAheadAfterAStop is issue 12's case end to end: retention
// 1 h, a caught-up group stops, a 30-minute threshold, samples and
// evaluations every 30 s with the control plane's forecast configuration.
// The alert goes pending 30 minutes ahead of the loss (less one sampling
// interval) and fires RiskFor (1 min) later: at least 28.5 minutes ahead.
// The whole window alone fired it 20 minutes ahead.
func TestRiskFiresAheadAfterAStop(t *testing.T) {
	const step = 30 * time.Second
	stop := t0
	loss := stop.Add(time.Hour)
	var samples []forecast.Sample
	for at := stop.Add(-2 * time.Hour); at.Before(loss); at = at.Add(step) {
		s := forecast.Sample{Time: at, LogEndOffset: 1_000_000 + int64(at.Sub(stop)/time.Second)*10, Retention: forecast.Retention{Time: time.Hour}}
		s.CommittedOffset = min(s.LogEndOffset, 1_000_000) // stopped at the stop
		if at.After(stop) {
			s.LagAge = at.Sub(stop)
		}
		samples = append(samples, s)
	}
	fired := func(cfg forecast.Config) (time.Time, Alert) {
		state := map[Kind]Alert{}
		for i, s := range samples {
			if s.Time.Before(stop) {
				continue
			}
			r, err := forecast.Compute(s.Time, samples[:i+1], cfg)
			require.NoError(t, err)
			var trs []Transition
			state, trs = Evaluate(s.Time, subject, r, state, Policy{RiskThreshold: 30 * time.Minute})
			for _, tr := range trs {
				if tr.Kind == KindExpiryRisk && tr.To == StateFiring {
					return s.Time, tr.Alert
				}
			}
		}
		t.Fatal("never fired")
		return time.Time{}, Alert{}
	}
	at, a := fired(forecast.Config{Window: time.Hour, MinSpan: 5 * time.Minute})
	require.GreaterOrEqual(t, loss.Sub(at), 30*time.Minute-step-time.Minute, "fired %v ahead", loss.Sub(at))
	require.Equal(t, loss, a.Details.ExpiresAt)
	require.InDelta(t, 1, a.Details.GrowthRate, 1e-9)
	require.Equal(t, 5*time.Minute, a.Details.GrowthWindow)
	old, _ := fired(forecast.Config{Window: time.Hour, MinSpan: 5 * time.Minute, ShortWindows: []time.Duration{}})
	require.InDelta(t, 20, loss.Sub(old).Minutes(), 1, "the whole window alone fires it 20 minutes ahead")
	t.Logf("fired %v ahead (the whole window alone: %v)", loss.Sub(at), loss.Sub(old))
}

// TestDetailsGrowthIsCapped: the growth rate an alert reports is the one
// its forecast divided by, capped at 1 s/s (issue 13 saw 1.139 s/s in
// `sluice alerts describe`, the raw slope of a group that rewound its
// offset, while the docs said capped).
func TestDetailsGrowthIsCapped(t *testing.T) {
	var samples []forecast.Sample
	for i := range 121 {
		at := t0.Add(time.Duration(i-120) * 30 * time.Second)
		samples = append(samples, forecast.Sample{
			Time: at, CommittedOffset: 10, LogEndOffset: 1000,
			LagAge:    2*time.Hour + time.Duration(float64(at.Sub(t0))*1.139),
			Retention: forecast.Retention{Time: 3 * time.Hour},
		})
	}
	r, err := forecast.Compute(t0, samples, forecast.Config{})
	require.NoError(t, err)
	require.InDelta(t, 1.139, r.LagAgeFit.Slope, 1e-9)
	_, trs := Evaluate(t0, subject, r, nil, DefaultPolicy())
	require.Equal(t, []State{StatePending}, kinds(trs, KindLagGrowing))
	require.Equal(t, []State{StatePending}, kinds(trs, KindExpiryRisk))
	for _, tr := range trs {
		require.Equal(t, 1.0, tr.Alert.Details.GrowthRate, "%s", tr.Kind)
		if tr.Kind == KindLagGrowing {
			require.Contains(t, tr.Alert.Details.Summary, "grows by 1.00 s every second")
		} else {
			require.Equal(t, time.Hour, tr.Alert.Details.TimeToLoss, "(3 h − 2 h) ÷ 1")
		}
	}
}
