package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/controlplane/store"
	"github.com/sluicemq/sluice/controlplane/store/sqlstore"
)

// writeQueueCollector exports the write queue of a single-writer store
// (SQLite: sqlstore.Config.SingleWriter) per lane: how many writes wait
// now, how many entered it, and their total time in it.
type writeQueueCollector struct {
	db                      *sqlstore.DB
	waiting, writes, waited *prometheus.Desc
}

// storeCollector returns the collector of st's write queue, or nil when
// its writes do not queue (Postgres).
func storeCollector(st store.Store) prometheus.Collector {
	d, ok := st.(interface{ DB() *sqlstore.DB })
	if !ok {
		return nil
	}
	if _, queued := d.DB().WriteQueue(); !queued {
		return nil
	}
	lane := []string{"lane"}
	return &writeQueueCollector{
		db:      d.DB(),
		waiting: prometheus.NewDesc("sluice_controlplane_store_write_queue_waiting", "Writes waiting for the store's one write connection (SQLite), by lane (urgent: broker heartbeats and the controller lease, which go first).", lane, nil),
		writes:  prometheus.NewDesc("sluice_controlplane_store_write_queue_writes_total", "Writes that queued for the store's one write connection (SQLite), by lane.", lane, nil),
		waited:  prometheus.NewDesc("sluice_controlplane_store_write_queue_wait_seconds_total", "Total time writes waited in the queue for the store's one write connection (SQLite), by lane.", lane, nil),
	}
}

func (c *writeQueueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waiting
	ch <- c.writes
	ch <- c.waited
}

func (c *writeQueueCollector) Collect(ch chan<- prometheus.Metric) {
	stats, _ := c.db.WriteQueue()
	for lane, st := range stats {
		name := "normal"
		if sqlstore.Lane(lane) == sqlstore.LaneUrgent {
			name = "urgent"
		}
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting), name)
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(st.Writes), name)
		ch <- prometheus.MustNewConstMetric(c.waited, prometheus.CounterValue, st.Waited.Seconds(), name)
	}
}
