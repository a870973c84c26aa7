package forecast_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// Property tests: seeded random series, many cases each.
const cases = 300

// randomCase returns a random series ending now, with whole-millisecond
// lag ages plus up to noise seconds of uniform noise, and a config whose
// window covers it. Every duration is a whole number of milliseconds, so
// scaling by 1/1000 is exact.
func randomCase(rng *rand.Rand, noise float64) ([]forecast.Sample, forecast.Config) {
	n := 10 + rng.IntN(390)
	step := time.Duration(1+rng.IntN(120_000)) * time.Millisecond
	span := time.Duration(n-1) * step
	s := series{
		n: n, step: step, end: now,
		produce: 1 + rng.Float64()*999,
		growth:  rng.Float64()*3 - 1.5,
		ret:     forecast.Retention{Time: span + time.Duration(1+rng.IntN(50*86400))*time.Second},
	}
	s.age = time.Duration(rng.Int64N(int64(s.ret.Time)))
	samples := s.samples()
	for i := range samples {
		samples[i].LagAge = samples[i].LagAge.Round(time.Millisecond) +
			time.Duration(rng.Float64()*noise*1000)*time.Millisecond
	}
	// Half the cases change regime in their last quarter: the lag age
	// grows up to 1.5 s/s faster from then on, for the short windows.
	if rng.IntN(2) == 0 {
		change := samples[n-1-rng.IntN(n/4+1)].Time
		extra := rng.Float64() * 1.5
		for i := range samples {
			if d := samples[i].Time.Sub(change); d > 0 {
				samples[i].LagAge += time.Duration(extra*d.Seconds()*1000) * time.Millisecond
			}
		}
	}
	cfg := forecast.Config{
		Window:       span + step,
		ShortWindows: []time.Duration{((span + step) / 12).Truncate(time.Millisecond), ((span + step) / 4).Truncate(time.Millisecond)},
		MinSamples:   10,
		MinSpan:      span / 2,
		MaxGap:       2 * step,
	}
	return samples, cfg
}

func TestForecastPropertyExactLinear(t *testing.T) {
	t.Parallel()
	// A lag age that grows exactly linearly gives the exact growth rate, a
	// perfect fit, and exactly (R − A) / g.
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range cases {
		n := 10 + rng.IntN(390)
		step := time.Duration(1+rng.IntN(300)) * time.Second
		span := time.Duration(n-1) * step
		g := 0.01 + rng.Float64()*0.99
		ret := span + time.Duration(1+rng.IntN(30*86400))*time.Second
		// At least g × span at the first sample, so the lag age is
		// never clamped at 0.
		age := time.Duration(g*span.Seconds()*1e9) + time.Duration(rng.Int64N(int64(ret)-int64(g*span.Seconds()*1e9)))
		s := series{n: n, step: step, end: now, produce: 50, age: age, growth: g, ret: forecast.Retention{Time: ret}}
		cfg := forecast.Config{Window: span + step, MinSpan: span, MaxGap: step}

		r := compute(t, s.samples(), cfg)
		want := time.Duration((ret - age).Seconds() / g * 1e9)
		require.Equal(t, forecast.StatusExpiring, r.Status, "case %d", i)
		require.InEpsilon(t, g, r.LagAgeFit.Slope, 1e-9, "case %d", i)
		require.InDelta(t, 1, r.LagAgeFit.R2, 1e-9, "case %d", i)
		require.InEpsilon(t, want.Seconds(), r.TimeToLoss.Seconds(), 1e-9, "case %d: want %v got %v", i, want, r.TimeToLoss)
	}
}

func TestForecastPropertyTimeScaling(t *testing.T) {
	t.Parallel()
	// Measuring every duration in another unit (samples k times as far
	// apart, lag ages and retention k times as long) leaves the growth rate,
	// a ratio of durations, unchanged and scales the time to loss by k.
	rng := rand.New(rand.NewPCG(8, 8))
	short := 0
	for i := range cases {
		samples, cfg := randomCase(rng, 300)
		base := compute(t, samples, cfg)
		if base.GrowthWindow < cfg.Window {
			short++
		}
		for _, k := range []struct{ num, den time.Duration }{{1, 1000}, {1, 10}, {3, 1}, {7, 1}, {1000, 1}} {
			scale := func(d time.Duration) time.Duration { return d * k.num / k.den }
			scaled := slices.Clone(samples)
			for j := range scaled {
				scaled[j].Time = now.Add(scale(scaled[j].Time.Sub(now)))
				scaled[j].LagAge = scale(scaled[j].LagAge)
				scaled[j].Retention.Time = scale(scaled[j].Retention.Time)
			}
			c := cfg
			c.Window, c.MinSpan, c.MaxGap = scale(c.Window), scale(c.MinSpan), scale(c.MaxGap)
			c.ShortWindows = []time.Duration{scale(c.ShortWindows[0]), scale(c.ShortWindows[1])}

			r := compute(t, scaled, c)
			msg := []any{"case %d, k %d/%d", i, k.num, k.den}
			require.Equal(t, base.Status, r.Status, msg...)
			require.InDelta(t, base.LagAgeFit.Slope, r.LagAgeFit.Slope, 1e-9*math.Max(1, math.Abs(base.LagAgeFit.Slope)), msg...)
			require.InDelta(t, base.LagAgeFit.R2, r.LagAgeFit.R2, 1e-9, msg...)
			require.InDelta(t, base.Growth, r.Growth, 1e-9*math.Max(1, math.Abs(base.Growth)), msg...)
			require.Equal(t, scale(base.GrowthWindow), r.GrowthWindow, msg...)
			// Beyond about 292 years a Duration saturates; skip those.
			if want := base.TimeToLoss.Seconds() * float64(k.num) / float64(k.den); want < 9e9 {
				require.InDelta(t, want, r.TimeToLoss.Seconds(), 1e-9*want+1e-6, msg...)
			}
			require.InDelta(t, base.ProductionRate*float64(k.den)/float64(k.num), r.ProductionRate, 1e-9*r.ProductionRate, msg...)
		}
	}
	require.Greater(t, short, cases/10, "short windows decide in some cases")
}

func TestForecastPropertyByteScaling(t *testing.T) {
	t.Parallel()
	// Under size retention, counting bytes in another unit (every byte
	// count, MinByteGrowth included, k times larger) scales the byte growth
	// by k and leaves the time to loss unchanged.
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range cases {
		samples, cfg := randomCase(rng, 300)
		last := samples[len(samples)-1]
		unconsumed := float64(last.Lag() * recordBytes)
		retBytes := int64(unconsumed * (1.01 + rng.Float64()*4))
		for j := range samples {
			samples[j].Retention = forecast.Retention{Bytes: retBytes}
		}
		base := compute(t, samples, cfg)
		for _, k := range []int64{2, 10, 1000} {
			scaled := slices.Clone(samples)
			for j := range scaled {
				scaled[j].PartitionBytes *= k
				scaled[j].Retention.Bytes *= k
			}
			c := cfg
			c.MinByteGrowth = float64(k) // the default, 1 B/s, in the new unit
			r := compute(t, scaled, c)
			require.Equal(t, base.Status, r.Status, "case %d, k %d", i, k)
			require.Equal(t, base.ByteGrowthWindow, r.ByteGrowthWindow, "case %d, k %d", i, k)
			require.InDelta(t, base.ByteGrowth*float64(k), r.ByteGrowth, 1e-9*math.Abs(r.ByteGrowth)+1e-9, "case %d, k %d", i, k)
			require.InDelta(t, base.ByteFit.Slope*float64(k), r.ByteFit.Slope, 1e-9*math.Abs(r.ByteFit.Slope)+1e-9, "case %d, k %d", i, k)
			require.InDelta(t, base.TimeToLoss.Seconds(), r.TimeToLoss.Seconds(), 1e-9*base.TimeToLoss.Seconds()+1e-6, "case %d, k %d", i, k)
		}
	}
}

func TestForecastPropertyTranslation(t *testing.T) {
	t.Parallel()
	// Moving the whole series and now in time by up to a century, and every
	// offset by up to 10^12, changes nothing but the times and offsets in
	// the result: the arithmetic is done relative to the window.
	rng := rand.New(rand.NewPCG(10, 10))
	for i := range cases {
		samples, cfg := randomCase(rng, 300)
		// Some cases lose data, to move a lost range too.
		if rng.IntN(4) == 0 {
			samples[len(samples)-1].LogStartOffset = samples[len(samples)-1].CommittedOffset + 1 + rng.Int64N(100)
		}
		base := compute(t, samples, cfg)

		shift := time.Duration(rng.Int64N(int64(200*365*day))) - 100*365*day
		offShift := rng.Int64N(1e12)
		moved := slices.Clone(samples)
		for j := range moved {
			moved[j].Time = moved[j].Time.Add(shift)
			moved[j].CommittedOffset += offShift
			moved[j].LogStartOffset += offShift
			moved[j].LogEndOffset += offShift
		}
		r, err := forecast.Compute(now.Add(shift), moved, cfg)
		require.NoError(t, err)

		r.Now = r.Now.Add(-shift)
		r.SampledAt = r.SampledAt.Add(-shift)
		if !r.ExpiresAt.IsZero() {
			r.ExpiresAt = r.ExpiresAt.Add(-shift)
		}
		if r.Lost != (forecast.LostRange{}) {
			r.Lost.From -= offShift
			r.Lost.To -= offShift
		}
		require.Equal(t, base, r, "case %d", i)
	}
}

func TestForecastPropertyNeverSoonerThanStoppedConsumer(t *testing.T) {
	t.Parallel()
	// Whatever the fit says, including slopes above 1 s/s from noise or a
	// rewinding consumer, the oldest unconsumed record is not forecast to
	// expire before its append time + retention, when it would if the
	// consumer stopped now.
	rng := rand.New(rand.NewPCG(11, 11))
	expiring := 0
	for i := range cases {
		samples, cfg := randomCase(rng, 3600)
		r := compute(t, samples, cfg)
		if r.Status != forecast.StatusExpiring || r.Horizon != forecast.HorizonTime {
			continue
		}
		expiring++
		last := samples[len(samples)-1]
		stopped := last.Time.Add(last.Retention.Time - last.LagAge)
		require.False(t, r.ExpiresAt.Before(stopped.Add(-time.Microsecond)), "case %d: %v before %v", i, r.ExpiresAt, stopped)
	}
	require.Greater(t, expiring, cases/10)
}

func TestForecastPropertyMonotoneInRetention(t *testing.T) {
	t.Parallel()
	// More retention never brings the expiry sooner.
	rng := rand.New(rand.NewPCG(12, 12))
	for i := range cases {
		samples, cfg := randomCase(rng, 300)
		a := compute(t, samples, cfg)
		longer := slices.Clone(samples)
		extra := time.Duration(1+rng.IntN(86400)) * time.Second
		for j := range longer {
			longer[j].Retention.Time += extra
		}
		b := compute(t, longer, cfg)
		if a.ExpiresAt.IsZero() || b.ExpiresAt.IsZero() {
			continue
		}
		require.False(t, b.ExpiresAt.Before(a.ExpiresAt), "case %d", i)
		require.GreaterOrEqual(t, b.TimeToLoss, a.TimeToLoss, "case %d", i)
	}
}

func TestForecastPropertyInputUnchanged(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 13))
	for range cases / 10 {
		samples, cfg := randomCase(rng, 300)
		before := slices.Clone(samples)
		_ = compute(t, samples, cfg)
		require.Equal(t, before, samples)
	}
}
