package forecast_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// TestForecastStopIssue12 is issue 12's report, with only what the
// forecast has always offered: retention 1 h, a group caught up for two
// hours stops, samples every 30 s, the control plane's configuration
// (1 h window, trends from 5 minutes). The whole hour's slope said 10 h 55
// min ten minutes after the stop, with the loss 50 minutes away, and a
// 30-minute threshold was crossed 21 minutes ahead. Now the forecast is
// exact ten minutes after the stop, and the threshold is crossed 30
// minutes ahead, less at most one sampling interval.
func TestForecastStopIssue12(t *testing.T) {
	t.Parallel()
	const step = 30 * time.Second
	stop := now
	loss := stop.Add(time.Hour)
	var samples []forecast.Sample
	for at := stop.Add(-2 * time.Hour); at.Before(loss); at = at.Add(step) {
		leo := 1_000_000 + int64(at.Sub(stop)/time.Second)*100 // 100 records/s
		s := forecast.Sample{Time: at, LogEndOffset: leo, CommittedOffset: min(leo, 1_000_000), Retention: forecast.Retention{Time: time.Hour}}
		if at.After(stop) {
			s.LagAge = at.Sub(stop)
		}
		samples = append(samples, s)
	}
	cfg := forecast.Config{Window: time.Hour, MinSpan: 5 * time.Minute}
	var crossed time.Time
	for i, s := range samples {
		r, err := forecast.Compute(s.Time, samples[:i+1], cfg)
		require.NoError(t, err)
		if s.Time.Equal(stop.Add(10 * time.Minute)) {
			require.Equal(t, forecast.StatusExpiring, r.Status)
			requireDuration(t, 50*time.Minute, r.TimeToLoss, time.Second)
		}
		if crossed.IsZero() && r.Status == forecast.StatusExpiring && r.TimeToLoss < 30*time.Minute {
			crossed = s.Time
		}
	}
	require.GreaterOrEqual(t, loss.Sub(crossed), 30*time.Minute-step, "a 30-minute threshold crossed %v ahead", loss.Sub(crossed))
}
