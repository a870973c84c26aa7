package meter

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// Leader is a partition the broker leads, as the reporter meters it.
type Leader struct {
	TopicID     string
	Partition   int32
	LeaderEpoch int32
	Replica     *partition.Replica
}

// Config is a Reporter's configuration; the zero value of a tunable takes
// its default.
type Config struct {
	BrokerID int32
	// BrokerEpoch is the broker's current epoch; 0 before it registered
	// (nothing is reported then).
	BrokerEpoch func() int64
	// Send is BrokerService.ReportUsage. Its errors are domain errors
	// (dataplane/derr: the broker translates its client's): a refusal
	// of the whole report is derr.FailedPrecondition (a stale broker
	// epoch), derr.NotFound (an unregistered broker), derr.InvalidRequest
	// (a report the control plane does not take) or
	// derr.UnsupportedVersion (a control plane without metering); any
	// other error leaves the report's fate unknown.
	Send func(context.Context, *sluicev1.ReportUsageRequest) (*sluicev1.ReportUsageResponse, error)
	// ErrorLabel is the failures metric's code label of a Send error (the
	// broker's: the Connect code's name, as control planes answer); nil
	// labels with the error's derr.Kind.
	ErrorLabel func(error) string
	// Leaders lists the tenants' partitions the broker leads now.
	Leaders  func() []Leader
	Counters *Counters
	// Interval is the time between reports (Run).
	Interval time.Duration
	// AttemptTimeout bounds one ReportUsage call; default 10s.
	AttemptTimeout time.Duration
	// MaxBackoff caps the wait between the attempts of an unanswered
	// report (from 100ms, doubling); default the Interval, at most 5s.
	MaxBackoff time.Duration
	// PartitionScanBytes bounds the batch bytes one report scans of one
	// partition (default 8 MiB), ReportScanBytes those of all (default
	// 256 MiB), and MaxRanges its ingress ranges (default 1000): a
	// backlog is metered over several reports.
	PartitionScanBytes int
	ReportScanBytes    int
	MaxRanges          int
	Logger             *slog.Logger
}

const minBackoff = 100 * time.Millisecond

type partKey struct {
	topicID   string
	partition int32
}

// cursor is where the control plane said metering of a partition stands,
// as answered to a report of this broker's leadership at epoch.
type cursor struct {
	epoch int32
	next  int64
}

// Reporter sends a broker's usage to the control plane
// (BrokerService.ReportUsage), exactly once: see the package doc. Run
// and Final are called from one goroutine, one after the other; the
// counters are safe for concurrent use.
type Reporter struct {
	cfg Config

	epoch   int64 // the broker epoch of seq
	seq     int64 // the last sequence used in epoch
	pending *sluicev1.ReportUsageRequest
	// uncertain: an attempt of pending ended without an answer, so it
	// may have been applied.
	uncertain bool
	cursors   map[partKey]cursor
	rot       int // where the next report's ingress scan starts among the leaders
	lastWarn  time.Time

	lastAck      atomic.Int64 // unix nanoseconds
	pendingBytes atomic.Int64

	failures       *prometheus.CounterVec
	ingressBytes   prometheus.Counter
	skippedOffsets prometheus.Counter
	lostCounters   prometheus.Counter
}

// NewReporter builds a Reporter; Collectors are its metrics.
func NewReporter(cfg Config) *Reporter {
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 10 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = min(max(cfg.Interval, minBackoff), 5*time.Second)
	}
	if cfg.PartitionScanBytes <= 0 {
		cfg.PartitionScanBytes = 8 << 20
	}
	if cfg.ReportScanBytes <= 0 {
		cfg.ReportScanBytes = 256 << 20
	}
	if cfg.MaxRanges <= 0 {
		cfg.MaxRanges = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{
		cfg:     cfg,
		cursors: map[partKey]cursor{},
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_report_failures_total",
			Help: "Usage report attempts (BrokerService.ReportUsage) that got no answer or an error, by code; each is retried with the same sequence and content.",
		}, []string{"code"}),
		ingressBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_ingress_bytes_total",
			Help: "Bytes of data batches (transaction markers excluded) in the ingress ranges this broker reported and the control plane applied.",
		}),
		skippedOffsets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_ingress_skipped_offsets_total",
			Help: "Offsets this broker reported as not metered because they had left the log (retention, or never copied to the object store) before metering reached them.",
		}),
		lostCounters: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_reports_abandoned_total",
			Help: "Unanswered usage reports given up at a new broker epoch: their egress and request counts may or may not have been applied, and are not sent again.",
		}),
	}
	r.lastAck.Store(time.Now().UnixNano())
	return r
}

// Collectors are the reporter's metrics.
func (r *Reporter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		r.failures, r.ingressBytes, r.skippedOffsets, r.lostCounters,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_report_age_seconds",
			Help: "Seconds since this broker's usage was last reported in full: the control plane answered its last report, or there was nothing to report (since the start before either).",
		}, func() float64 { return time.Since(time.Unix(0, r.lastAck.Load())).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "broker", Name: "usage_pending_report_bytes",
			Help: "Encoded size of the usage report awaiting the control plane's answer (0: none).",
		}, func() float64 { return float64(r.pendingBytes.Load()) }),
	}
}

// Run reports every Interval until ctx ends, retrying an unanswered
// report with growing waits (up to MaxBackoff).
func (r *Reporter) Run(ctx context.Context) {
	timer := time.NewTimer(r.cfg.Interval)
	defer timer.Stop()
	backoff := minBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if r.step(ctx) {
			backoff = minBackoff
			timer.Reset(r.cfg.Interval)
			continue
		}
		timer.Reset(backoff)
		backoff = min(2*backoff, r.cfg.MaxBackoff)
	}
}

// Final is the last report on shutdown: the unanswered report until it
// is answered, then one with what was counted since, also until
// answered, retried as Run does; ctx bounds it.
func (r *Reporter) Final(ctx context.Context) {
	if !r.startEpoch() {
		return
	}
	if !r.untilAnswered(ctx) {
		return
	}
	r.setPending(r.build(ctx))
	r.untilAnswered(ctx)
}

// untilAnswered sends the pending report (if any) until it is answered
// or ctx ends; true when nothing is left unanswered.
func (r *Reporter) untilAnswered(ctx context.Context) bool {
	backoff := minBackoff
	for r.pending != nil {
		if r.attempt(ctx) {
			return true
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, r.cfg.MaxBackoff)
	}
	return true
}

// step sends the unanswered report, or builds and sends the next one;
// false when it got no answer.
func (r *Reporter) step(ctx context.Context) bool {
	if !r.startEpoch() {
		return true
	}
	if r.pending == nil {
		if r.setPending(r.build(ctx)); r.pending == nil {
			r.lastAck.Store(time.Now().UnixNano())
			return true
		}
	}
	return r.attempt(ctx)
}

// startEpoch starts the sequence over when the broker epoch changed,
// and reports whether the broker is registered. A report of the old
// epoch still unanswered is dropped: its counters are counted again
// (in the next report) only when no attempt of it can have been
// applied; otherwise they are lost, never counted twice. Its ingress
// ranges are derived from the log again.
func (r *Reporter) startEpoch() bool {
	epoch := r.cfg.BrokerEpoch()
	if epoch == 0 {
		return false
	}
	if epoch == r.epoch {
		return true
	}
	if p := r.pending; p != nil {
		if r.uncertain {
			r.lostCounters.Inc()
			var egress, requests int64
			for _, c := range p.GetCounters() {
				egress, requests = egress+c.GetEgressBytes(), requests+c.GetRequests()
			}
			r.cfg.Logger.Warn("usage report of an old broker epoch abandoned unanswered: its counters are not sent again (they may have been applied)",
				"broker_epoch", p.GetBrokerEpoch(), "sequence", p.GetSequence(), "egress_bytes", egress, "requests", requests)
		} else {
			r.cfg.Counters.restore(p.GetCounters())
		}
		r.setPending(nil)
	}
	r.epoch, r.seq, r.uncertain = epoch, 0, false
	return true
}

func (r *Reporter) setPending(p *sluicev1.ReportUsageRequest) {
	r.pending = p
	if p == nil {
		r.pendingBytes.Store(0)
		return
	}
	r.pendingBytes.Store(int64(proto.Size(p)))
}

// build takes the counters and the ingress ranges into the next report
// of the epoch; nil when there is nothing to report.
func (r *Reporter) build(ctx context.Context) *sluicev1.ReportUsageRequest {
	counters := r.cfg.Counters.take()
	ingress := r.ingress(ctx)
	if len(counters) == 0 && len(ingress) == 0 {
		return nil
	}
	r.seq++
	return &sluicev1.ReportUsageRequest{BrokerId: r.cfg.BrokerID, BrokerEpoch: r.epoch, Sequence: r.seq, Counters: counters, Ingress: ingress}
}

// ingress builds a report's ingress ranges: for a partition led at an
// epoch the reporter has no cursor of, an empty range asking where
// metering stands; for the others, the batches from the cursor on
// (Scan), within the report's bounds. The scan starts where the last
// report's bounds stopped it, so that every partition gets its turn.
func (r *Reporter) ingress(ctx context.Context) []*sluicev1.IngressRange {
	leaders := r.cfg.Leaders()
	slices.SortFunc(leaders, func(a, b Leader) int {
		return cmp.Or(strings.Compare(a.TopicID, b.TopicID), cmp.Compare(a.Partition, b.Partition))
	})
	led := make(map[partKey]bool, len(leaders))
	for _, l := range leaders {
		led[partKey{l.TopicID, l.Partition}] = true
	}
	for k := range r.cursors {
		if !led[k] {
			delete(r.cursors, k) // leading it again asks afresh
		}
	}
	n := len(leaders)
	if n == 0 {
		return nil
	}
	start := r.rot % n
	stop := -1 // the first leader a bound left out
	budget := r.cfg.ReportScanBytes
	var out []*sluicev1.IngressRange
	for i := range n {
		if len(out) >= r.cfg.MaxRanges {
			stop = i
			break
		}
		l := leaders[(start+i)%n]
		k := partKey{l.TopicID, l.Partition}
		c, ok := r.cursors[k]
		if !ok || c.epoch != l.LeaderEpoch {
			at := c.next // 0 without a cursor: any offset asks
			out = append(out, &sluicev1.IngressRange{TopicId: l.TopicID, Partition: l.Partition, LeaderEpoch: l.LeaderEpoch, StartOffset: at, EndOffset: at})
			continue
		}
		if budget <= 0 {
			if stop < 0 {
				stop = i
			}
			continue
		}
		s, err := Scan(ctx, l.Replica, c.next, min(r.cfg.PartitionScanBytes, budget))
		if err != nil {
			r.cfg.Logger.Debug("meter ingress", "topic", l.TopicID, "partition", l.Partition, "from", c.next, "err", err)
		}
		if s.End <= c.next {
			continue
		}
		budget -= int(s.Bytes)
		if s.Skipped {
			r.skippedOffsets.Add(float64(s.End - c.next))
			r.cfg.Logger.Warn("ingress not metered: the offsets left the log before metering reached them",
				"topic", l.TopicID, "partition", l.Partition, "from", c.next, "to", s.End)
		}
		out = append(out, &sluicev1.IngressRange{TopicId: l.TopicID, Partition: l.Partition, LeaderEpoch: l.LeaderEpoch, StartOffset: c.next, EndOffset: s.End, Bytes: s.Bytes})
	}
	if stop >= 0 {
		r.rot = (start + stop) % n
	}
	return out
}

// errorLabel is the failures metric's label of a Send error
// (Config.ErrorLabel).
func (r *Reporter) errorLabel(err error) string {
	if r.cfg.ErrorLabel != nil {
		return r.cfg.ErrorLabel(err)
	}
	kind, _ := derr.KindOf(err)
	return kind.String()
}

// attempt sends the pending report once; true when it was answered
// (and applied, or found applied before).
func (r *Reporter) attempt(ctx context.Context) bool {
	actx, cancel := context.WithTimeout(ctx, r.cfg.AttemptTimeout)
	res, err := r.cfg.Send(actx, r.pending)
	cancel()
	if err != nil {
		kind, _ := derr.KindOf(err)
		unsupported := kind == derr.UnsupportedVersion
		switch kind {
		case derr.FailedPrecondition, derr.NotFound, derr.InvalidRequest, derr.UnsupportedVersion:
			// Refused whole, nothing applied: a stale broker epoch, an
			// unregistered broker, a report the control plane does not
			// take, or a control plane without metering.
		default:
			r.uncertain = true
		}
		r.failures.WithLabelValues(r.errorLabel(err)).Inc()
		attrs := []any{"broker_epoch", r.pending.GetBrokerEpoch(), "sequence", r.pending.GetSequence(), "err", err}
		switch now := time.Now(); {
		case unsupported:
			// A control plane that does not meter yet (an older version
			// during an upgrade): nothing an operator must act on.
			r.cfg.Logger.Debug("report usage: the control plane does not take usage reports; retrying with the same report", attrs...)
		case now.Sub(r.lastWarn) >= time.Minute:
			r.lastWarn = now
			r.cfg.Logger.Warn("report usage; retrying with the same report", attrs...)
		}
		return false
	}
	answered := make(map[partKey]int64, len(res.GetCursors()))
	for _, c := range res.GetCursors() {
		answered[partKey{c.GetTopicId(), c.GetPartition()}] = c.GetNextOffset()
	}
	for _, g := range r.pending.GetIngress() {
		k := partKey{g.GetTopicId(), g.GetPartition()}
		next, ok := answered[k]
		if !ok {
			delete(r.cursors, k) // a deleted topic
			continue
		}
		r.cursors[k] = cursor{epoch: g.GetLeaderEpoch(), next: next}
		if g.GetEndOffset() > g.GetStartOffset() && next == g.GetEndOffset() {
			r.ingressBytes.Add(float64(g.GetBytes()))
		}
	}
	r.setPending(nil)
	r.uncertain = false
	r.lastAck.Store(time.Now().UnixNano())
	return true
}
