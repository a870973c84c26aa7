package forecast_test

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// Regime changes: scripted consumers that stop, slow down further or
// recover, sampled and forecast as the control plane does (30 s samples, a
// 1 h window, trends from 5 minutes of samples), against the truth the
// script knows.

// phase is a stretch of time in which the group consumes ratio × what is
// produced: 1 keeps the lag age where it is, 0 is stopped (the lag age
// grows 1 s per s), above 1 catches up.
type phase struct {
	d     time.Duration
	ratio float64
}

// script is a group on a partition written at a steady 100 records/s.
type script struct {
	start       time.Time     // when the first phase starts and the first sample is taken
	step        time.Duration // sampling interval
	age0        time.Duration // lag age at start
	commitEvery time.Duration // the group commits this often (0: continuously)
	ret         time.Duration // retention.ms
	phases      []phase       // the last one lasts for ever
	// noise, when set, is added to each sample's lag age (clamped at 0).
	noise func() time.Duration
}

const scriptProduce = 100.0 // records/s

// age is the lag age the group's consumed position has at t (in seconds
// after start): the age of the oldest record it has not consumed.
func (s script) age(t float64) float64 {
	a, at := s.age0.Seconds(), 0.0
	for i, p := range s.phases {
		d := p.d.Seconds()
		if i == len(s.phases)-1 {
			d = math.Inf(1)
		}
		dt := math.Min(d, t-at)
		a = math.Max(0, a+(1-p.ratio)*dt)
		if at += dt; at >= t {
			break
		}
	}
	return a
}

// committedAge is the lag age of the committed offset at t: that of the
// position committed last, aged since.
func (s script) committedAge(t float64) float64 {
	if s.commitEvery <= 0 {
		return s.age(t)
	}
	p := s.commitEvery.Seconds()
	tc := math.Floor(t/p) * p
	return s.age(tc) + (t - tc)
}

// samples returns the samples up to end.
func (s script) samples(end time.Time) []forecast.Sample {
	origin := s.start.Add(-60 * day)
	off := func(t time.Time) int64 { return int64(math.Round(scriptProduce * t.Sub(origin).Seconds())) }
	var out []forecast.Sample
	for t := s.start; !t.After(end); t = t.Add(s.step) {
		age := time.Duration(math.Round(s.committedAge(t.Sub(s.start).Seconds())*1e3)) * time.Millisecond
		if s.noise != nil {
			age = max(0, age+s.noise())
		}
		leo := off(t)
		committed := leo
		if age > 0 {
			committed = min(leo-1, off(t.Add(-age)))
		}
		start := min(committed, off(t.Add(-s.ret)))
		out = append(out, forecast.Sample{
			Time: t, CommittedOffset: committed, LogStartOffset: start, LogEndOffset: leo,
			LagAge: age, PartitionBytes: (leo - start) * recordBytes, Retention: forecast.Retention{Time: s.ret},
		})
	}
	return out
}

// lossAt is when the oldest unconsumed record truly reaches the retention,
// by the script, searched from `from` to a day later at 1 s resolution (zero
// when it never does).
func (s script) lossAt(from time.Time) time.Time {
	t0 := from.Sub(s.start).Seconds()
	for t := math.Ceil(t0); t < t0+86400; t++ {
		if s.committedAge(t) >= s.ret.Seconds() {
			return s.start.Add(time.Duration(t) * time.Second)
		}
	}
	return time.Time{}
}

// recent returns the samples of the last window up to the latest, as the
// control plane reads them from its store (the forecast ignores older ones,
// but checks every sample it is given).
func recent(samples []forecast.Sample, window time.Duration) []forecast.Sample {
	if len(samples) == 0 {
		return samples
	}
	from := samples[len(samples)-1].Time.Add(-window - time.Minute)
	i := sort.Search(len(samples), func(i int) bool { return !samples[i].Time.Before(from) })
	return samples[i:]
}

// controlPlane is the forecast configuration the control plane uses with
// its defaults (controlplane/alerting: --lag-window 1h, 30 s samples).
var controlPlane = forecast.Config{Window: time.Hour, MinSpan: 5 * time.Minute}

// wholeWindowOnly is the same with no short windows: the forecast before
// short windows existed.
var wholeWindowOnly = forecast.Config{Window: time.Hour, MinSpan: 5 * time.Minute, ShortWindows: []time.Duration{}}

// atRisk reports whether r is below threshold (or due), as the
// retention-expiry-risk alert decides.
func atRisk(r forecast.Result, threshold time.Duration) bool {
	return r.Status == forecast.StatusExpiryDue || (r.Status == forecast.StatusExpiring && r.TimeToLoss < threshold)
}

// firstAtRisk evaluates every step from `from` for a day and returns the
// first evaluation at risk, or zero.
func firstAtRisk(t *testing.T, s script, cfg forecast.Config, from time.Time, threshold time.Duration) (time.Time, forecast.Result) {
	t.Helper()
	all := s.samples(from.Add(day))
	n := 0
	for e := from; e.Before(from.Add(day)); e = e.Add(s.step) {
		for n < len(all) && !all[n].Time.After(e) {
			n++
		}
		r, err := forecast.Compute(e, recent(all[:n], time.Hour), cfg)
		require.NoError(t, err)
		if atRisk(r, threshold) {
			return e, r
		}
	}
	return time.Time{}, forecast.Result{}
}

// TestForecastRegimeStopAfterCaughtUp reproduces issue 12's numbers: a
// caught-up group on a topic with 1 h retention stops. The whole window's
// slope lagged (10 minutes after the stop it forecast 10 h 55 min for a
// loss 50 minutes away, and a 30-minute threshold was crossed 21 minutes
// ahead); once the 5-minute window holds only the stop the forecast is
// exact, and the 30-minute threshold is crossed 30 minutes ahead, to
// within one sampling interval.
func TestForecastRegimeStopAfterCaughtUp(t *testing.T) {
	t.Parallel()
	for _, commitEvery := range []time.Duration{0, 5 * time.Second, 7 * time.Second} {
		stop := now
		s := script{
			start: stop.Add(-2 * time.Hour), step: 30 * time.Second, commitEvery: commitEvery, ret: time.Hour,
			phases: []phase{{2 * time.Hour, 1}, {0, 0}},
		}
		loss := s.lossAt(stop)
		require.WithinDuration(t, stop.Add(time.Hour), loss, commitEvery+time.Second, "commit every %v", commitEvery)

		// 10 minutes after the stop.
		at := stop.Add(10 * time.Minute)
		r10, err := forecast.Compute(at, s.samples(at), controlPlane)
		r := r10
		require.NoError(t, err)
		require.Equal(t, forecast.StatusExpiring, r.Status)
		requireDuration(t, loss.Sub(at), r.TimeToLoss, time.Second)
		require.InDelta(t, 1, r.Growth, 1e-9)
		require.Equal(t, 5*time.Minute, r.GrowthWindow)
		require.InDelta(t, 1, r.GrowthFit.R2, 1e-9)
		old, err := forecast.Compute(at, s.samples(at), wholeWindowOnly)
		require.NoError(t, err)
		require.Greater(t, old.TimeToLoss, 10*time.Hour, "the whole window alone: %v", old.TimeToLoss)

		// Once the 5-minute window holds only samples taken after the
		// group's last commit (which carries its last position, up to
		// commitEvery after the stop), every forecast is exact.
		all := s.samples(loss)
		for i, x := range all {
			if x.Time.Before(stop.Add(5*time.Minute+commitEvery)) || !x.Time.Before(loss) {
				continue
			}
			r, err := forecast.Compute(x.Time, recent(all[:i+1], time.Hour), controlPlane)
			require.NoError(t, err)
			require.Equal(t, forecast.StatusExpiring, r.Status, "at %v", x.Time.Sub(stop))
			requireDuration(t, loss.Sub(x.Time), r.TimeToLoss, time.Second)
		}

		// The 30-minute threshold.
		e, r := firstAtRisk(t, s, controlPlane, stop, 30*time.Minute)
		ahead := loss.Sub(e)
		require.GreaterOrEqual(t, ahead, 30*time.Minute-s.step, "crossed %v ahead (commit every %v)", ahead, commitEvery)
		require.LessOrEqual(t, ahead, 30*time.Minute)
		require.Equal(t, 5*time.Minute, r.GrowthWindow)
		olde, _ := firstAtRisk(t, s, wholeWindowOnly, stop, 30*time.Minute)
		require.InDelta(t, 21, loss.Sub(olde).Minutes(), 1, "the whole window alone crosses it 21 minutes ahead")
		t.Logf("commit every %v: 10 min after the stop %v (whole window alone %v); 30 min threshold crossed %v ahead (whole window alone %v)",
			commitEvery, r10.TimeToLoss.Round(time.Second), old.TimeToLoss.Round(time.Second), ahead, loss.Sub(olde))
	}
}

// TestForecastRegimeStopThresholdAboveShortWindow: with a threshold close
// to the retention (more than retention − the short window), the threshold
// is crossed within one short window and one sampling interval of the
// stop at the latest: ahead ≥ retention − 5 min − 30 s, so ahead ≥
// threshold − 5 min − 30 s for every threshold up to the retention.
func TestForecastRegimeStopThresholdAboveShortWindow(t *testing.T) {
	t.Parallel()
	stop := now
	s := script{start: stop.Add(-2 * time.Hour), step: 30 * time.Second, ret: time.Hour, phases: []phase{{2 * time.Hour, 1}, {0, 0}}}
	loss := s.lossAt(stop)
	for _, threshold := range []time.Duration{55 * time.Minute, 57 * time.Minute, 59 * time.Minute, time.Hour} {
		e, r := firstAtRisk(t, s, controlPlane, stop, threshold)
		require.False(t, e.IsZero())
		require.LessOrEqual(t, e.Sub(stop), 5*time.Minute+s.step, "threshold %v: crossed %v after the stop", threshold, e.Sub(stop))
		require.GreaterOrEqual(t, loss.Sub(e), threshold-5*time.Minute-s.step, "threshold %v", threshold)
		require.False(t, r.ExpiresAt.Before(loss), "never sooner than the truth")
	}
}

// TestForecastRegimeSlowsFurther: a slow group (lag age growing 0.25 s/s)
// slows further to 0.9 s/s. The 5-minute window catches the new rate
// within minutes; the whole window alone takes most of an hour.
func TestForecastRegimeSlowsFurther(t *testing.T) {
	t.Parallel()
	slow := now
	s := script{
		start: slow.Add(-2 * time.Hour), step: 30 * time.Second, age0: 5 * time.Minute, commitEvery: 5 * time.Second, ret: 2 * time.Hour,
		phases: []phase{{2 * time.Hour, 0.75}, {0, 0.1}},
	}
	// The lag age at the slow-down is 5 min + 0.25 × 2 h = 35 min; at
	// 0.9 s/s the loss is (120 − 35) / 0.9 ≈ 94 min away. An 80-minute
	// threshold is truly crossed about 14 minutes after the slow-down.
	loss := s.lossAt(slow)
	requireDuration(t, 5666*time.Second, loss.Sub(slow), 10*time.Second) // 94.4 min
	const threshold = 80 * time.Minute

	e, r := firstAtRisk(t, s, controlPlane, slow, threshold)
	ahead := loss.Sub(e)
	// The 5-minute fit's lower bound (slope less 3 standard errors, the
	// saw-tooth of 5 s commits as noise) is a little under 0.9 s/s: the
	// forecast is at most a few percent late.
	require.Greater(t, ahead, threshold-2*time.Minute, "crossed %v ahead", ahead)
	require.LessOrEqual(t, ahead, threshold)
	require.Less(t, r.GrowthWindow, time.Hour)
	require.InDelta(t, 0.9, r.Growth, 0.03)

	olde, _ := firstAtRisk(t, s, wholeWindowOnly, slow, threshold)
	require.Less(t, loss.Sub(olde), threshold-15*time.Minute, "the whole window alone is far later: %v ahead", loss.Sub(olde))
	t.Logf("80 min threshold crossed %v ahead at %.3f s/s (%v window); whole window alone %v ahead", ahead, r.Growth, r.GrowthWindow, loss.Sub(olde))

	// Before the slow-down, at 0.25 s/s, the short windows agree with the
	// whole one: the forecast is the steady one, (120 − 35) / 0.25 min.
	r, err := forecast.Compute(slow, s.samples(slow), controlPlane)
	require.NoError(t, err)
	require.InDelta(t, 0.25, r.Growth, 0.005)
	requireDuration(t, 340*time.Minute, r.TimeToLoss, 7*time.Minute)
}

// TestForecastRegimeRecovers: a group that stopped for 40 minutes (1 h
// retention: 20 minutes from loss, at risk under a 30-minute threshold)
// recovers and consumes three times as fast as the topic is written. The
// 5-minute window that saw the stop no longer decides once it holds only
// the recovery, the measured lag age falls, and the risk clears long
// before the group has caught up; it then reads caught up.
func TestForecastRegimeRecovers(t *testing.T) {
	t.Parallel()
	resume := now
	s := script{
		start: resume.Add(-2 * time.Hour), step: 30 * time.Second, commitEvery: 5 * time.Second, ret: time.Hour,
		phases: []phase{{80 * time.Minute, 1}, {40 * time.Minute, 0}, {0, 3}},
	}
	require.True(t, s.lossAt(resume).IsZero(), "the group recovers in time")
	const threshold = 30 * time.Minute
	all := s.samples(resume.Add(30 * time.Minute))
	var cleared time.Time
	for i, x := range all {
		r, err := forecast.Compute(x.Time, recent(all[:i+1], time.Hour), controlPlane)
		require.NoError(t, err)
		switch ago := x.Time.Sub(resume); {
		case ago == 0:
			require.True(t, atRisk(r, threshold), "stopped for 40 minutes: %v %v", r.Status, r.TimeToLoss)
			require.InDelta(t, 1, r.Growth, 1e-6)
			require.Equal(t, 5*time.Minute, r.GrowthWindow)
		case ago > 0 && cleared.IsZero() && !atRisk(r, threshold):
			cleared = x.Time
		case ago >= 5*time.Minute:
			require.False(t, atRisk(r, threshold), "%v after the recovery: %v %v", ago, r.Status, r.TimeToLoss)
			// No short window holds the stop any more: none raises the
			// rate above the whole window's, or above holding once the
			// group is caught up.
			require.LessOrEqual(t, r.Growth, max(r.LagAgeFit.Slope, 0), "%v after the recovery", ago)
		}
	}
	require.False(t, cleared.IsZero())
	require.LessOrEqual(t, cleared.Sub(resume), 5*time.Minute)
	r, err := forecast.Compute(all[len(all)-1].Time, all, controlPlane)
	require.NoError(t, err)
	require.False(t, atRisk(r, threshold))
	require.Less(t, r.LagAge, 10*time.Second, "caught up but for the last commit")
}

// TestForecastRegimeNoisySteadyNoFalseRisk: noisy but steady groups close
// enough to the retention that a stopped-consumer forecast would be at
// risk (1 h retention, lag age 35–45 min, 30-minute threshold) never are,
// at any of 720 evaluations (6 h of 30 s samples) for each of 20 seeds: a
// short window must prove a faster rate before it decides. The whole
// window alone (the forecast before short windows) passes the same test.
func TestForecastRegimeNoisySteadyNoFalseRisk(t *testing.T) {
	t.Parallel()
	const threshold = 30 * time.Minute
	cases := []struct {
		name        string
		age0        time.Duration
		ratio       float64
		commitEvery time.Duration
		noise       float64 // ± seconds, uniform
	}{
		{"holding, ±2 min of noise", 40 * time.Minute, 1, 5 * time.Second, 120},
		{"holding, ±30 s of noise", 40 * time.Minute, 1, 5 * time.Second, 30},
		{"holding, committing every 2 minutes", 40 * time.Minute, 1, 2 * time.Minute, 10},
		{"growing 0.02 s/s, ±2 min of noise", 35 * time.Minute, 0.98, 5 * time.Second, 120},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			short := 0
			for seed := range uint64(20) {
				rng := rand.New(rand.NewPCG(seed, 0x57ead))
				end := now.Add(6 * time.Hour)
				s := script{
					start: now.Add(-time.Hour), step: 30 * time.Second, age0: tc.age0, commitEvery: tc.commitEvery, ret: time.Hour,
					phases: []phase{{0, tc.ratio}},
					noise:  func() time.Duration { return time.Duration((rng.Float64()*2 - 1) * tc.noise * float64(time.Second)) },
				}
				all := s.samples(end)
				for _, cfg := range []forecast.Config{wholeWindowOnly, controlPlane} {
					for i, x := range all {
						if x.Time.Before(now) {
							continue
						}
						r, err := forecast.Compute(x.Time, recent(all[:i+1], time.Hour), cfg)
						require.NoError(t, err)
						require.False(t, atRisk(r, threshold), "seed %d, %v in, short windows %v: %v, %v at %.3f s/s (window %v, R² %.2f)",
							seed, x.Time.Sub(now), cfg.ShortWindows, r.Status, r.TimeToLoss, r.Growth, r.GrowthWindow, r.GrowthFit.R2)
						if r.GrowthWindow < time.Hour {
							short++
						}
					}
				}
			}
			t.Logf("a short window raised the growth rate at %d of %d evaluations", short, 20*721)
		})
	}
}

// TestForecastRegimeStopWithNoise: the same stop with ±30 s of uniform
// noise on every lag age (σ ≈ 17 s; a stopped group's lag age has none
// of its own, so this is sampling jitter at its worst). The short windows
// then prove less than 1 s/s (their slope less 3 standard errors), so the
// threshold is crossed somewhat later than without noise, but far earlier
// than with the whole window alone.
func TestForecastRegimeStopWithNoise(t *testing.T) {
	t.Parallel()
	const threshold = 30 * time.Minute
	worst := time.Duration(math.MaxInt64)
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 0x5709))
		stop := now
		s := script{
			start: stop.Add(-2 * time.Hour), step: 30 * time.Second, commitEvery: 5 * time.Second, ret: time.Hour,
			phases: []phase{{2 * time.Hour, 1}, {0, 0}},
			noise:  func() time.Duration { return time.Duration((rng.Float64()*2 - 1) * 30 * float64(time.Second)) },
		}
		loss := s.lossAt(stop)
		e, r := firstAtRisk(t, s, controlPlane, stop, threshold)
		olde, _ := firstAtRisk(t, s, wholeWindowOnly, stop, threshold)
		require.Greater(t, loss.Sub(e), loss.Sub(olde)+5*time.Minute, "seed %d", seed)
		require.GreaterOrEqual(t, loss.Sub(e), 26*time.Minute, "seed %d: crossed %v ahead at %.3f s/s over %v", seed, loss.Sub(e), r.Growth, r.GrowthWindow)
		worst = min(worst, loss.Sub(e))
	}
	t.Logf("worst of 20 seeds: crossed %v ahead", worst)
}

// TestForecastRegimeStopSizeRetention: the same stop under size retention
// only. The unconsumed bytes, 0 while caught up, grow at the production
// rate after the stop (100 records/s of 1000 bytes); retention.bytes is an
// hour of it. The short windows catch the new byte rate as they do the lag
// age's.
func TestForecastRegimeStopSizeRetention(t *testing.T) {
	t.Parallel()
	stop := now
	s := script{start: stop.Add(-2 * time.Hour), step: 30 * time.Second, ret: 7 * day, phases: []phase{{2 * time.Hour, 1}, {0, 0}}}
	const limit = 3600 * scriptProduce * recordBytes
	at := stop.Add(10 * time.Minute)
	samples := s.samples(at)
	for i := range samples {
		samples[i].Retention = forecast.Retention{Bytes: limit}
		samples[i].UnconsumedBytes = samples[i].Lag() * recordBytes
	}
	r, err := forecast.Compute(at, samples, controlPlane)
	require.NoError(t, err)
	require.Equal(t, forecast.StatusExpiring, r.Status)
	require.Equal(t, forecast.HorizonSize, r.Horizon)
	requireDuration(t, 50*time.Minute, r.TimeToLoss, time.Second)
	require.InDelta(t, scriptProduce*recordBytes, r.ByteGrowth, 1)
	require.Equal(t, 5*time.Minute, r.ByteGrowthWindow)
	old, err := forecast.Compute(at, samples, wholeWindowOnly)
	require.NoError(t, err)
	require.Greater(t, old.TimeToLoss, 10*time.Hour, "the whole window alone: %v", old.TimeToLoss)
}
