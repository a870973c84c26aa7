package groups

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/coordinator"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/tenants/system"
)

// Group lag metrics. Every --group-lag-metrics-interval the broker computes
// (ComputeLag) the lag of each (group, topic, partition) with a committed
// offset in the groups it coordinates (the offsets partitions it leads),
// with the code DescribeGroup uses (fillLags: ListOffsets and one Fetch per
// lagging partition at its leader, with the broker credential). lagCollector
// exports the last result as constant metrics, so a scrape never makes an
// RPC, and the series of a deleted group or topic are gone after the next
// computation rather than left behind (a group whose coordinator moved
// away is dropped at the next scrape).
//
// Cardinality is capped at --group-lag-metrics-max-series label sets per
// broker (capLagSeries): the groups that lag most keep one label set per
// partition; the others get one per topic (partition="all"); if even those
// do not fit, the least-lagging groups are left out. Both are counted.

var (
	descGroupLagMessages = prometheus.NewDesc("sluice_group_lag_messages",
		"Records the group has left to read on the partition, as a read_committed consumer: last stable offset (the high watermark without open transactions) - committed offset, not counting transaction markers and aborted transactions right after the committed offset (partition=\"all\": summed over the topic's partitions), for groups this broker coordinates.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descGroupLagSeconds = prometheus.NewDesc("sluice_group_lag_seconds",
		"Age of the group's oldest unconsumed record (now - timestamp of the first record a read_committed consumer at the committed offset is given; 0 when caught up; partition=\"all\": the topic's worst partition), for groups this broker coordinates.",
		[]string{"tenant", "group", "topic", "partition"}, nil)
	descGroupLagTruncated = prometheus.NewDesc("sluice_group_lag_metrics_truncated",
		"Consumer groups whose lag this broker exports per topic (partition=\"all\") instead of per partition, to stay within --group-lag-metrics-max-series.",
		nil, nil)
	descGroupLagOmitted = prometheus.NewDesc("sluice_group_lag_metrics_omitted",
		"Consumer groups whose lag this broker does not export at all, because even their per-topic series would exceed --group-lag-metrics-max-series (the groups that lag least).",
		nil, nil)
)

// lagRow is one group's lag on one partition.
type lagRow struct {
	tenant, group, topic string
	partition            int32
	messages             int64
	seconds              float64
}

// lagSeries is one exported label set: a partition, or partition "all"
// for a topic's partitions aggregated (messages summed, seconds the max).
type lagSeries struct {
	tenant, group, topic, partition string
	messages                        int64
	seconds                         float64
}

// lagSnapshot is the result of one lag computation.
type lagSnapshot struct {
	series []lagSeries
	// truncated counts groups exported per topic, omitted groups left out.
	truncated, omitted int
}

// lagGroup is one group's rows, sorted by topic then partition.
type lagGroup struct {
	rows     []lagRow
	topics   int // distinct topics: the label sets of its aggregate
	worst    float64
	messages int64
}

// capLagSeries turns rows into at most maxSeries label sets. Groups are
// ranked by lag, worst first (oldest unconsumed record, then records
// behind, then tenant and group id, so the result is deterministic), and
// each is exported whole at one level: the top of the ranking one label set
// per partition, the next ones one per topic (partition="all", counted as
// truncated), and, when even per-topic label sets do not all fit, the
// bottom of the ranking not at all (omitted). Each boundary is the longest
// prefix of the ranking that fits, so a group that lags more never gets
// less detail than one that lags less.
func capLagSeries(rows []lagRow, maxSeries int) lagSnapshot {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b lagRow) int {
		return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.group, b.group),
			cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	// A label set must appear once in a scrape; the coordinator keys
	// offsets by topic id, so a name could only repeat across a topic's
	// deletion and re-creation. Keep the first.
	rows = slices.CompactFunc(rows, func(a, b lagRow) bool {
		return a.tenant == b.tenant && a.group == b.group && a.topic == b.topic && a.partition == b.partition
	})
	var groups []*lagGroup
	for i, r := range rows {
		if i == 0 || r.tenant != rows[i-1].tenant || r.group != rows[i-1].group {
			groups = append(groups, &lagGroup{})
		}
		g := groups[len(groups)-1]
		if len(g.rows) == 0 || r.topic != g.rows[len(g.rows)-1].topic {
			g.topics++
		}
		g.rows = append(g.rows, r)
		g.worst = max(g.worst, r.seconds)
		g.messages += r.messages
	}
	slices.SortStableFunc(groups, func(a, b *lagGroup) int {
		return cmp.Or(cmp.Compare(b.worst, a.worst), cmp.Compare(b.messages, a.messages))
	}) // ties stay in tenant, group order

	// exported: the longest prefix whose per-topic label sets fit.
	exported, used := 0, 0
	for _, g := range groups {
		if used+g.topics > maxSeries {
			break
		}
		used += g.topics
		exported++
	}
	// detailed: the longest prefix of those that may have per-partition
	// label sets in place of per-topic ones.
	detailed := 0
	for _, g := range groups[:exported] {
		extra := len(g.rows) - g.topics
		if used+extra > maxSeries {
			break
		}
		used += extra
		detailed++
	}
	snap := lagSnapshot{truncated: exported - detailed, omitted: len(groups) - exported}
	for i, g := range groups[:exported] {
		if i < detailed {
			for _, r := range g.rows {
				snap.series = append(snap.series, lagSeries{r.tenant, r.group, r.topic, strconv.Itoa(int(r.partition)), r.messages, r.seconds})
			}
			continue
		}
		for _, r := range g.rows {
			if n := len(snap.series); n > 0 {
				if last := &snap.series[n-1]; last.partition == "all" && last.tenant == r.tenant && last.group == r.group && last.topic == r.topic {
					last.messages += r.messages
					last.seconds = max(last.seconds, r.seconds)
					continue
				}
			}
			snap.series = append(snap.series, lagSeries{r.tenant, r.group, r.topic, "all", r.messages, r.seconds})
		}
	}
	return snap
}

// lagCollector exports the last lagSnapshot of the broker's groups.
type lagCollector struct {
	s    *Service
	last atomic.Pointer[lagSnapshot]
	// report is the last computation uncapped, for LagReport.
	report atomic.Pointer[LagReport]
}

func (c *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGroupLagMessages
	ch <- descGroupLagSeconds
	ch <- descGroupLagTruncated
	ch <- descGroupLagOmitted
}

// Collect sends the last snapshot, less the groups whose offsets partition
// this broker no longer leads (their new coordinator exports them), so
// that a group is exported by one broker.
func (c *lagCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.last.Load()
	if snap == nil {
		snap = &lagSnapshot{}
	}
	ch <- prometheus.MustNewConstMetric(descGroupLagTruncated, prometheus.GaugeValue, float64(snap.truncated))
	ch <- prometheus.MustNewConstMetric(descGroupLagOmitted, prometheus.GaugeValue, float64(snap.omitted))
	t, ok := offsetsTopic(c.s.deps.View())
	if !ok {
		return
	}
	for _, s := range snap.series {
		if t.Partitions[coordinator.PartitionOf(s.tenant, s.group, len(t.Partitions))].Leader != c.s.cfg.BrokerID {
			continue
		}
		// Not Must: a label value that is not UTF-8 (a group id written
		// before ids were checked) must not panic the scrape.
		if m, err := prometheus.NewConstMetric(descGroupLagMessages, prometheus.GaugeValue, float64(s.messages), s.tenant, s.group, s.topic, s.partition); err == nil {
			ch <- m
		}
		if m, err := prometheus.NewConstMetric(descGroupLagSeconds, prometheus.GaugeValue, s.seconds, s.tenant, s.group, s.topic, s.partition); err == nil {
			ch <- m
		}
	}
}

// LagReport is the last lag computation of the groups a broker
// coordinates, uncapped: every (group, partition) with a committed offset
// whose leader answered.
type LagReport struct {
	ComputeTime time.Time
	Lags        []GroupPartitionLag
}

// GroupPartitionLag is one group's lag on one partition.
type GroupPartitionLag struct {
	TenantID, Group, TopicID, Topic string
	Partition                       int32
	CommittedOffset                 int64
	HighWatermark, LogStartOffset   int64
	LagMessages                     int64
	// LagSeconds is the age of the oldest record left to read.
	LagSeconds     float64
	PartitionBytes int64
}

// MinLagRound is the least time a lag round is given (LagRoundTimeout).
const MinLagRound = 10 * time.Second

// LagRoundTimeout is how long one ComputeLag round may run when rounds are
// due every interval: the interval, so that a round normally ends before
// the next is due, but at least MinLagRound. A round that runs out keeps
// the previous values, so a budget shorter than one round of calls to the
// partitions' leaders takes (a short interval on a loaded broker) would
// never publish any; with the floor such a round finishes late, and the
// next one starts when it ends. A leader that does not answer at all still
// ends the round at the budget.
func LagRoundTimeout(interval time.Duration) time.Duration {
	return max(interval, MinLagRound)
}

// ComputeLag computes the lag of every committed offset in the groups
// this broker coordinates, at now, and publishes the result capped at
// maxSeries label sets (capLagSeries) to the metrics, and uncapped to
// LagReport. A coordinator still loading, and a partition whose leader
// does not answer, are left out of this round; a round ctx ends before it
// finishes keeps the previous values. A no-op with the lag metrics off.
func (s *Service) ComputeLag(ctx context.Context, now time.Time, maxSeries int) {
	if s.lag == nil {
		return
	}
	var (
		toFill []topicLag
		owners []coordinator.GroupKey // the group of each toFill
	)
	meta := s.deps.View()
	if ot, ok := meta.Topic(system.TenantID, system.OffsetsTopic); ok {
		for _, pm := range ot.Partitions {
			if pm.Leader != s.cfg.BrokerID {
				continue
			}
			c, err := s.CoordinatorAt(ctx, ot, pm)
			if err != nil || !c.Current() {
				s.logger.Debug("group lag metrics: offsets partition not ready", "offsets_partition", pm.Partition, "err", err)
				continue
			}
			for gk, offsets := range c.CommittedOffsets() {
				for tk, co := range offsets {
					t, ok := meta.ByID[tk.TopicID]
					if !ok || t.TenantID != gk.Tenant || (t.TenantID == system.TenantID && t.Name == system.OffsetsTopic) {
						continue // the topic was deleted since; the offsets topic is no group's
					}
					toFill = append(toFill, topicLag{topic: t, lag: &PartitionLag{
						Topic: t.Name, Partition: tk.Partition, CommittedOffset: co.Offset.GetOffset(),
					}})
					owners = append(owners, gk)
				}
			}
		}
	}
	s.fillLags(ctx, BrokerCredentials, toFill, now)
	if err := ctx.Err(); err != nil {
		s.logger.Warn("group lag metrics: round did not finish; keeping the previous values", "partitions", len(toFill), "err", err)
		return
	}
	rows := make([]lagRow, 0, len(toFill))
	report := &LagReport{ComputeTime: now}
	unavailable := 0
	for i, tl := range toFill {
		if tl.lag.Lag < 0 {
			unavailable++
			continue
		}
		rows = append(rows, lagRow{
			tenant: owners[i].Tenant, group: owners[i].Group, topic: tl.lag.Topic, partition: tl.lag.Partition,
			messages: tl.lag.Lag, seconds: tl.lag.LagSeconds,
		})
		report.Lags = append(report.Lags, GroupPartitionLag{
			TenantID: owners[i].Tenant, Group: owners[i].Group, TopicID: tl.topic.ID, Topic: tl.lag.Topic,
			Partition: tl.lag.Partition, CommittedOffset: tl.lag.CommittedOffset,
			HighWatermark: tl.lag.HighWatermark, LogStartOffset: tl.lag.LogStartOffset,
			LagMessages: tl.lag.Lag, LagSeconds: tl.lag.LagSeconds, PartitionBytes: tl.lag.PartitionBytes,
		})
	}
	s.lag.report.Store(report)
	if unavailable > 0 {
		s.logger.Warn("group lag metrics: partition leaders did not answer; their lag is not exported this round", "partitions", unavailable)
	}
	snap := capLagSeries(rows, maxSeries)
	s.lag.last.Store(&snap)
}

// LagReport answers the last lag computation of the groups this broker
// coordinates: FailedPrecondition with the lag metrics off, Unavailable
// before the first computation.
func (s *Service) LagReport() (*LagReport, error) {
	if s.lag == nil {
		return nil, derr.New(derr.FailedPrecondition, "group lag computation is off on this broker (--group-lag-metrics-interval 0)")
	}
	r := s.lag.report.Load()
	if r == nil {
		return nil, derr.New(derr.Unavailable, "no group lag computed yet; retry after --group-lag-metrics-interval")
	}
	return r, nil
}
