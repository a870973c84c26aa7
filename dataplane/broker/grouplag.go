package broker

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/dataplane/coordinator"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Group lag metrics. Every --group-lag-metrics-interval the broker computes
// the lag of each (group, topic, partition) with a committed offset in the
// groups it coordinates (the offsets partitions it leads), with the code
// DescribeGroup uses (fillLags: ListOffsets and one Fetch per lagging
// partition at its leader, with the broker credential). groupLagCollector
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

// groupLagCollector exports the last lagSnapshot of the broker's groups.
type groupLagCollector struct {
	b    *Broker
	last atomic.Pointer[lagSnapshot]
	// detail is the last computation uncapped, for ListGroupLags.
	detail atomic.Pointer[sluicev1.ListGroupLagsResponse]
}

func (c *groupLagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descGroupLagMessages
	ch <- descGroupLagSeconds
	ch <- descGroupLagTruncated
	ch <- descGroupLagOmitted
}

// Collect sends the last snapshot, less the groups whose offsets partition
// this broker no longer leads (their new coordinator exports them), so
// that a group is exported by one broker.
func (c *groupLagCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.last.Load()
	if snap == nil {
		snap = &lagSnapshot{}
	}
	ch <- prometheus.MustNewConstMetric(descGroupLagTruncated, prometheus.GaugeValue, float64(snap.truncated))
	ch <- prometheus.MustNewConstMetric(descGroupLagOmitted, prometheus.GaugeValue, float64(snap.omitted))
	t, ok := c.b.metadata().Topic(systemTenantID, offsetsTopic)
	if !ok || len(t.Partitions) == 0 {
		return
	}
	for _, s := range snap.series {
		if t.Partitions[coordinator.PartitionOf(s.tenant, s.group, len(t.Partitions))].Leader != c.b.cfg.ID {
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

// groupLagLoop computes the group lag metrics every interval until ctx
// ends; each round may take at most the interval.
func (b *Broker) groupLagLoop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		rctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		b.computeGroupLag(rctx, time.Now())
	})
}

// computeGroupLag computes the lag of every committed offset in the groups
// this broker coordinates and publishes the capped result to the
// collector. A coordinator still loading, and a partition whose leader does
// not answer, are left out of this round.
func (b *Broker) computeGroupLag(ctx context.Context, now time.Time) {
	if b.groupLag == nil {
		return
	}
	var (
		toFill []topicLag
		owners []coordinator.GroupKey // the group of each toFill
	)
	meta := b.metadata()
	if ot, ok := meta.Topic(systemTenantID, offsetsTopic); ok {
		for _, pm := range ot.Partitions {
			if pm.Leader != b.cfg.ID {
				continue
			}
			c, err := b.coordinatorAt(ctx, ot, pm)
			if err != nil || !c.Current() {
				b.logger.Debug("group lag metrics: offsets partition not ready", "offsets_partition", pm.Partition, "err", err)
				continue
			}
			for gk, offsets := range c.CommittedOffsets() {
				for tk, co := range offsets {
					t, ok := meta.ByID[tk.TopicID]
					if !ok || t.TenantID != gk.Tenant || (t.TenantID == systemTenantID && t.Name == offsetsTopic) {
						continue // the topic was deleted since; the offsets topic is no group's
					}
					toFill = append(toFill, topicLag{topic: t, lag: &sluicev1.PartitionLag{
						Topic: t.Name, Partition: tk.Partition, CommittedOffset: co.Offset.GetOffset(),
					}})
					owners = append(owners, gk)
				}
			}
		}
	}
	b.fillLags(ctx, brokerCredentials, toFill, now)
	if err := ctx.Err(); err != nil {
		b.logger.Warn("group lag metrics: round did not finish; keeping the previous values", "partitions", len(toFill), "err", err)
		return
	}
	rows := make([]lagRow, 0, len(toFill))
	detail := &sluicev1.ListGroupLagsResponse{ComputeTime: timestamppb.New(now)}
	unavailable := 0
	for i, tl := range toFill {
		if tl.lag.GetLag() < 0 {
			unavailable++
			continue
		}
		rows = append(rows, lagRow{
			tenant: owners[i].Tenant, group: owners[i].Group, topic: tl.lag.GetTopic(), partition: tl.lag.GetPartition(),
			messages: tl.lag.GetLag(), seconds: tl.lag.GetLagSeconds(),
		})
		detail.Lags = append(detail.Lags, &sluicev1.GroupPartitionLag{
			TenantId: owners[i].Tenant, Group: owners[i].Group, TopicId: tl.topic.ID, Topic: tl.lag.GetTopic(),
			Partition: tl.lag.GetPartition(), CommittedOffset: tl.lag.GetCommittedOffset(),
			HighWatermark: tl.lag.GetHighWatermark(), LogStartOffset: tl.lag.GetLogStartOffset(),
			LagMessages: tl.lag.GetLag(), LagAgeMs: int64(tl.lag.GetLagSeconds() * 1000), PartitionBytes: tl.lag.GetPartitionBytes(),
		})
	}
	b.groupLag.detail.Store(detail)
	if unavailable > 0 {
		b.logger.Warn("group lag metrics: partition leaders did not answer; their lag is not exported this round", "partitions", unavailable)
	}
	snap := capLagSeries(rows, b.cfg.GroupLagMetricsMaxSeries)
	b.groupLag.last.Store(&snap)
}

// ListGroupLags answers the last lag computation of the groups this broker
// coordinates (see the proto).
func (s *replicaService) ListGroupLags(ctx context.Context, _ *connect.Request[sluicev1.ListGroupLagsRequest]) (*connect.Response[sluicev1.ListGroupLagsResponse], error) {
	if s.b.groupLag == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("group lag computation is off on this broker (--group-lag-metrics-interval 0)"))
	}
	d := s.b.groupLag.detail.Load()
	if d == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no group lag computed yet; retry after --group-lag-metrics-interval"))
	}
	return connect.NewResponse(d), nil
}
