package alerting

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/alerts/forecast"
	"github.com/sluicemq/sluice/controlplane/store"
)

// MaxSeries caps the group × partition label sets exported; the ones whose
// oldest unconsumed record is oldest are kept.
var MaxSeries = 10000

var (
	descLag = prometheus.NewDesc("sluice_consumer_lag_messages",
		"Records of the partition the group has left to read (the brokers' lag: from the committed offset up to the last stable offset, transaction markers and aborted transactions right after the committed offset not counted), as last sampled.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descLagAge = prometheus.NewDesc("sluice_consumer_lag_seconds",
		"Age of the group's oldest unconsumed record on the partition (0 when caught up), as last sampled.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descTTL = prometheus.NewDesc("sluice_time_to_data_loss_seconds",
		"Forecast time until retention deletes the group's oldest unconsumed record (0: due now). Absent while the lag age does not grow.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descLost = prometheus.NewDesc("sluice_consumer_lost_records_total",
		"Records retention deleted before the group consumed them, counted since this control-plane replica started.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descRetention = prometheus.NewDesc("sluice_topic_retention_seconds",
		"The topic's retention.ms in seconds (absent when unlimited), for the PromQL forecast rule.",
		[]string{"tenant", "topic"}, nil)
	descTruncated = prometheus.NewDesc("sluice_consumer_lag_metrics_truncated",
		"Group × partition label sets left out to stay within the series cap.", nil, nil)
	descRound = prometheus.NewDesc("sluice_lag_round_seconds",
		"How long the latest lag round (sampling every group × partition and evaluating its alerts) took.", nil, nil)
	descSkipped = prometheus.NewDesc("sluice_lag_evaluation_skipped",
		"Group × partitions the latest lag round left unevaluated because it ran out of its interval (the next round starts with them).", nil, nil)
)

type metricRow struct {
	sample store.LagSample
	result forecast.Result
}

// collector exports the last evaluation.
type collector struct {
	mu        sync.Mutex
	rows      []metricRow
	truncated int
	lost      map[store.LagKey]int64 // records counted lost
	lostTo    map[store.LagKey]int64 // counted up to this offset
	skipped   int                    // keys the latest evaluation left
	roundTime time.Duration          // of the latest round
}

func newCollector() *collector {
	return &collector{lost: map[store.LagKey]int64{}, lostTo: map[store.LagKey]int64{}}
}

// update replaces the exported evaluation with rows, but for the keys in
// keep (left unevaluated by a round that ran out of time), whose rows stay
// as last exported; skipped is how many keys the round left.
func (c *collector) update(rows []metricRow, keep map[store.LagKey]bool, skipped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skipped = skipped
	if len(keep) > 0 {
		for _, r := range c.rows {
			if keep[r.sample.LagKey] {
				rows = append(rows, r)
			}
		}
	}
	slices.SortFunc(rows, func(a, b metricRow) int { return cmp.Compare(b.sample.LagAgeMs, a.sample.LagAgeMs) })
	c.truncated = max(0, len(rows)-MaxSeries)
	rows = rows[:min(len(rows), MaxSeries)]
	for _, r := range rows {
		k := r.sample.LagKey
		if r.result.Status == forecast.StatusDataLost && r.result.Lost.To > c.lostTo[k] {
			from := max(r.result.Lost.From, c.lostTo[k])
			c.lost[k] += r.result.Lost.To - from
			c.lostTo[k] = r.result.Lost.To
		}
	}
	c.rows = rows
}

// round records how long a round took.
func (c *collector) round(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roundTime = d
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLag, descLagAge, descTTL, descLost, descRetention, descTruncated, descRound, descSkipped} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	topics := map[[2]string]int64{}
	for _, r := range c.rows {
		s := r.sample
		l := []string{s.TenantID, s.Group, s.TopicName, strconv.Itoa(int(s.Partition))}
		ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(s.LagMessages), l...)
		ch <- prometheus.MustNewConstMetric(descLagAge, prometheus.GaugeValue, float64(s.LagAgeMs)/1000, l...)
		ch <- prometheus.MustNewConstMetric(descLost, prometheus.CounterValue, float64(c.lost[s.LagKey]), l...)
		switch r.result.Status {
		case forecast.StatusExpiring, forecast.StatusExpiryDue:
			ch <- prometheus.MustNewConstMetric(descTTL, prometheus.GaugeValue, r.result.TimeToLoss.Seconds(), l...)
		}
		if s.RetentionMs > 0 {
			topics[[2]string{s.TenantID, s.TopicName}] = s.RetentionMs
		}
	}
	for t, ms := range topics {
		ch <- prometheus.MustNewConstMetric(descRetention, prometheus.GaugeValue, float64(ms)/1000, t[0], t[1])
	}
	ch <- prometheus.MustNewConstMetric(descTruncated, prometheus.GaugeValue, float64(c.truncated))
	ch <- prometheus.MustNewConstMetric(descRound, prometheus.GaugeValue, c.roundTime.Seconds())
	ch <- prometheus.MustNewConstMetric(descSkipped, prometheus.GaugeValue, float64(c.skipped))
}
