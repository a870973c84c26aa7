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
// that rewound its offset; the forecast caps the rate at 1.
//
// # Growth rate
//
// The growth rate g is the ordinary least-squares slope of the samples
// (t_i, A_i) inside the window (Config.Window before now), not the
// difference of two points:
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
// deriv() or predict_linear() over the exported lag-age metric agree with the
// built-in alerts by construction.
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
// # Time to data loss
//
// With time retention R (retention.ms), the oldest unconsumed record is
// deleted once its age reaches R. From the latest sample, taken at t_s with
// lag age A_s, and a growth rate g above Config.MinGrowth:
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
// minus the consumption byte rate, fitted exactly like g:
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
