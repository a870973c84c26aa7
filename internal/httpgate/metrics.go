package httpgate

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	refused *prometheus.CounterVec
	muted   prometheus.Counter
	wait    prometheus.Histogram
}

// newMetrics registers the gate's metrics on reg (none when reg is nil):
// requests refused before their body was read, by reason; the time
// admitted requests waited for memory; the memory held and the
// capacity of the shared pools.
func newMetrics(reg prometheus.Registerer, namespace, subsystem string, g *Gate) *metrics {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "gate_refused_total",
			Help: "Requests refused before their body was read, by reason: unauthenticated (credentials refused), too_large (Content-Length over the procedure's limit), admit (the server's header checks: quotas), memory (no room in the request memory budget within the wait).",
		}, []string{"reason"}),
		muted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "gate_muted_total",
			Help: "Calls held until the delay of a rate refusal their caller got on the same connection had passed (KIP-219's muted channel), unread.",
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem, Name: "request_memory_wait_seconds",
			Help:    "Time admitted requests waited for room in the request memory budget.",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 2.5, 5},
		}),
	}
	if reg == nil {
		return m
	}
	used := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "request_memory_bytes",
		Help: "Memory held by the requests in flight (their bodies times the decoding factor) in the server's pool, brokers' requests excepted (request_memory_internal_bytes).",
	}, func() float64 { return float64(g.used(g.server)) })
	intern := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "request_memory_internal_bytes",
		Help: "Memory held by brokers' requests in flight, in their own pool.",
	}, func() float64 { return float64(g.used(g.intern)) })
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Subsystem: subsystem, Name: "request_memory_limit_bytes",
		Help: "The server pool's capacity (--request-memory).",
	})
	limit.Set(float64(g.cfg.ServerBytes))
	reg.MustRegister(m.refused, m.muted, m.wait, used, intern, limit)
	return m
}

func (m *metrics) observeWait(d time.Duration) { m.wait.Observe(d.Seconds()) }

func (g *Gate) used(p *pool) int64 {
	g.budget.mu.Lock()
	defer g.budget.mu.Unlock()
	return p.used
}
