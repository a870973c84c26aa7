package kafka

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are the listener's: requests by API, version and outcome,
// their latency by API, connections (all, and authenticated per tenant),
// SASL failures by mechanism or reason, and the time tenants were held by
// their quotas.
type metrics struct {
	requests          *prometheus.CounterVec
	latency           *prometheus.HistogramVec
	connections       prometheus.Gauge
	tenantConnections *prometheus.GaugeVec
	saslFailures      *prometheus.CounterVec
	throttleSeconds   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "kafka", Name: "requests_total",
			Help: "Kafka protocol requests by API, version and outcome (ok, error, malformed, unsupported_version, unauthenticated, session_ended, refused; too_many_connections for a connection closed at once, API unknown)."}, []string{"api", "version", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "sluice", Subsystem: "kafka", Name: "request_duration_seconds",
			Help: "Time to serve a Kafka protocol request, by API (from its decoding to its answer, quota holds included).", Buckets: prometheus.ExponentialBuckets(0.0002, 2.5, 14)}, []string{"api"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "kafka", Name: "connections",
			Help: "Open Kafka protocol connections, authenticated or not."}),
		tenantConnections: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sluice", Subsystem: "kafka", Name: "tenant_connections",
			Help: "Authenticated Kafka protocol connections by tenant."}, []string{"tenant"}),
		saslFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "kafka", Name: "sasl_failures_total",
			Help: "Failed SASL handshakes and authentications by mechanism (plain, oauthbearer) or reason (unsupported_mechanism, illegal_state)."}, []string{"reason"}),
		throttleSeconds: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sluice", Subsystem: "kafka", Name: "throttle_seconds_total",
			Help: "Time Kafka protocol requests of a tenant were held by its quotas (the connection muted, KIP-219)."}, []string{"tenant"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.latency, m.connections, m.tenantConnections, m.saslFailures, m.throttleSeconds)
	}
	return m
}

// apiName is an API key's name, bounded to the keys kmsg knows.
func apiName(key int16) string {
	if n := kmsg.NameForKey(key); n != "" {
		return n
	}
	return "unknown"
}

func (m *metrics) request(key, version int16, outcome string) {
	v := strconv.Itoa(int(version))
	if !supported(key, version) {
		v = "other" // bounded: a client cannot make a series per version number
	}
	m.requests.WithLabelValues(apiName(key), v, outcome).Inc()
}

func (m *metrics) observe(key int16, d time.Duration) {
	m.latency.WithLabelValues(apiName(key)).Observe(d.Seconds())
}

func (m *metrics) saslFailure(reason string) { m.saslFailures.WithLabelValues(reason).Inc() }

func (m *metrics) throttled(tenant string, d time.Duration) {
	m.throttleSeconds.WithLabelValues(tenant).Add(d.Seconds())
}
