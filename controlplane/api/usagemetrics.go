package api

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// usageMetrics are the metering handlers' metrics (UsageCollector).
type usageMetrics struct {
	now     func() time.Time
	reports *prometheus.CounterVec // outcome: applied, duplicate

	mu sync.Mutex
	// lastApplied is when this replica last applied a report of each
	// broker (bounded: one entry per broker id).
	lastApplied map[int32]time.Time
}

var reportAgeDesc = prometheus.NewDesc("sluice_controlplane_usage_report_age_seconds",
	"Seconds since this control-plane replica last applied a usage report (BrokerService.ReportUsage) of the broker; "+
		"brokers report every few seconds, so a growing age means its usage is not being metered. With several replicas "+
		"behind a load balancer, each applies only the reports it receives: aggregate with min over replicas.",
	[]string{"broker"}, nil)

func newUsageMetrics(now func() time.Time) *usageMetrics {
	return &usageMetrics{
		now: now,
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_controlplane_usage_reports_total",
			Help: "Usage reports (BrokerService.ReportUsage) this replica answered, by outcome: applied (counted now) or duplicate (a retry of a report counted before, acknowledged and not counted again).",
		}, []string{"outcome"}),
		lastApplied: make(map[int32]time.Time),
	}
}

func (m *usageMetrics) observe(brokerID int32, duplicate bool) {
	if duplicate {
		m.reports.WithLabelValues("duplicate").Inc()
		return
	}
	m.reports.WithLabelValues("applied").Inc()
	m.mu.Lock()
	m.lastApplied[brokerID] = m.now()
	m.mu.Unlock()
}

func (m *usageMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.reports.Describe(ch)
	ch <- reportAgeDesc
}

func (m *usageMetrics) Collect(ch chan<- prometheus.Metric) {
	m.reports.Collect(ch)
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, at := range m.lastApplied {
		ch <- prometheus.MustNewConstMetric(reportAgeDesc, prometheus.GaugeValue, max(now.Sub(at).Seconds(), 0), strconv.Itoa(int(id)))
	}
}

// UsageCollector returns the metering handlers' metrics:
// sluice_controlplane_usage_reports_total{outcome} and
// sluice_controlplane_usage_report_age_seconds{broker}.
func (a *API) UsageCollector() prometheus.Collector { return a.usage }
