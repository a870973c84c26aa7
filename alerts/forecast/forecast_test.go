package forecast_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
)

const (
	day         = 24 * time.Hour
	recordBytes = 1000
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// series describes a partition written at a steady rate and one group on it,
// sampled n times, step apart, the last sample at end.
type series struct {
	n       int
	step    time.Duration
	end     time.Time
	produce float64       // records per second
	age     time.Duration // lag age at the last sample
	growth  float64       // lag-age growth, seconds per second
	ret     forecast.Retention
}

// steady is the usual series: an hour of 10 s samples ending now, 100
// records/s, time retention 7 days, lag age 1 day growing 6 h a day.
func steady() series {
	return series{
		n: 361, step: 10 * time.Second, end: now, produce: 100,
		age: day, growth: 0.25, ret: forecast.Retention{Time: 7 * day},
	}
}

// samples simulates the series. The partition's first record was appended
// 60 days before end and records are appended evenly, so the offset appended
// at time a is produce × (a − origin). The committed offset is the record
// appended lag age ago; the log start offset is the one retention.ms
// reaches; the partition bytes count recordBytes a record.
func (s series) samples() []forecast.Sample {
	origin := s.end.Add(-60 * day)
	off := func(t time.Time) int64 {
		return max(0, int64(math.Round(s.produce*t.Sub(origin).Seconds())))
	}
	out := make([]forecast.Sample, s.n)
	for i := range out {
		t := s.end.Add(-time.Duration(s.n-1-i) * s.step)
		ago := s.end.Sub(t).Seconds()
		age := max(0, s.age-time.Duration(math.Round(s.growth*ago*1e9)))
		leo := off(t)
		committed := off(t.Add(-age))
		if age == 0 {
			committed = leo
		}
		start := int64(0)
		if s.ret.Time > 0 {
			start = min(committed, off(t.Add(-s.ret.Time)))
		}
		out[i] = forecast.Sample{
			Time:            t,
			CommittedOffset: committed,
			LogStartOffset:  start,
			LogEndOffset:    leo,
			LagAge:          age,
			PartitionBytes:  (leo - start) * recordBytes,
			Retention:       s.ret,
		}
	}
	return out
}

func compute(t *testing.T, samples []forecast.Sample, cfg forecast.Config) forecast.Result {
	t.Helper()
	r, err := forecast.Compute(now, samples, cfg)
	require.NoError(t, err)
	return r
}

// requireDuration checks got against want within tol.
func requireDuration(t *testing.T, want, got, tol time.Duration) {
	t.Helper()
	require.LessOrEqual(t, (got - want).Abs(), tol, "want %v, got %v", want, got)
}

func TestForecastWorkedExample(t *testing.T) {
	t.Parallel()
	// DESIGN.md §8: retention 7 days, lag age 1 day, growing 6 hours per
	// day: the oldest unconsumed record expires in 24 days.
	r := compute(t, steady().samples(), forecast.Config{})

	require.Equal(t, forecast.StatusExpiring, r.Status)
	require.Equal(t, forecast.HorizonTime, r.Horizon)
	requireDuration(t, 24*day, r.TimeToLoss, time.Microsecond)
	require.WithinDuration(t, now.Add(24*day), r.ExpiresAt, time.Microsecond)
	require.InDelta(t, 0.25, r.LagAgeFit.Slope, 1e-12)
	require.InDelta(t, 1, r.LagAgeFit.R2, 1e-12)
	require.Less(t, r.LagAgeFit.ResidualStdDev, 1e-6)
	// The short windows see the same rate: the whole window decides.
	require.Equal(t, r.LagAgeFit.Slope, r.Growth)
	require.Equal(t, time.Hour, r.GrowthWindow)
	require.Equal(t, forecast.TrendGrowing, r.LagAgeTrend)
	require.Equal(t, 361, r.LagAgeFit.Samples)
	require.Equal(t, time.Hour, r.LagAgeFit.Span)
	require.Equal(t, day, r.LagAge)
	require.Equal(t, int64(100*86400), r.Lag)
	require.InDelta(t, 100, r.ProductionRate, 0.01)
	require.InDelta(t, 75, r.ConsumptionRate, 0.01)
	require.Zero(t, r.Gaps)
	require.False(t, r.RetentionChanged)
}

func TestForecastNoisySeries(t *testing.T) {
	t.Parallel()
	// Each sample's lag age is off by up to ±2 min of uniform noise plus
	// the 0–5 s a 5 s commit interval adds, seeded. The slope's standard
	// error is then about 0.0035 s/s, 1.4 % of 0.25: every seed must forecast
	// within 5 % of 24 days (about 3.5 standard errors), and the fit must say
	// it is good but not exact.
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 0x5111ce))
		samples := steady().samples()
		for i := range samples {
			noise := (rng.Float64()*2-1)*120 + rng.Float64()*5
			samples[i].LagAge += time.Duration(noise * float64(time.Second))
		}
		r := compute(t, samples, forecast.Config{})
		require.Equal(t, forecast.StatusExpiring, r.Status, "seed %d", seed)
		requireDuration(t, 24*day, r.TimeToLoss, 24*day/20)
		require.InDelta(t, 0.25, r.LagAgeFit.Slope, 4*r.LagAgeFit.SlopeStdErr, "seed %d", seed)
		require.Greater(t, r.LagAgeFit.R2, 0.8, "seed %d", seed)
		require.Less(t, r.LagAgeFit.R2, 0.99, "seed %d", seed)
		require.InDelta(t, 70, r.LagAgeFit.ResidualStdDev, 10, "seed %d", seed)
	}

	t.Run("noise without a trend has a poor fit", func(t *testing.T) {
		t.Parallel()
		// The growth threshold is not a noise filter: a flat but noisy lag
		// age can fit a small positive slope. The fit quality says not to
		// trust it, and the forecast is years away.
		for seed := range uint64(50) {
			rng := rand.New(rand.NewPCG(seed, 0xf1a7))
			s := steady()
			s.growth = 0
			samples := s.samples()
			for i := range samples {
				samples[i].LagAge += time.Duration((rng.Float64()*2 - 1) * 120 * float64(time.Second))
			}
			r := compute(t, samples, forecast.Config{})
			require.Less(t, r.LagAgeFit.R2, 0.1, "seed %d", seed)
			require.Less(t, math.Abs(r.LagAgeFit.Slope), 4*r.LagAgeFit.SlopeStdErr, "seed %d", seed)
			if r.Status == forecast.StatusExpiring {
				require.Greater(t, r.TimeToLoss, 365*day, "seed %d", seed)
			}
		}
	})
}

func TestForecastShrinkingLag(t *testing.T) {
	t.Parallel()
	s := steady()
	s.growth = -0.5 // the consumer reads 150 records/s against 100 produced
	r := compute(t, s.samples(), forecast.Config{})

	require.Equal(t, forecast.StatusShrinking, r.Status)
	require.Equal(t, forecast.TrendShrinking, r.LagAgeTrend)
	require.InDelta(t, -0.5, r.LagAgeFit.Slope, 1e-12)
	require.InDelta(t, 150, r.ConsumptionRate, 0.01)
	require.Zero(t, r.TimeToLoss)
	require.True(t, r.ExpiresAt.IsZero())
	require.Equal(t, forecast.HorizonNone, r.Horizon)
}

func TestForecastStoppedConsumer(t *testing.T) {
	t.Parallel()
	// The committed offset never moves: the lag age grows 1 s per s and the
	// time to loss is simply retention − lag age.
	s := steady()
	s.growth = 1
	samples := s.samples()
	for _, x := range samples {
		require.Equal(t, samples[0].CommittedOffset, x.CommittedOffset)
	}
	r := compute(t, samples, forecast.Config{})

	require.Equal(t, forecast.StatusExpiring, r.Status)
	require.InDelta(t, 1, r.LagAgeFit.Slope, 1e-12)
	require.Zero(t, r.ConsumptionRate)
	requireDuration(t, 7*day-day, r.TimeToLoss, time.Microsecond)
}

func TestForecastGrowthAboveOneIsCapped(t *testing.T) {
	t.Parallel()
	// A consumer that keeps rewinding makes the lag age grow 1.5 s per s.
	// No record ages faster than the clock, so the forecast divides by 1:
	// never sooner than a stopped consumer.
	s := steady()
	s.growth = 1.5
	r := compute(t, s.samples(), forecast.Config{})

	require.Equal(t, forecast.StatusExpiring, r.Status)
	require.InDelta(t, 1.5, r.LagAgeFit.Slope, 1e-12)
	require.Equal(t, 1.0, r.Growth, "the rate the forecast uses, and reports, is capped")
	requireDuration(t, 6*day, r.TimeToLoss, time.Microsecond)
}

func TestForecastEdgeCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		samples func() []forecast.Sample
		want    forecast.Status
		check   func(t *testing.T, r forecast.Result)
	}{
		{
			name:    "no samples",
			samples: func() []forecast.Sample { return nil },
			want:    forecast.StatusNoData,
			check: func(t *testing.T, r forecast.Result) {
				require.True(t, r.SampledAt.IsZero())
			},
		},
		{
			name: "every sample older than the window",
			samples: func() []forecast.Sample {
				s := steady()
				s.end = now.Add(-2 * time.Hour)
				return s.samples()
			},
			want: forecast.StatusNoData,
			check: func(t *testing.T, r forecast.Result) {
				require.True(t, r.SampledAt.IsZero())
			},
		},
		{
			name: "sampling stopped five minutes ago",
			samples: func() []forecast.Sample {
				s := steady()
				s.end = now.Add(-5 * time.Minute)
				return s.samples()
			},
			want: forecast.StatusNoData,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, now.Add(-5*time.Minute), r.SampledAt)
				require.Zero(t, r.TimeToLoss)
			},
		},
		{
			// Control-plane replicas' clocks differ a little: a sample
			// from 2 s in the future is used, and the forecast counts
			// from now.
			name: "latest sample from a clock 2 s ahead",
			samples: func() []forecast.Sample {
				s := steady()
				s.end = now.Add(2 * time.Second)
				return s.samples()
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				requireDuration(t, 24*day+2*time.Second, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			name: "partition offline now",
			samples: func() []forecast.Sample {
				out := steady().samples()
				out[len(out)-1] = forecast.Sample{Time: now, Offline: true}
				return out
			},
			want: forecast.StatusOffline,
		},
		{
			name: "partition offline for five minutes mid-window",
			samples: func() []forecast.Sample {
				out := steady().samples()
				for i := 100; i < 130; i++ {
					out[i] = forecast.Sample{Time: out[i].Time, Offline: true}
				}
				return out
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, 1, r.Gaps)
				require.Equal(t, 361-30, r.LagAgeFit.Samples)
				requireDuration(t, 24*day, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			name: "samples missing: one every two minutes",
			samples: func() []forecast.Sample {
				var out []forecast.Sample
				for i, x := range steady().samples() {
					if i%12 == 0 {
						out = append(out, x)
					}
				}
				return out
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, 30, r.Gaps)
				require.Equal(t, 31, r.LagAgeFit.Samples)
				requireDuration(t, 24*day, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			name: "no consumer has committed",
			samples: func() []forecast.Sample {
				out := steady().samples()
				for i := range out {
					out[i].CommittedOffset, out[i].LagAge = forecast.NoOffset, 0
				}
				return out
			},
			want: forecast.StatusNoConsumer,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.LagAgeFit.Samples)
				require.Zero(t, r.Lag)
				require.InDelta(t, 100, r.ProductionRate, 0.01)
			},
		},
		{
			name: "consumer's first commit half-way through the window",
			samples: func() []forecast.Sample {
				out := steady().samples()
				for i := range 180 {
					out[i].CommittedOffset, out[i].LagAge = forecast.NoOffset, 0
				}
				return out
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, 181, r.LagAgeFit.Samples)
				require.Equal(t, 30*time.Minute, r.LagAgeFit.Span)
				requireDuration(t, 24*day, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			name: "consumer ahead of the log end",
			samples: func() []forecast.Sample {
				out := steady().samples()
				last := &out[len(out)-1]
				last.CommittedOffset, last.LagAge = last.LogEndOffset+5, 0
				return out
			},
			want: forecast.StatusConsumerAhead,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.Lag)
			},
		},
		{
			name: "caught up",
			samples: func() []forecast.Sample {
				s := steady()
				s.age, s.growth = 0, 0
				return s.samples()
			},
			want: forecast.StatusCaughtUp,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.Lag)
				require.InDelta(t, 100, r.ProductionRate, 0.01)
				require.InDelta(t, 100, r.ConsumptionRate, 0.01)
			},
		},
		{
			name: "idle topic, caught up",
			samples: func() []forecast.Sample {
				s := steady()
				s.produce, s.age, s.growth = 0, 0, 0
				return s.samples()
			},
			want: forecast.StatusIdle,
		},
		{
			// Nothing produced, nothing consumed: the backlog still ages
			// with the clock and expires.
			name: "idle topic with a backlog",
			samples: func() []forecast.Sample {
				out := steady().samples()
				for i := range out {
					out[i].LogStartOffset = 0
					out[i].LogEndOffset = 9_000_000
					out[i].CommittedOffset = 8_000_000
					out[i].LagAge = day - now.Sub(out[i].Time)
				}
				return out
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.ProductionRate)
				require.Zero(t, r.ConsumptionRate)
				require.Equal(t, int64(1_000_000), r.Lag)
				requireDuration(t, 6*day, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			// retention.ms cut from 14 to 7 days half-way: the forecast
			// uses 7 days and says the retention changed.
			name: "retention changed mid-window",
			samples: func() []forecast.Sample {
				out := steady().samples()
				for i := range 180 {
					out[i].Retention.Time = 14 * day
				}
				return out
			},
			want: forecast.StatusExpiring,
			check: func(t *testing.T, r forecast.Result) {
				require.True(t, r.RetentionChanged)
				require.Equal(t, forecast.Retention{Time: 7 * day}, r.Retention)
				requireDuration(t, 24*day, r.TimeToLoss, time.Microsecond)
			},
		},
		{
			name: "no retention",
			samples: func() []forecast.Sample {
				s := steady()
				s.ret = forecast.Retention{}
				return s.samples()
			},
			want: forecast.StatusNoRetention,
			check: func(t *testing.T, r forecast.Result) {
				// The trend is still there for a lag-growing alert.
				require.Equal(t, forecast.TrendGrowing, r.LagAgeTrend)
				require.Zero(t, r.TimeToLoss)
			},
		},
		{
			name: "too few samples",
			samples: func() []forecast.Sample {
				s := steady()
				s.n, s.step = 9, 5*time.Minute
				return s.samples()
			},
			want: forecast.StatusTooFewSamples,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, forecast.TrendUnknown, r.LagAgeTrend)
				require.Equal(t, 9, r.LagAgeFit.Samples)
			},
		},
		{
			name: "samples span too short a time",
			samples: func() []forecast.Sample {
				s := steady()
				s.n, s.step = 60, time.Second
				return s.samples()
			},
			want: forecast.StatusTooFewSamples,
		},
		{
			name: "holding",
			samples: func() []forecast.Sample {
				s := steady()
				s.growth = 0
				return s.samples()
			},
			want: forecast.StatusHolding,
			check: func(t *testing.T, r forecast.Result) {
				require.Equal(t, forecast.TrendHolding, r.LagAgeTrend)
				require.InDelta(t, 1, r.LagAgeFit.R2, 1e-12)
			},
		},
		{
			name: "growth below the threshold holds",
			samples: func() []forecast.Sample {
				s := steady()
				s.growth = 0.0009
				return s.samples()
			},
			want: forecast.StatusHolding,
		},
		{
			name: "shrinking slower than the threshold holds",
			samples: func() []forecast.Sample {
				s := steady()
				s.growth = -0.0009
				return s.samples()
			},
			want: forecast.StatusHolding,
		},
		{
			name: "lag age past retention",
			samples: func() []forecast.Sample {
				s := steady()
				s.age = 7*day + time.Hour
				return s.samples()
			},
			want: forecast.StatusExpiryDue,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.TimeToLoss)
				require.Equal(t, forecast.HorizonTime, r.Horizon)
				// Exactly the oldest record's append time + retention.
				require.Equal(t, now.Add(-time.Hour), r.ExpiresAt)
			},
		},
		{
			// The latest sample, 50 s old, is 10 s short of retention at
			// 1 s per s: the record expired 40 s ago.
			name: "forecast falls between the latest sample and now",
			samples: func() []forecast.Sample {
				s := steady()
				s.end, s.age, s.growth = now.Add(-50*time.Second), 7*day-10*time.Second, 1
				return s.samples()
			},
			want: forecast.StatusExpiryDue,
			check: func(t *testing.T, r forecast.Result) {
				require.Zero(t, r.TimeToLoss)
				require.Equal(t, now.Add(-40*time.Second), r.ExpiresAt)
			},
		},
		{
			name: "records deleted unconsumed",
			samples: func() []forecast.Sample {
				out := steady().samples()
				last := &out[len(out)-1]
				last.LogStartOffset = last.CommittedOffset + 1234
				return out
			},
			want: forecast.StatusDataLost,
			check: func(t *testing.T, r forecast.Result) {
				c := int64(100 * (60*86400 - 86400))
				require.Equal(t, forecast.LostRange{From: c, To: c + 1234}, r.Lost)
				require.Equal(t, int64(1234), r.Lost.Count())
				require.Zero(t, r.TimeToLoss)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := compute(t, tt.samples(), forecast.Config{})
			require.Equal(t, tt.want, r.Status, "status %v", r.Status)
			require.Equal(t, now, r.Now)
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

func TestForecastSizeRetention(t *testing.T) {
	t.Parallel()
	// 100 records/s of 1000 bytes and a lag age of 1 day growing 0.25 s/s:
	// the unconsumed bytes are 100 × 1000 × 86400 = 8.64 GB, growing at
	// 100 × 1000 × 0.25 = 25 kB/s.
	const unconsumed, byteGrowth = 8.64e9, 25e3
	tests := []struct {
		name        string
		ret         forecast.Retention
		measured    bool // the sampler reports UnconsumedBytes itself
		want        forecast.Status
		wantHorizon forecast.Horizon
		wantTTL     time.Duration
	}{
		{
			name:        "size only",
			ret:         forecast.Retention{Bytes: 20e9},
			want:        forecast.StatusExpiring,
			wantHorizon: forecast.HorizonSize,
			wantTTL:     time.Duration((20e9 - unconsumed) / byteGrowth * 1e9), // 5.26 days
		},
		{
			name:        "size only, unconsumed bytes measured",
			ret:         forecast.Retention{Bytes: 20e9},
			measured:    true,
			want:        forecast.StatusExpiring,
			wantHorizon: forecast.HorizonSize,
			wantTTL:     time.Duration((20e9 - unconsumed) / byteGrowth * 1e9),
		},
		{
			name:        "both, size first",
			ret:         forecast.Retention{Time: 7 * day, Bytes: 20e9},
			want:        forecast.StatusExpiring,
			wantHorizon: forecast.HorizonSize,
			wantTTL:     time.Duration((20e9 - unconsumed) / byteGrowth * 1e9),
		},
		{
			name:        "both, time first",
			ret:         forecast.Retention{Time: 7 * day, Bytes: 100e9},
			want:        forecast.StatusExpiring,
			wantHorizon: forecast.HorizonTime,
			wantTTL:     24 * day,
		},
		{
			name:        "unconsumed bytes already past retention.bytes",
			ret:         forecast.Retention{Time: 7 * day, Bytes: 8e9},
			want:        forecast.StatusExpiryDue,
			wantHorizon: forecast.HorizonSize,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := steady()
			s.ret = tt.ret
			samples := s.samples()
			if tt.measured {
				for i := range samples {
					samples[i].UnconsumedBytes = samples[i].Lag() * recordBytes
					samples[i].PartitionBytes = 0
				}
			}
			r := compute(t, samples, forecast.Config{})
			require.Equal(t, tt.want, r.Status)
			require.Equal(t, tt.wantHorizon, r.Horizon)
			requireDuration(t, tt.wantTTL, r.TimeToLoss, time.Millisecond)
			require.Equal(t, int64(unconsumed), r.UnconsumedBytes)
			require.InDelta(t, byteGrowth, r.ByteFit.Slope, 1)
			require.Equal(t, forecast.TrendGrowing, r.ByteTrend)
		})
	}

	t.Run("shrinking in bytes", func(t *testing.T) {
		t.Parallel()
		s := steady()
		s.ret, s.growth = forecast.Retention{Bytes: 20e9}, -0.5
		r := compute(t, s.samples(), forecast.Config{})
		require.Equal(t, forecast.StatusShrinking, r.Status)
		require.Equal(t, forecast.TrendShrinking, r.ByteTrend)
	})

	t.Run("time shrinking, size growing", func(t *testing.T) {
		t.Parallel()
		// Production speeds up as the consumer catches up in age: the lag
		// age shrinks but the backlog in bytes grows. Either limit that
		// grows makes a forecast.
		var samples []forecast.Sample
		for i := range 361 {
			at := now.Add(-time.Duration(360-i) * 10 * time.Second)
			lag := int64(8_000_000 + 1000*i) // +100 records/s
			samples = append(samples, forecast.Sample{
				Time: at, CommittedOffset: 10_000_000, LogEndOffset: 10_000_000 + lag,
				LagAge:          day - time.Duration(i)*5*time.Second, // −0.5 s/s
				UnconsumedBytes: lag * recordBytes,
				Retention:       forecast.Retention{Time: 7 * day, Bytes: 10e9},
			})
		}
		r := compute(t, samples, forecast.Config{})
		require.Equal(t, forecast.TrendShrinking, r.LagAgeTrend)
		require.Equal(t, forecast.TrendGrowing, r.ByteTrend)
		require.Equal(t, forecast.StatusExpiring, r.Status)
		require.Equal(t, forecast.HorizonSize, r.Horizon)
		// (10e9 − 8.36e9) / 1e5 B/s = 16,400 s.
		requireDuration(t, 16400*time.Second, r.TimeToLoss, time.Millisecond)
	})
}

func TestForecastFitQuality(t *testing.T) {
	t.Parallel()
	// Lag ages 1 3 2 5 4 s at 0..4 s, worked by hand: x̄ = 2, ȳ = 3,
	// Σdx² = 10, Σdx·dy = 8 → slope 0.8; SSE = 3.6, Σdy² = 10 → R² = 0.64;
	// s = √(3.6/3); SE = s/√10.
	var samples []forecast.Sample
	for i, age := range []int{1, 3, 2, 5, 4} {
		samples = append(samples, forecast.Sample{
			Time:            now.Add(time.Duration(i-4) * time.Second),
			CommittedOffset: 10, LogEndOffset: 20,
			LagAge:    time.Duration(age) * time.Second,
			Retention: forecast.Retention{Time: day},
		})
	}
	r := compute(t, samples, forecast.Config{MinSamples: 3, Window: time.Minute, MinSpan: time.Second, MaxGap: time.Second})
	f := r.LagAgeFit
	require.InDelta(t, 0.8, f.Slope, 1e-12)
	require.InDelta(t, 0.64, f.R2, 1e-12)
	require.InDelta(t, math.Sqrt(1.2), f.ResidualStdDev, 1e-12)
	require.InDelta(t, math.Sqrt(1.2)/math.Sqrt(10), f.SlopeStdErr, 1e-12)
	require.Equal(t, 5, f.Samples)
	require.Equal(t, 4*time.Second, f.Span)
	// (86400 − 4) / 0.8
	require.Equal(t, forecast.StatusExpiring, r.Status)
	requireDuration(t, time.Duration((86400.0-4)/0.8*float64(time.Second)), r.TimeToLoss, time.Microsecond)
}

func TestForecastInvalidInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(s []forecast.Sample)
	}{
		{"out of order", func(s []forecast.Sample) { s[3].Time = s[1].Time }},
		{"same time twice", func(s []forecast.Sample) { s[3].Time = s[2].Time }},
		{"log end below log start", func(s []forecast.Sample) { s[5].LogEndOffset = s[5].LogStartOffset - 1 }},
		{"negative log start", func(s []forecast.Sample) { s[5].LogStartOffset = -3 }},
		{"committed offset -2", func(s []forecast.Sample) { s[5].CommittedOffset = -2 }},
		{"negative lag age", func(s []forecast.Sample) { s[5].LagAge = -time.Second }},
		{"negative partition bytes", func(s []forecast.Sample) { s[5].PartitionBytes = -1 }},
		{"negative unconsumed bytes", func(s []forecast.Sample) { s[5].UnconsumedBytes = -1 }},
		{"negative retention", func(s []forecast.Sample) { s[5].Retention.Time = -time.Second }},
		{"retention.bytes without a byte count", func(s []forecast.Sample) {
			s[5].Retention.Bytes, s[5].PartitionBytes = 1e9, 0
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			samples := steady().samples()
			tt.mutate(samples)
			_, err := forecast.Compute(now, samples, forecast.Config{})
			require.ErrorIs(t, err, forecast.ErrInvalidSample)
		})
	}

	t.Run("an offline sample needs only its time", func(t *testing.T) {
		t.Parallel()
		samples := steady().samples()
		samples[5] = forecast.Sample{Time: samples[5].Time, Offline: true, LogEndOffset: -7}
		_, err := forecast.Compute(now, samples, forecast.Config{})
		require.NoError(t, err)
	})
}

func TestForecastConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, forecast.Config{}.Validate())
	for _, c := range []forecast.Config{
		{Window: -time.Second},
		{MinSamples: 2},
		{MinSamples: -1},
		{MinSpan: 2 * time.Hour},
		{MinSpan: -time.Second},
		{MaxGap: -time.Second},
		{MinGrowth: -0.1},
		{MinGrowth: math.NaN()},
		{MinGrowth: math.Inf(1)},
		{MinByteGrowth: -1},
		{ShortWindows: []time.Duration{0}},
		{ShortWindows: []time.Duration{5 * time.Minute, -time.Minute}},
	} {
		require.Error(t, c.Validate(), "%+v", c)
		_, err := forecast.Compute(now, steady().samples(), c)
		require.Error(t, err, "%+v", c)
	}
}

func TestForecastStrings(t *testing.T) {
	t.Parallel()
	require.Equal(t, "expiring", forecast.StatusExpiring.String())
	require.Equal(t, "data-lost", forecast.StatusDataLost.String())
	require.Equal(t, "Status(0)", forecast.Status(0).String())
	require.Equal(t, "Status(99)", forecast.Status(99).String())
	for s := forecast.StatusNoData; s <= forecast.StatusHolding; s++ {
		require.NotContains(t, s.String(), "Status(")
	}
	require.Equal(t, "growing", forecast.TrendGrowing.String())
	require.Equal(t, "size", forecast.HorizonSize.String())
}

func BenchmarkForecastCompute(b *testing.B) {
	// One forecast over a 1-hour window of 10 s samples (361), with noise.
	rng := rand.New(rand.NewPCG(1, 2))
	s := steady()
	s.ret.Bytes = 100e9
	samples := s.samples()
	for i := range samples {
		samples[i].LagAge += time.Duration(rng.Float64() * 60 * float64(time.Second))
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := forecast.Compute(now, samples, forecast.Config{})
		if err != nil || r.Status != forecast.StatusExpiring {
			b.Fatal(r.Status, err)
		}
	}
}
