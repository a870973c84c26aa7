package forecast

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// NoOffset is the CommittedOffset of a group that has committed nothing on
// the partition (Kafka's -1).
const NoOffset int64 = -1

// maxLagAgeGrowth caps the lag-age growth rate the forecast divides by: the
// oldest unconsumed record cannot age faster than the clock.
const maxLagAgeGrowth = 1.0

// A short window's fit is confident when it explains at least
// shortMinR2 of the variance; it then raises the growth rate to its slope
// less shortStdErrs standard errors, what it proves. See the package doc.
const (
	shortMinR2   = 0.9
	shortStdErrs = 3.0
)

// ErrInvalidSample is returned, wrapped with the sample's index and the
// reason, for samples no sampler should produce: out of time order, offsets
// out of order, negative values, or no byte count where retention.bytes is
// set.
var ErrInvalidSample = errors.New("invalid sample")

// Retention is a topic's retention, as it applies to each partition.
type Retention struct {
	// Time is retention.ms: a record is deleted once it is older. 0 means
	// no time limit.
	Time time.Duration
	// Bytes is retention.bytes: the oldest records of the partition are
	// deleted while it holds more. 0 means no size limit.
	Bytes int64
}

// Limited reports whether retention deletes anything.
func (r Retention) Limited() bool { return r.Time > 0 || r.Bytes > 0 }

// Sample is one observation of a group on a partition.
type Sample struct {
	// Time is when the sample was taken, by the sampler's clock.
	Time time.Time
	// Offline is set when the partition had no leader: only Time is
	// meaningful then.
	Offline bool
	// CommittedOffset is the group's committed offset, the next offset it
	// will read; NoOffset when it has committed none.
	CommittedOffset int64
	// LogStartOffset is the first offset retention has not deleted, counting
	// the tiered copy: records below the local log start but still in the
	// object store are not lost.
	LogStartOffset int64
	// LogEndOffset is the partition's log end offset (LEO).
	LogEndOffset int64
	// LagAge is Time minus the append time of the record at CommittedOffset;
	// 0 when the group is caught up.
	LagAge time.Duration
	// PartitionBytes is the size of the partition from LogStartOffset to
	// LogEndOffset, tiered copy included. Needed with Retention.Bytes
	// unless UnconsumedBytes is set.
	PartitionBytes int64
	// UnconsumedBytes is the size of the records from CommittedOffset to
	// LogEndOffset. 0 means unknown while there is a lag: it is then
	// estimated as PartitionBytes × lag ÷ (LogEndOffset − LogStartOffset).
	UnconsumedBytes int64
	// Retention is the topic's retention when the sample was taken.
	Retention Retention
}

// Lag is the lag in messages, LogEndOffset − CommittedOffset: 0 without a
// committed offset or when the group is at or past the log end.
func (s Sample) Lag() int64 {
	if s.CommittedOffset == NoOffset || s.CommittedOffset >= s.LogEndOffset {
		return 0
	}
	return s.LogEndOffset - s.CommittedOffset
}

// Config tunes Compute. A zero field takes its default.
type Config struct {
	// Window is how far back from now samples are used. Default 1 h.
	Window time.Duration
	// ShortWindows are the shorter windows, ending at the latest sample,
	// whose confident fits may raise the lag-age growth rate above the
	// whole window's (see the package doc); those not shorter than Window
	// are left out. nil takes the default, 5 min and 15 min; an empty,
	// non-nil slice fits the whole window only.
	ShortWindows []time.Duration
	// MinSamples is the fewest usable samples a trend is fitted from.
	// Default 10, at least 3.
	MinSamples int
	// MinSpan is the shortest time the usable samples of a trend must
	// cover. Default Window / 4; at most Window.
	MinSpan time.Duration
	// MaxGap is the longest interval between usable samples, and between
	// the latest sample and now, that counts as continuous sampling.
	// Default 1 min.
	MaxGap time.Duration
	// MinGrowth is the lag-age growth rate, in seconds per second, above
	// which the lag age grows and below whose negative it shrinks; in
	// between it holds. Default 0.001 (about 1.4 min a day).
	MinGrowth float64
	// MinByteGrowth is the same threshold for the unconsumed bytes, in
	// bytes per second. Default 1.
	MinByteGrowth float64
}

func (c Config) withDefaults() Config {
	if c.Window == 0 {
		c.Window = time.Hour
	}
	if c.ShortWindows == nil {
		c.ShortWindows = []time.Duration{5 * time.Minute, 15 * time.Minute}
	}
	if c.MinSamples == 0 {
		c.MinSamples = 10
	}
	if c.MinSpan == 0 {
		c.MinSpan = c.Window / 4
	}
	if c.MaxGap == 0 {
		c.MaxGap = time.Minute
	}
	if c.MinGrowth == 0 {
		c.MinGrowth = 0.001
	}
	if c.MinByteGrowth == 0 {
		c.MinByteGrowth = 1
	}
	return c
}

// Validate reports the first field out of range, after defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Window < 0:
		return fmt.Errorf("Config.Window %v: must be positive", c.Window)
	case slices.ContainsFunc(c.ShortWindows, func(w time.Duration) bool { return w <= 0 }):
		return fmt.Errorf("ShortWindows %v: must be positive", c.ShortWindows)
	case c.MinSamples < 3:
		return fmt.Errorf("MinSamples %d: must be at least 3", c.MinSamples)
	case c.MinSpan < 0 || c.MinSpan > c.Window:
		return fmt.Errorf("MinSpan %v: must be between 0 and Window (%v)", c.MinSpan, c.Window)
	case c.MaxGap < 0:
		return fmt.Errorf("MaxGap %v: must be positive", c.MaxGap)
	case !(c.MinGrowth > 0) || math.IsInf(c.MinGrowth, 0):
		return fmt.Errorf("MinGrowth %v: must be a positive number", c.MinGrowth)
	case !(c.MinByteGrowth > 0) || math.IsInf(c.MinByteGrowth, 0):
		return fmt.Errorf("MinByteGrowth %v: must be a positive number", c.MinByteGrowth)
	}
	return nil
}

// Status is the case a Result describes; see the package doc for the order
// in which they are decided.
type Status int

// The statuses. The zero Status is invalid.
const (
	StatusNoData Status = iota + 1
	StatusOffline
	StatusNoConsumer
	StatusDataLost
	StatusConsumerAhead
	StatusIdle
	StatusCaughtUp
	StatusNoRetention
	StatusExpiryDue
	StatusExpiring
	StatusTooFewSamples
	StatusShrinking
	StatusHolding
)

var statusNames = [...]string{
	StatusNoData:        "no-data",
	StatusOffline:       "offline",
	StatusNoConsumer:    "no-consumer",
	StatusDataLost:      "data-lost",
	StatusConsumerAhead: "consumer-ahead",
	StatusIdle:          "idle",
	StatusCaughtUp:      "caught-up",
	StatusNoRetention:   "no-retention",
	StatusExpiryDue:     "expiry-due",
	StatusExpiring:      "expiring",
	StatusTooFewSamples: "too-few-samples",
	StatusShrinking:     "shrinking",
	StatusHolding:       "holding",
}

// String returns the status in kebab case, for logs, labels and the CLI.
func (s Status) String() string {
	if s > 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Trend is the direction of one fitted series.
type Trend int

// The trends. TrendUnknown: too few samples, or spanning too short a time,
// to fit.
const (
	TrendUnknown Trend = iota
	TrendGrowing
	TrendHolding
	TrendShrinking
)

// String returns the trend in lower case.
func (t Trend) String() string {
	switch t {
	case TrendUnknown:
		return "unknown"
	case TrendGrowing:
		return "growing"
	case TrendHolding:
		return "holding"
	case TrendShrinking:
		return "shrinking"
	}
	return fmt.Sprintf("Trend(%d)", int(t))
}

// Horizon is the retention limit that decides an expiry.
type Horizon int

// The horizons.
const (
	HorizonNone Horizon = iota
	HorizonTime         // retention.ms
	HorizonSize         // retention.bytes
)

// String returns "none", "time" or "size".
func (h Horizon) String() string {
	switch h {
	case HorizonNone:
		return "none"
	case HorizonTime:
		return "time"
	case HorizonSize:
		return "size"
	}
	return fmt.Sprintf("Horizon(%d)", int(h))
}

// LostRange is the offsets [From, To) deleted by retention before the group
// consumed them.
type LostRange struct {
	From, To int64
}

// Count is the number of records lost.
func (r LostRange) Count() int64 { return r.To - r.From }

// Result is the forecast for a group on a partition at one moment.
type Result struct {
	// Status is the case that applies; it says which fields below are set.
	Status Status
	// Now is the time the forecast was computed for.
	Now time.Time
	// SampledAt is the time of the latest sample in the window, the one
	// Lag, LagAge, UnconsumedBytes and Retention come from. Zero with
	// StatusNoData when the window is empty.
	SampledAt time.Time
	// Lag is the lag in messages (Sample.Lag).
	Lag int64
	// LagAge is the lag age.
	LagAge time.Duration
	// UnconsumedBytes is measured or estimated (see Sample); 0 when
	// unknown.
	UnconsumedBytes int64
	// Retention is the latest retention, the one the forecast uses.
	Retention Retention
	// RetentionChanged is set when a sample in the window had another
	// retention.
	RetentionChanged bool

	// LagAgeFit is the least-squares fit of the lag age over the whole
	// window (Slope in seconds per second) and LagAgeTrend its direction.
	LagAgeFit   Fit
	LagAgeTrend Trend
	// Growth is the lag-age growth rate the forecast divides by, in
	// seconds per second: LagAgeFit's slope, raised to what a confident
	// short window proves when that is more (the most pessimistic), and
	// capped at 1. GrowthWindow is the window that decided it (Config.Window
	// or one of Config.ShortWindows) and GrowthFit that window's fit. Set
	// whatever the status; the forecast uses it only when LagAgeTrend is
	// known.
	Growth       float64
	GrowthWindow time.Duration
	GrowthFit    Fit
	// ByteFit is the fit of the unconsumed bytes over the whole window
	// (Slope in bytes per second: production minus consumption) and
	// ByteTrend its direction; samples without a byte count are left out.
	ByteFit   Fit
	ByteTrend Trend
	// ByteGrowth is the growth rate of the unconsumed bytes the forecast
	// divides by, in bytes per second, chosen like Growth (without a cap),
	// and ByteGrowthWindow the window that decided it.
	ByteGrowth       float64
	ByteGrowthWindow time.Duration
	// ProductionRate and ConsumptionRate are in records per second: the
	// change of the log end offset, and of the committed offset, between
	// the first and the last sample of the window that has it (0 with
	// fewer than two). Offsets are counters, so the two ends give the
	// exact average.
	ProductionRate  float64
	ConsumptionRate float64
	// Gaps is the number of intervals between consecutive usable samples
	// longer than Config.MaxGap.
	Gaps int

	// TimeToLoss is ExpiresAt − now, at least 0, with StatusExpiring; 0
	// with StatusExpiryDue and StatusDataLost.
	TimeToLoss time.Duration
	// ExpiresAt, with StatusExpiring and StatusExpiryDue, is when the
	// oldest unconsumed record reaches (or reached) the retention limit.
	ExpiresAt time.Time
	// Horizon is the limit that decides ExpiresAt.
	Horizon Horizon
	// Lost, with StatusDataLost, is the range deleted unconsumed.
	Lost LostRange
}

// Compute forecasts the time to data loss at now from samples, which must be
// in strictly increasing Time order (older ones than the window are
// ignored). It returns an error wrapping ErrInvalidSample for a malformed
// sample and an error for an invalid cfg; every other case, missing data
// included, is a Status.
func Compute(now time.Time, samples []Sample, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("forecast config: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := validate(samples); err != nil {
		return Result{}, err
	}

	r := Result{Now: now}
	from := now.Add(-cfg.Window)
	w := samples[sort.Search(len(samples), func(i int) bool { return !samples[i].Time.Before(from) }):]
	if len(w) == 0 {
		r.Status = StatusNoData
		return r, nil
	}
	last := w[len(w)-1]
	r.SampledAt = last.Time
	r.Retention = last.Retention

	measure(&r, w, cfg)

	switch {
	case now.Sub(last.Time) > cfg.MaxGap:
		r.Status = StatusNoData
		return r, nil
	case last.Offline:
		r.Status = StatusOffline
		return r, nil
	case last.CommittedOffset == NoOffset:
		r.Status = StatusNoConsumer
		return r, nil
	}

	r.Lag = last.Lag()
	r.LagAge = last.LagAge
	if u, ok := unconsumedBytes(last); ok {
		r.UnconsumedBytes = int64(math.Round(u))
	}

	switch c := last.CommittedOffset; {
	case c < last.LogStartOffset:
		r.Status = StatusDataLost
		r.Lost = LostRange{From: c, To: last.LogStartOffset}
		return r, nil
	case c > last.LogEndOffset:
		r.Status = StatusConsumerAhead
		return r, nil
	case c == last.LogEndOffset:
		r.Status = StatusCaughtUp
		if r.LagAgeFit.Samples >= 2 && r.ProductionRate == 0 {
			r.Status = StatusIdle
		}
		return r, nil
	case !last.Retention.Limited():
		r.Status = StatusNoRetention
		return r, nil
	}

	ret := last.Retention
	// Already past a limit: the record's expiry is in the past. By time it
	// is exact (append time + retention); by size, at the latest sample.
	var due expiry
	if ret.Time > 0 && last.LagAge >= ret.Time {
		due.consider(last.Time.Add(ret.Time-last.LagAge), HorizonTime)
	}
	if ret.Bytes > 0 && r.UnconsumedBytes >= ret.Bytes {
		due.consider(last.Time, HorizonSize)
	}
	if due.set {
		r.Status = StatusExpiryDue
		r.ExpiresAt, r.Horizon = due.at, due.horizon
		return r, nil
	}

	var next expiry
	unknown, shrinking := false, true
	if ret.Time > 0 {
		switch {
		case r.LagAgeTrend == TrendUnknown:
			unknown = true
		case r.Growth > cfg.MinGrowth:
			next.consider(last.Time.Add(seconds((ret.Time-last.LagAge).Seconds()/r.Growth)), HorizonTime)
		}
		shrinking = shrinking && r.Growth < -cfg.MinGrowth
	}
	if ret.Bytes > 0 {
		switch {
		case r.ByteTrend == TrendUnknown:
			unknown = true
		case r.ByteGrowth > cfg.MinByteGrowth:
			u, _ := unconsumedBytes(last)
			next.consider(last.Time.Add(seconds((float64(ret.Bytes)-u)/r.ByteGrowth)), HorizonSize)
		}
		shrinking = shrinking && r.ByteGrowth < -cfg.MinByteGrowth
	}
	switch {
	case next.set:
		r.ExpiresAt, r.Horizon = next.at, next.horizon
		r.Status = StatusExpiring
		if r.TimeToLoss = next.at.Sub(now); r.TimeToLoss <= 0 {
			r.Status, r.TimeToLoss = StatusExpiryDue, 0
		}
	case unknown:
		r.Status = StatusTooFewSamples
	case shrinking:
		r.Status = StatusShrinking
	default:
		r.Status = StatusHolding
	}
	return r, nil
}

// measure fills the fits, trends, rates, gaps and RetentionChanged of r from
// the window w.
func measure(r *Result, w []Sample, cfg Config) {
	r.LagAgeFit = fitLine(w, lagAge)
	r.LagAgeTrend = trend(r.LagAgeFit, cfg.MinGrowth, cfg)
	r.Growth, r.GrowthWindow, r.GrowthFit = raise(w, r.LagAgeFit, lagAge, cfg.MinGrowth, cfg)
	r.Growth = math.Min(r.Growth, maxLagAgeGrowth)
	r.ByteFit = fitLine(w, unconsumedBytes)
	r.ByteTrend = trend(r.ByteFit, cfg.MinByteGrowth, cfg)
	r.ByteGrowth, r.ByteGrowthWindow, _ = raise(w, r.ByteFit, unconsumedBytes, cfg.MinByteGrowth, cfg)

	var firstOn, lastOn, firstUse, lastUse *Sample
	for i := range w {
		s := &w[i]
		if s.Offline {
			continue
		}
		if s.Retention != r.Retention {
			r.RetentionChanged = true
		}
		if firstOn == nil {
			firstOn = s
		}
		lastOn = s
		if !usable(*s) {
			continue
		}
		if lastUse != nil && s.Time.Sub(lastUse.Time) > cfg.MaxGap {
			r.Gaps++
		}
		if firstUse == nil {
			firstUse = s
		}
		lastUse = s
	}
	r.ProductionRate = rate(firstOn, lastOn, func(s *Sample) int64 { return s.LogEndOffset })
	r.ConsumptionRate = rate(firstUse, lastUse, func(s *Sample) int64 { return s.CommittedOffset })
}

// raise returns the growth rate of one series, the window that decides it
// and that window's fit: the whole window's slope (whole), raised by every
// short window whose fit is confident (MinSamples samples over at least
// half the window, R² ≥ shortMinR2) to its slope less shortStdErrs
// standard errors where that is more by over epsilon. Short windows end at
// the latest sample of w.
func raise(w []Sample, whole Fit, value func(Sample) (float64, bool), epsilon float64, cfg Config) (float64, time.Duration, Fit) {
	g, window, fit := whole.Slope, cfg.Window, whole
	end := w[len(w)-1].Time
	for _, sw := range cfg.ShortWindows {
		if sw >= cfg.Window {
			continue
		}
		from := end.Add(-sw)
		f := fitLine(w[sort.Search(len(w), func(i int) bool { return !w[i].Time.Before(from) }):], value)
		if f.Samples < cfg.MinSamples || f.Span < sw/2 || f.R2 < shortMinR2 {
			continue
		}
		if proven := f.Slope - shortStdErrs*f.SlopeStdErr; proven > g+epsilon {
			g, window, fit = proven, sw, f
		}
	}
	return g, window, fit
}

// lagAge is the lag age of a usable sample, in seconds.
func lagAge(s Sample) (float64, bool) { return s.LagAge.Seconds(), usable(s) }

func rate(first, last *Sample, offset func(*Sample) int64) float64 {
	if first == nil || first == last {
		return 0
	}
	return float64(offset(last)-offset(first)) / last.Time.Sub(first.Time).Seconds()
}

// usable reports whether s has a lag age to fit.
func usable(s Sample) bool { return !s.Offline && s.CommittedOffset != NoOffset }

func trend(f Fit, epsilon float64, cfg Config) Trend {
	switch {
	case f.Samples < cfg.MinSamples || f.Span < cfg.MinSpan:
		return TrendUnknown
	case f.Slope > epsilon:
		return TrendGrowing
	case f.Slope < -epsilon:
		return TrendShrinking
	}
	return TrendHolding
}

// unconsumedBytes returns the bytes from the committed offset to the log end
// of a usable sample, measured or estimated, and whether they are known.
func unconsumedBytes(s Sample) (float64, bool) {
	switch c := s.CommittedOffset; {
	case !usable(s):
		return 0, false
	case c >= s.LogEndOffset:
		return 0, true
	case s.UnconsumedBytes > 0:
		return float64(s.UnconsumedBytes), true
	case c <= s.LogStartOffset:
		// Everything retained is unconsumed.
		return float64(s.PartitionBytes), s.PartitionBytes > 0 || s.LogEndOffset == s.LogStartOffset
	case s.PartitionBytes > 0:
		return float64(s.PartitionBytes) * float64(s.LogEndOffset-c) / float64(s.LogEndOffset-s.LogStartOffset), true
	}
	return 0, false
}

// expiry keeps the earliest of the expiries it is shown.
type expiry struct {
	set     bool
	at      time.Time
	horizon Horizon
}

func (e *expiry) consider(at time.Time, h Horizon) {
	if !e.set || at.Before(e.at) {
		*e = expiry{set: true, at: at, horizon: h}
	}
}

// seconds converts to a Duration, saturating near the largest one (about
// 292 years) instead of overflowing.
func seconds(s float64) time.Duration {
	const limit = 9.2e9 // seconds, below math.MaxInt64 ns
	switch {
	case s >= limit:
		return math.MaxInt64
	case s <= -limit:
		return math.MinInt64
	}
	return time.Duration(math.Round(s * 1e9))
}

func validate(samples []Sample) error {
	for i, s := range samples {
		var why string
		if i > 0 && !s.Time.After(samples[i-1].Time) {
			why = "not after the sample before it (" + samples[i-1].Time.Format(time.RFC3339Nano) + ")"
		} else if !s.Offline {
			why = checkSample(s)
		}
		if why != "" {
			return fmt.Errorf("sample %d at %s: %s: %w", i, s.Time.Format(time.RFC3339Nano), why, ErrInvalidSample)
		}
	}
	return nil
}

// checkSample returns what is wrong with an online sample, or "".
func checkSample(s Sample) string {
	switch {
	case s.LogStartOffset < 0:
		return fmt.Sprintf("log start offset %d is negative", s.LogStartOffset)
	case s.LogEndOffset < s.LogStartOffset:
		return fmt.Sprintf("log end offset %d below log start offset %d", s.LogEndOffset, s.LogStartOffset)
	case s.CommittedOffset < 0 && s.CommittedOffset != NoOffset:
		return fmt.Sprintf("committed offset %d is negative and not NoOffset", s.CommittedOffset)
	case s.LagAge < 0:
		return fmt.Sprintf("lag age %v is negative", s.LagAge)
	case s.PartitionBytes < 0:
		return fmt.Sprintf("partition bytes %d is negative", s.PartitionBytes)
	case s.UnconsumedBytes < 0:
		return fmt.Sprintf("unconsumed bytes %d is negative", s.UnconsumedBytes)
	case s.Retention.Time < 0 || s.Retention.Bytes < 0:
		return fmt.Sprintf("retention %v / %d bytes is negative", s.Retention.Time, s.Retention.Bytes)
	}
	if _, ok := unconsumedBytes(s); s.Retention.Bytes > 0 && usable(s) && !ok {
		return "retention.bytes is set but neither PartitionBytes nor UnconsumedBytes is"
	}
	return ""
}
