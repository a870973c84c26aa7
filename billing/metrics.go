package billing

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descRuns = prometheus.NewDesc("sluice_billing_job_runs_total",
		"Billing job runs by this control-plane replica, by result (ok, error: some tenant's invoice could not be computed or stored).",
		[]string{"result"}, nil)
	descLastSuccess = prometheus.NewDesc("sluice_billing_job_last_success_timestamp_seconds",
		"Unix time of the billing job's last run without error on this replica (absent before the first).", nil, nil)
	descLastDuration = prometheus.NewDesc("sluice_billing_job_last_run_seconds",
		"How long the billing job's last run took.", nil, nil)
	descFinalized = prometheus.NewDesc("sluice_billing_invoices_finalized_total",
		"Invoices this replica finalized.", nil, nil)
	descDrafts = prometheus.NewDesc("sluice_billing_drafts_computed_total",
		"Draft invoices this replica computed and stored.", nil, nil)
)

// Metrics are the billing job's health, a prometheus.Collector: register
// it (once) where the control plane registers its collectors, and pass it
// in JobConfig.
type Metrics struct {
	mu           sync.Mutex
	ok, failed   float64
	lastSuccess  time.Time
	lastDuration time.Duration
	finalized    float64
	drafts       float64
}

// NewMetrics returns the job's metrics, all zero.
func NewMetrics() *Metrics { return &Metrics{} }

func (m *Metrics) record(start, end time.Time, res RunResult, err error) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.failed++
	} else {
		m.ok++
		m.lastSuccess = end
	}
	m.lastDuration = end.Sub(start)
	m.finalized += float64(res.Finalized)
	m.drafts += float64(res.Drafts)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuns, descLastSuccess, descLastDuration, descFinalized, descDrafts} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.CounterValue, m.ok, "ok")
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.CounterValue, m.failed, "error")
	if !m.lastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(descLastSuccess, prometheus.GaugeValue, float64(m.lastSuccess.UnixMilli())/1000)
	}
	ch <- prometheus.MustNewConstMetric(descLastDuration, prometheus.GaugeValue, m.lastDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(descFinalized, prometheus.CounterValue, m.finalized)
	ch <- prometheus.MustNewConstMetric(descDrafts, prometheus.CounterValue, m.drafts)
}
