package tiered

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a Tier's Prometheus metrics. Labels stay bounded: the
// per-partition backlog is summed into one gauge.
type Metrics struct {
	uploadedBytes    prometheus.Counter
	uploadedSegments prometheus.Counter
	uploadErrors     prometheus.Counter
	uploadSeconds    prometheus.Histogram
	pendingBytes     prometheus.GaugeFunc
	pendingSegments  prometheus.GaugeFunc
	remoteReadBytes  prometheus.Counter
	cacheHits        prometheus.Counter
	cacheMisses      prometheus.Counter
	prefetched       prometheus.Counter
	throttled        prometheus.Counter
	corrupt          prometheus.Counter
	remoteDeleted    prometheus.Counter
	orphans          prometheus.Counter

	mu      sync.Mutex
	pending map[partKey]pending
}

type pending struct{ bytes, segments int64 }

// NewMetrics makes a Tier's metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{pending: map[partKey]pending{}}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_tier_" + name, Help: help})
	}
	m.uploadedBytes = c("uploaded_bytes_total", "Bytes of log segments copied to the object store.")
	m.uploadedSegments = c("uploaded_segments_total", "Log segments copied to the object store.")
	m.uploadErrors = c("upload_errors_total", "Segment copies that failed (they are retried).")
	m.uploadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "sluice_tier_upload_duration_seconds", Help: "Time to copy one segment, metadata included.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	})
	m.pendingBytes = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_tier_pending_bytes", Help: "Bytes of closed segments of led partitions not copied to the object store yet.",
	}, func() float64 { return float64(m.pendingTotal().bytes) })
	m.pendingSegments = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_tier_pending_segments", Help: "Closed segments of led partitions not copied to the object store yet.",
	}, func() float64 { return float64(m.pendingTotal().segments) })
	m.remoteReadBytes = c("remote_read_bytes_total", "Bytes read from the object store for cold reads.")
	m.cacheHits = c("cache_hits_total", "Cold-read chunks served from the local cache.")
	m.cacheMisses = c("cache_misses_total", "Cold-read chunks fetched from the object store.")
	m.prefetched = c("prefetched_chunks_total", "Chunks fetched ahead of sequential cold reads.")
	m.throttled = c("read_throttled_seconds_total", "Time cold reads waited for the bytes-per-second limit.")
	m.corrupt = c("corrupt_reads_total", "Cold reads refused because a remote object failed its CRC or index checks.")
	m.remoteDeleted = c("remote_segments_deleted_total", "Remote segments deleted by total retention.")
	m.orphans = c("orphaned_objects_deleted_total", "Objects no finished copy accounted for (a deposed leader's late upload), deleted.")
	if reg != nil {
		for _, col := range []prometheus.Collector{m.uploadedBytes, m.uploadedSegments, m.uploadErrors, m.uploadSeconds,
			m.pendingBytes, m.pendingSegments, m.remoteReadBytes, m.cacheHits, m.cacheMisses, m.prefetched, m.throttled, m.corrupt, m.remoteDeleted, m.orphans} {
			if err := reg.Register(col); err != nil {
				panic(fmt.Sprintf("tiered: register metrics: %v", err))
			}
		}
	}
	return m
}

func (m *Metrics) uploaded(n int64, d time.Duration) {
	m.uploadedBytes.Add(float64(n))
	m.uploadedSegments.Inc()
	m.uploadSeconds.Observe(d.Seconds())
}

func (m *Metrics) setPending(p Partition, bytes, segments int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if segments == 0 {
		delete(m.pending, p.key())
		return
	}
	m.pending[p.key()] = pending{bytes, segments}
}

func (m *Metrics) pendingTotal() pending {
	m.mu.Lock()
	defer m.mu.Unlock()
	var t pending
	for _, n := range m.pending {
		t.bytes += n.bytes
		t.segments += n.segments
	}
	return t
}
