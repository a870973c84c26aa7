// Package forecast estimates when a consumer group's unconsumed records on
// one partition will expire under the topic's retention: the time to data
// loss of DESIGN.md §8.
//
// The package is pure: Compute takes the current time as an argument and
// reads no clock, does no I/O, keeps no state and does not modify its input,
// so it is safe for concurrent use and every result can be reproduced from
// the samples. The control plane samples each group × partition and stores a
// bounded history; the alert evaluator calls Compute with that history and
// turns the Result into alert states. Neither lives here.
//
// # Lag age
//
// The lag age A(t) of a group on a partition is t minus the append time of
// the oldest unconsumed record (the record at the committed offset), and 0
// when the group is caught up. With records produced at p per second and
// consumed at c per second, both steady, the oldest unconsumed record is the
// one appended when the log end offset was where the committed offset is now,
// and A grows at
//
//	g = dA/dt = 1 − c/p   seconds per second
//
// A stopped consumer gives g = 1 (the backlog ages with the clock); a
// consumer exactly as fast as the producers gives 0; a faster one a negative
// g until it catches up. The lag age cannot grow faster than the clock while
// the committed offset only moves forward, so g > 1 is noise or a consumer
// that rewound its offset; the forecast caps the rate it uses
// (Result.Growth) at 1.
//
// # Growth rate
//
// The growth rate g is the ordinary least-squares slope of the samples
// (t_i, A_i) inside the window (Config.Window before now), not the
// difference of two points (see Short windows for the shorter fits that
// may raise it):
//
//	g = Σ (t_i − t̄)(A_i − Ā) / Σ (t_i − t̄)²
//
// It is reported with its fit quality:
//
//	SSE = Σ (A_i − Ā − g·(t_i − t̄))²     residual sum of squares
//	R²  = 1 − SSE / Σ (A_i − Ā)²         (1 for a perfect fit, flat included)
//	s   = √(SSE / (n − 2))                residual standard deviation
//	SE  = s / √Σ (t_i − t̄)²               standard error of g
//
// so the alert evaluator can require confidence (a high R², or g several
// standard errors above zero) before it raises an alert. The slope is the
// same one Prometheus's deriv() computes, so the rules in infra/ that use
// deriv() or predict_linear() over the exported lag-age metric agree with
// LagAgeFit by construction; the forecast itself may use a faster rate a
// short window proves (see Short windows).
//
// Least squares rather than Theil–Sen: the noise on a sampled lag age is
// bounded and roughly symmetric (the saw-tooth of periodic commits, sampling
// jitter), where least squares is the most efficient unbiased estimator; it
// is O(n) without allocation where Theil–Sen takes the median of n(n−1)/2
// pairwise slopes (64,980 for an hour of 10 s samples); it yields R² and the
// standard error from the same sums; and it has a closed form the docs and
// Prometheus share. Its weakness, a single gross outlier pulling the slope,
// shows up as a low R² and a large SE, which is what the confidence gate is
// for. The large jumps seen in practice (a consumer catching up, rewinding)
// are real events, not outliers to ignore.
//
// # Short windows
//
// A slope over the whole window lags a change of rate. A group caught up
// for the whole hour that stops has a lag age of 0 and then a ramp; ten
// minutes after the stop, with 30 s samples, the hour's slope is
// 0.076 s/s and forecasts (60 − 10) min ÷ 0.076 = 10 h 55 min for a loss 50
// minutes away. So the rate the forecast divides by, Result.Growth, is the
// most pessimistic rate some window proves, in the spirit of multi-window
// burn-rate alerting:
//
//	Growth = min(1, max(g_W, g_w for each short window w))
//	g_w    = slope_w − 3·SE_w   when the fit of w is confident, and above
//	                            g_W by more than MinGrowth
//
// with g_W the whole window's slope (LagAgeFit) and the short windows
// (Config.ShortWindows, 5 and 15 min by default) ending at the latest
// sample. A short window's fit is confident with at least MinSamples
// samples spanning at least half of it and R² ≥ 0.9; it then counts for
// the rate it proves, its slope less three standard errors, not the rate it
// happens to show. The unconsumed bytes get the same treatment
// (Result.ByteGrowth, without the cap).
//
// What it guarantees:
//
//   - Never later than the whole window alone: Growth ≥ min(g_W, 1), so
//     every forecast is at or before the one g_W gives, and a threshold the
//     whole window crosses is crossed at the same evaluation or earlier.
//   - Never sooner than a stopped consumer: Growth ≤ 1.
//   - After a stop, exact: the committed offset does not move, so the lag
//     age grows exactly 1 s/s with no noise. Once the shortest window holds
//     only samples taken after the group's last commit, its fit is exact
//     (R² = 1, SE = 0), Growth = 1 and ExpiresAt is the oldest unconsumed
//     record's append time + R, the truth. With samples every Δ and the
//     shortest window W (holding MinSamples samples, so W ≥ MinSamples·Δ),
//     a threshold T ≤ R − W is crossed at the first evaluation after the
//     true time to loss falls below T, at least T − Δ ahead of the loss; a
//     larger one within W + Δ of the stop. So every threshold is crossed at
//     least T − (W + Δ) ahead, less the group's commit interval and the age
//     of the latest sample where the threshold is that close to R. (The
//     whole window alone crossed a 30-minute threshold 21 minutes ahead
//     with R = 1 h.)
//   - Noise: a short window decides only with R² ≥ 0.9, by its slope less
//     three standard errors, and only by more than MinGrowth. For lag ages
//     of pure Gaussian noise a 10-sample window reaches R² ≥ 0.9 with a
//     rising slope about once in 70,000 fits (half the F(1, 8) tail beyond
//     72). With noise the proven rate after a stop is below 1 and the
//     forecast a little late, by the factor 1 − 3·SE_w, SE_w ≈ σ·√12 ÷
//     (w·√n) for noise of standard deviation σ on n samples.
//   - A group that commits less often than the shortest window looks
//     stopped between its commits once its last commit is a window old:
//     that is the committed offset's truth, and what it would lose if it
//     never committed again.
//   - Short windows never make a forecast more optimistic. A recovering
//     group is seen through its level: the forecast uses the measured lag
//     age, which falls as the group catches up, and the whole window's rate,
//     which forgets the stall as it leaves the window.
//
// LagAgeFit and LagAgeTrend stay the whole window's, the same slope
// Prometheus's deriv() computes over it.
//
// # Time to data loss
//
// With time retention R (retention.ms), the oldest unconsumed record is
// deleted once its age reaches R. From the latest sample, taken at t_s with
// lag age A_s, and the growth rate g = Result.Growth above Config.MinGrowth:
//
//	A_s + g·Δ = R   ⇒   Δ = (R − A_s) / g
//	ExpiresAt  = t_s + (R − A_s) / g
//	TimeToLoss = ExpiresAt − now
//
// The level is the measured A_s, not the fitted line: it is the exact age of
// the oldest unconsumed record, and the fit is only needed for the rate.
// While the lag age shrinks or holds (g ≤ MinGrowth) there is no forecast.
//
// Worked example: retention 7 days, lag age 1 day, growing 6 hours per day
// (g = 0.25 s/s; the consumer reads three records for every four produced):
//
//	TimeToLoss = (7 d − 1 d) / 0.25 = 24 d
//
// Check: after 24 days the lag age is 1 d + 0.25 × 24 d = 7 d, the
// retention. A consumer that stops entirely (g = 1) with the same lag age
// loses data in 7 d − 1 d = 6 d, the least time any forecast gives for that
// lag age and retention.
//
// With size retention B (retention.bytes, per partition), the oldest
// unconsumed record is deleted once the bytes from it to the log end reach B.
// The unconsumed bytes U are the sample's UnconsumedBytes or, when the
// sampler cannot tell, PartitionBytes × lag / (log end − log start), which
// assumes records of even size. U grows at b = the production byte rate
// minus the consumption byte rate, fitted exactly like g (Result.ByteGrowth):
//
//	ExpiresAt = t_s + (B − U_s) / b      while b > MinByteGrowth
//
// When both limits are set, the earlier expiry wins and Result.Horizon says
// which. A retention changed inside the window is taken at its latest value
// (Result.RetentionChanged says so): the rates do not depend on it.
//
// The forecast is conservative. Sluice deletes whole closed segments: by time
// once the newest record of the segment is older than R, by size only while
// the rest of the log still holds B bytes; and only when a retention pass
// runs. So, at the rates measured, records outlive the forecast (by up to the
// time span or the size of their segment, plus the interval between passes)
// and never expire before it.
//
// # Results
//
// Status says which case applies. The checks run in this order on the latest
// sample in the window and the first that matches wins:
//
//	StatusNoData          no sample within MaxGap of now (sampler or partition silent)
//	StatusOffline         the partition has no leader: nothing to measure
//	StatusNoConsumer      the group has no committed offset on the partition
//	StatusDataLost        committed offset < log start: [committed, log start) was
//	                      deleted unconsumed (Result.Lost); TimeToLoss 0
//	StatusConsumerAhead   committed offset > log end offset (truncation, or a
//	                      sampling race): nothing is at risk
//	StatusIdle            caught up and nothing was produced in the window
//	StatusCaughtUp        caught up (lag 0)
//	StatusNoRetention     neither retention.ms nor retention.bytes: nothing expires
//	StatusExpiryDue       lag age ≥ R or U ≥ B already, or the forecast falls at or
//	                      before now: the next retention pass deletes unconsumed
//	                      records; TimeToLoss 0
//	StatusExpiring        growing: TimeToLoss and ExpiresAt forecast
//	StatusTooFewSamples   fewer than MinSamples usable samples, or spanning less
//	                      than MinSpan, for a limit that is set
//	StatusShrinking       every limit set is moving away
//	StatusHolding         otherwise: growth within ±MinGrowth (or MinByteGrowth)
//
// An idle topic with a backlog is not safe: nothing is consumed, the lag age
// grows 1 s per s, and the result is StatusExpiring with ProductionRate 0.
//
// Samples of an offline partition and samples without a committed offset
// carry no lag age and are left out of the fits; a least-squares fit needs
// no even spacing, so gaps only thin the data. Result.Gaps counts the
// intervals between usable samples longer than MaxGap, for alerts that want
// continuous data. The fits (LagAgeFit, ByteFit) and trends are reported
// whatever the status, so a lag-growing alert can use them where no
// retention is set.
//
// The lost range is read from the latest sample. A consumer that resets past
// the log start between two samples skips records that sampling cannot see.
package forecast
