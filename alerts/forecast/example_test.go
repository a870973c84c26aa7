package forecast_test

import (
	"fmt"
	"time"

	"github.com/sluicemq/sluice/alerts/forecast"
)

// The worked example of DESIGN.md §8: retention 7 days, lag age 1 day,
// growing 6 hours per day. Producers write 4 records/s and the group reads
// 3, so the lag age grows 1 − 3/4 = 0.25 s per s.
func ExampleCompute() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var samples []forecast.Sample
	for ago := time.Hour; ago >= 0; ago -= 10 * time.Second { // an hour of 10 s samples
		t := int64((48*time.Hour - ago) / time.Second) // seconds since the first record
		age := 24*time.Hour - ago/4                    // 1 day now, 6 h a day less before
		samples = append(samples, forecast.Sample{
			Time:            now.Add(-ago),
			LogEndOffset:    4 * t,
			CommittedOffset: 4*t - int64(4*age/time.Second),
			LagAge:          age,
			Retention:       forecast.Retention{Time: 7 * 24 * time.Hour},
		})
	}

	r, err := forecast.Compute(now, samples, forecast.Config{})
	if err != nil {
		panic(err)
	}
	fmt.Println("status:", r.Status)
	fmt.Printf("growth: %.2f s/s, R² %.2f over %d samples\n", r.LagAgeFit.Slope, r.LagAgeFit.R2, r.LagAgeFit.Samples)
	fmt.Printf("rates: %.0f records/s produced, %.0f consumed\n", r.ProductionRate, r.ConsumptionRate)
	fmt.Printf("time to data loss: (7 d − 1 d) / 0.25 = %.0f days, at %s\n", r.TimeToLoss.Hours()/24, r.ExpiresAt.Format(time.DateTime))
	// Output:
	// status: expiring
	// growth: 0.25 s/s, R² 1.00 over 361 samples
	// rates: 4 records/s produced, 3 consumed
	// time to data loss: (7 d − 1 d) / 0.25 = 24 days, at 2026-03-25 12:00:00
}
