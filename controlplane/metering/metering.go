// Package metering is the control plane's own usage meters: every Interval
// it counts, per tenant, cold storage byte-seconds (the bytes of its
// COPY_FINISHED remote segments), hot storage byte-seconds (the
// hot_storage_bytes of the brokers' fresh quota reports, leaders' local
// logs) and partition-seconds (its topics' partitions), each over the time
// since the meter last moved, through store.UsageStore.AdvanceMeter. It
// also runs the billing job (billing.Job.RunOnce) every BillingInterval,
// which records its own metrics (billing.Metrics).
//
// Every control-plane replica runs the loop: AdvanceMeter is a
// compare-and-set on the end of the interval last counted, so replicas
// running at once count each interval once, and one replica alone keeps
// every meter moving. The billing job is safe to run on every replica too.
//
// Intervals end on whole seconds, so every amount is an exact integer
// (holding × seconds). An interval is counted at the holdings read when it
// is counted: a holding that changed within it is counted as it is at its
// end, so a meter is off by at most the change times Interval (10 s) per
// interval. After a gap (every replica down for a while) the whole gap is
// counted at the holdings read after it. Hot storage is counted only once
// the replica has run for StartupGrace (two report-freshness windows), so
// that the brokers' quota reports, which stop while no replica answers
// them, are fresh again: the interval after a full outage is not counted
// as empty. The system tenant (internal topics) is not metered.
//
// Goroutines: Run is the one loop; it returns when its context ends.
package metering

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/controlplane/quota"
	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/tenants/system"
)

// The meters' names in the store.
const (
	MeterColdStorage = "cold_storage"
	MeterHotStorage  = "hot_storage"
	MeterPartitions  = "partitions"
)

// Config shapes the loop.
type Config struct {
	// Interval is how often the meters advance.
	Interval time.Duration
	// BillingInterval is how often the billing job runs (0: never).
	BillingInterval time.Duration
	// StartupGrace is how long after Run starts hot storage is first
	// counted (default 2 × quota.DefaultFresh).
	StartupGrace time.Duration
}

// Deps are the loop's collaborators.
type Deps struct {
	Store store.Store
	// Billing runs the billing job once (nil: none).
	Billing func(context.Context) error
	Logger  *slog.Logger
	// Clock is the time intervals are metered by and the loop ticks on;
	// clock.Real when nil.
	Clock clock.Clock
}

// Meter runs the control plane's meters.
type Meter struct {
	cfg     Config
	st      store.Store
	billing func(context.Context) error
	logger  *slog.Logger
	now     func() time.Time
	clock   clock.Clock
	started time.Time

	runs        *prometheus.CounterVec // meter, result
	lastAdvance *prometheus.GaugeVec   // meter
}

// New returns a Meter; it starts nothing.
func New(cfg Config, deps Deps) *Meter {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	deps.Clock = clock.Or(deps.Clock)
	if cfg.StartupGrace <= 0 {
		cfg.StartupGrace = 2 * quota.DefaultFresh
	}
	return &Meter{
		cfg: cfg, st: deps.Store, billing: deps.Billing, logger: deps.Logger, now: deps.Clock.Now, clock: deps.Clock, started: deps.Clock.Now(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controlplane_meter_runs_total",
			Help: "Runs of the control plane's usage meters (meter: cold_storage, hot_storage, partitions) by result: advanced (this replica counted an interval), skipped (another replica counted it first, or nothing to count yet), error.",
		}, []string{"meter", "result"}),
		lastAdvance: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_controlplane_meter_last_success_timestamp_seconds",
			Help: "When this replica last ran the meter without error, Unix seconds: time() minus it growing past a few intervals on every replica means usage is not being counted. Aggregate with max over replicas.",
		}, []string{"meter"}),
	}
}

// Collector returns the loop's metrics.
func (m *Meter) Collector() prometheus.Collector { return collectors{m.runs, m.lastAdvance} }

type collectors []prometheus.Collector

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}

// Run advances the meters every Interval and runs the billing job every
// BillingInterval until ctx ends; the first of each one interval after it
// starts, not while the replica starts.
func (m *Meter) Run(ctx context.Context) {
	t := m.clock.NewTicker(m.cfg.Interval)
	defer t.Stop()
	lastBilling := m.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := m.RunOnce(ctx); err != nil && ctx.Err() == nil {
			m.logger.Warn("usage meters", "err", err)
		}
		if m.billing != nil && m.cfg.BillingInterval > 0 && m.now().Sub(lastBilling) >= m.cfg.BillingInterval {
			lastBilling = m.now()
			m.runBilling(ctx)
		}
	}
}

// runBilling runs the billing job; it records its own metrics
// (billing.Metrics).
func (m *Meter) runBilling(ctx context.Context) {
	if err := m.billing(ctx); err != nil && ctx.Err() == nil {
		m.logger.Warn("billing job", "err", err)
	}
}

// RunOnce advances every meter to now (hot storage only once the startup
// grace is over). It returns the errors joined; a failed meter does not
// stop the others.
func (m *Meter) RunOnce(ctx context.Context) error {
	// Whole seconds: every piece of an interval is then a whole number of
	// seconds, and a holding times it an exact integer.
	now := m.now().Truncate(time.Second)
	var errs []error
	errs = append(errs, m.advance(ctx, MeterColdStorage, now, m.perSecond(ctx, store.UsageColdStorageByteSeconds, m.st.ColdStorageBytes)))
	errs = append(errs, m.advance(ctx, MeterPartitions, now, m.perSecond(ctx, store.UsagePartitionSeconds, m.st.PartitionCounts)))
	if now.Sub(m.started) >= m.cfg.StartupGrace {
		errs = append(errs, m.advance(ctx, MeterHotStorage, now, m.perSecond(ctx, store.UsageHotStorageByteSeconds, m.hotStorageBytes(now))))
	}
	return errors.Join(errs...)
}

func (m *Meter) advance(ctx context.Context, meter string, now time.Time, compute func(from, to time.Time) ([]store.UsageAmount, error)) error {
	res, err := m.st.AdvanceMeter(ctx, meter, now, compute)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.runs.WithLabelValues(meter, "error").Inc()
		}
		return err
	case res.Advanced:
		m.runs.WithLabelValues(meter, "advanced").Inc()
	default:
		m.runs.WithLabelValues(meter, "skipped").Inc()
	}
	m.lastAdvance.WithLabelValues(meter).Set(float64(m.now().UnixMilli()) / 1000)
	return nil
}

// perSecond returns an AdvanceMeter compute that counts, for each piece,
// every tenant's holding (read once per advance, at its first piece) times
// the piece's length in seconds, as dim.
func (m *Meter) perSecond(ctx context.Context, dim store.UsageDimension, read func(context.Context) (map[string]int64, error)) func(from, to time.Time) ([]store.UsageAmount, error) {
	var (
		once     sync.Once
		holdings map[string]int64
		err      error
	)
	return func(from, to time.Time) ([]store.UsageAmount, error) {
		once.Do(func() { holdings, err = read(ctx) })
		if err != nil {
			return nil, err
		}
		ms := to.Sub(from).Milliseconds()
		out := make([]store.UsageAmount, 0, len(holdings))
		for tenant, h := range holdings {
			if tenant == system.TenantID || h <= 0 {
				continue
			}
			if a := timesSeconds(h, ms); a > 0 {
				out = append(out, store.UsageAmount{TenantID: tenant, Dimension: dim, Amount: a})
			}
		}
		return out, nil
	}
}

// timesSeconds is h × ms / 1000 rounded down, in 128-bit arithmetic,
// saturating at the int64 maximum (h, ms ≥ 0).
func timesSeconds(h, ms int64) int64 {
	if h <= 0 || ms <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(h), uint64(ms))
	if hi >= 1000 {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, 1000)
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// hotStorageBytes returns a reader of every tenant's hot bytes: the sum of
// the brokers' fresh quota reports.
func (m *Meter) hotStorageBytes(now time.Time) func(context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		cfg := quota.DefaultConfig()
		stored, err := m.st.ListQuotaReports(ctx, nil, now.Add(-cfg.Fresh))
		if err != nil {
			return nil, err
		}
		byTenant := map[string][]quota.Report{}
		for _, r := range stored {
			byTenant[r.TenantID] = append(byTenant[r.TenantID], quota.Report{BrokerID: r.BrokerID, At: r.At, HotStorageBytes: r.HotStorageBytes})
		}
		out := make(map[string]int64, len(byTenant))
		for tenant, rs := range byTenant {
			out[tenant] = quota.Sum(cfg.FreshReports(rs, now), 0).HotStorageBytes
		}
		return out, nil
	}
}
