package grafana_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// notScraped are the metric names the queries may read that no Sluice process exports, with the
// reason. Keep it short: every other name must be scraped from the cluster below.
var notScraped = map[string]string{
	"ALERTS": "Prometheus writes it for the alerting rules it evaluates (infra/prometheus/alerts.yml); no process exports it",
}

// family is a metric family as the cluster's processes export it: its type, the label names of
// its series (over every process) and the processes exporting it.
type family struct {
	typ    dto.MetricType
	labels map[string]bool
	procs  []string
}

// families is what a scrape of every process found, by family name.
type families map[string]*family

// lookup finds the family of a metric name as PromQL writes it: the family's own name, or a
// histogram's (summary's) name with _bucket, _sum or _count.
func (fs families) lookup(name string) (*family, bool) {
	if f, ok := fs[name]; ok {
		return f, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := fs[base]
		if ok && (f.typ == dto.MetricType_HISTOGRAM || (f.typ == dto.MetricType_SUMMARY && suffix != "_bucket")) {
			return f, true
		}
	}
	return nil, false
}

// hasLabel says whether series of the metric name carry label l: one of its own, a target label
// Prometheus adds, or le on a histogram's buckets.
func (fs families) hasLabel(name, l string) bool {
	if _, ok := notScraped[name]; ok {
		return true
	}
	f, ok := fs.lookup(name)
	if !ok {
		return false
	}
	return slices.Contains(targetLabels, l) || f.labels[l] || (l == "le" && strings.HasSuffix(name, "_bucket") && f.typ == dto.MetricType_HISTOGRAM)
}

// check returns what the queries read that fs lacks: metric names, the labels a selector
// matches on, the labels aggregations, vector matching and label_values read, and the sluice_*
// names written anywhere in the files.
func (fs families) check(qs []query, text map[string][]string) []string {
	var problems []string
	for _, q := range qs {
		e, err := parse(q)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		u := uses(e)
		var metrics []string
		for _, s := range u.selectors {
			metrics = append(metrics, s.metric)
			if _, ok := notScraped[s.metric]; ok {
				continue
			}
			if _, ok := fs.lookup(s.metric); !ok {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exported", q.where, s.metric))
				continue
			}
			for _, l := range s.labels {
				if !fs.hasLabel(s.metric, l) {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s", q.where, s.metric, l))
				}
			}
		}
		for _, lu := range u.labels {
			if !slices.ContainsFunc(lu.metrics, func(m string) bool { return fs.hasLabel(m, lu.label) }) {
				problems = append(problems, fmt.Sprintf("%s: %s %s: no label %s on the series of %v there", q.where, lu.what, lu.label, lu.label, lu.metrics))
			}
		}
		if q.label != "" && !slices.ContainsFunc(metrics, func(m string) bool { return fs.hasLabel(m, q.label) }) {
			problems = append(problems, fmt.Sprintf("%s: label_values: no label %s on %v", q.where, q.label, metrics))
		}
	}
	for name, files := range text {
		if _, ok := fs.lookup(name); !ok {
			problems = append(problems, fmt.Sprintf("%v: %s is written there but not exported", files, name))
		}
	}
	sort.Strings(problems)
	return slices.Compact(problems)
}

// scrape reads one process's /metrics into fs.
func scrape(ctx context.Context, hc *http.Client, proc, addr string, fs families) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	res, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", proc, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: %s", proc, res.Status)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", proc, err)
	}
	for name, mf := range mfs {
		f := fs[name]
		if f == nil {
			f = &family{typ: mf.GetType(), labels: map[string]bool{}}
			fs[name] = f
		}
		f.procs = append(f.procs, proc)
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				f.labels[l.GetName()] = true
			}
		}
	}
	return nil
}

// scrapeAll reads every process of c.
func scrapeAll(ctx context.Context, c *testcluster.Cluster) (families, error) {
	fs := families{}
	if err := scrape(ctx, c.HTTPClient(), "controlplane", c.ControlPlaneMetricsAddr(), fs); err != nil {
		return nil, err
	}
	for _, id := range c.BrokerIDs() {
		if err := scrape(ctx, c.HTTPClient(), fmt.Sprintf("broker-%d", id), c.Broker(id).MetricsAddr, fs); err != nil {
			return nil, err
		}
	}
	return fs, nil
}

// sum adds up the samples of a counter or gauge family over every process of c (0 when absent).
func sum(ctx context.Context, c *testcluster.Cluster, name string) (float64, error) {
	var total float64
	addrs := []string{c.ControlPlaneMetricsAddr()}
	for _, id := range c.BrokerIDs() {
		addrs = append(addrs, c.Broker(id).MetricsAddr)
	}
	for _, addr := range addrs {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		req, err := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			cancel()
			return 0, err
		}
		res, err := c.HTTPClient().Do(req)
		if err != nil {
			cancel()
			return 0, err
		}
		p := expfmt.NewTextParser(model.LegacyValidation)
		mfs, err := p.TextToMetricFamilies(res.Body)
		res.Body.Close()
		cancel()
		if err != nil {
			return 0, err
		}
		for _, m := range mfs[name].GetMetric() {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
	}
	return total, nil
}

// TestDashboardMetricsExported runs a real cluster (a control plane and three brokers on
// Postgres, tiering to an S3 server), drives the traffic that makes the series every dashboard
// and alert rule reads (produce, fetch, a cold read, a consumer group that falls behind, a
// throttled tenant, failed usage reports), then scrapes every process and checks that each
// metric, and each label, the queries name is exported. A metric named wrongly in
// infra/grafana/*.json or infra/prometheus/*.yml fails it.
func TestDashboardMetricsExported(t *testing.T) {
	start := time.Now()
	qs := append(dashboardQueries(t, loadDashboards(t)), ruleQueries(t)...)
	text := namesInText(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	s3 := testenv.S3(t)
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		RPCProxies: true, // to lose the answers of usage reports
		ExtraControlPlaneArgs: []string{
			// Lag sampled often enough, and forecast from a window short enough, that the
			// time-to-data-loss forecast exists within seconds of the group falling behind.
			"--lag-sample-interval", "500ms", "--lag-window", "20s", "--lag-alert-risk-for", "1s",
			"--metering-interval", "1s", "--billing-interval", "1s",
		},
		ExtraBrokerArgs: []string{
			"--segment-bytes", strconv.Itoa(1 << 20), "--retention-check-interval", "200ms",
			"--tier-copy-interval", "200ms", "--tier-cache-bytes", strconv.Itoa(32 << 20),
			"--tier-s3-bucket", s3.Bucket, "--tier-s3-region", s3.Region, "--tier-s3-endpoint", s3.Endpoint, "--tier-s3-path-style",
			"--group-lag-metrics-interval", "500ms", "--usage-report-interval", "200ms",
		},
		BrokerEnv: []string{
			"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "AWS_REGION=" + s3.Region,
			"AWS_EC2_METADATA_DISABLED=true",
		},
	})
	t.Logf("cluster up after %s", time.Since(start).Round(time.Millisecond))

	// A topic with a time retention (for sluice_topic_retention_seconds) whose closed segments
	// leave the brokers' disks as soon as they are copied, so that offset 0 is a cold read.
	retention, local, minISR := time.Hour.Milliseconds(), int64(1), int32(2)
	acme := c.NewClientWithConfig(t, "acme", "events", 1, &sluicev1.TopicConfig{
		RetentionMs: &retention, LocalRetentionMs: &local, MinInsyncReplicas: &minISR,
	})
	produce := func(cl *testcluster.Client, values []string) {
		t.Helper()
		testenv.Wait(t, 30*time.Second, "a produce acknowledged", func() error {
			return cl.Produce(ctx, 0, values, sluicev1.Acks_ACKS_ALL, 10*time.Second).Err
		})
	}
	// A little over one segment, so that one closes and is copied.
	kib := strings.Repeat("x", 1024)
	batch := make([]string, 64)
	for i := range batch {
		batch[i] = kib
	}
	for range 18 {
		produce(acme, batch)
	}
	testenv.Wait(t, 60*time.Second, "a segment copied to the object store", func() error {
		n, err := sum(ctx, c, "sluice_tier_uploaded_segments_total")
		if err == nil && n < 1 {
			err = fmt.Errorf("%v segments copied", n)
		}
		return err
	})
	// Offset 0 left the disks once copied (local retention 1 ms): reading it twice is a cold read
	// through the cache, a miss and then a hit.
	for _, what := range []string{"sluice_tier_cache_misses_total", "sluice_tier_cache_hits_total"} {
		testenv.Wait(t, 30*time.Second, "a cold read counted in "+what, func() error {
			if _, err := acme.Fetch(ctx, 0, 0, 0); err != nil {
				return err
			}
			n, err := sum(ctx, c, what)
			if err == nil && n < 1 {
				err = fmt.Errorf("%s is %v", what, n)
			}
			return err
		})
	}

	// A group that committed offset 0 and stays there while records keep coming: its lag and lag
	// age grow, and the control plane forecasts a time to data loss.
	groups := sluicev1connect.NewGroupServiceClient(c.HTTPClient(), "http://"+c.Broker(1).ListenAddr, connect.WithGRPC(),
		connect.WithInterceptors(tenants.Bearer(acme.Token())))
	testenv.Wait(t, 30*time.Second, "group slow commits offset 0", func() error {
		_, err := groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{
			Group: "slow", Offsets: []*sluicev1.PartitionOffset{{Topic: "events", Partition: 0, Offset: 0}},
		}))
		return err
	})
	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	defer load.Wait()
	defer stopLoad()
	load.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			acme.Produce(loadCtx, 0, []string{fmt.Sprintf("r%d", i)}, sluicev1.Acks_ACKS_ALL, 5*time.Second)
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	// An idempotent producer whose second batch skips sequence numbers is refused
	// (out_of_order_sequence), and its retry of the first is a duplicate.
	records := sluicev1connect.NewRecordServiceClient(c.HTTPClient(), "http://"+c.Broker(1).ListenAddr, connect.WithGRPC(),
		connect.WithInterceptors(tenants.Bearer(acme.Token())))
	var pid *sluicev1.InitProducerIdResponse
	testenv.Wait(t, 30*time.Second, "a producer id", func() error {
		res, err := records.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
		if err == nil {
			pid = res.Msg
		}
		return err
	})
	idem := func(seq int32) error {
		b, err := record.AppendBatch(nil, record.BatchHeader{FirstTimestamp: time.Now().UnixMilli(),
			ProducerID: pid.GetProducerId(), ProducerEpoch: int16(pid.GetProducerEpoch()), BaseSequence: seq},
			[]record.Record{{Value: []byte("idempotent")}})
		require.NoError(t, err)
		_, err = records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "events", Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Batches{Batches: &sluicev1.RecordBatches{Data: b}}}))
		return err
	}
	testenv.Wait(t, 30*time.Second, "an idempotent batch at sequence 0", func() error { return idem(0) })
	require.NoError(t, idem(0), "a retry of sequence 0 is answered as a duplicate")
	require.Error(t, idem(5), "sequence 5 after 0 is out of order")

	// A tenant over its produce rate limit is throttled.
	rate := int64(1024)
	burst := c.NewTenant(t, "throttled", &sluicev1.LimitOverrides{ProduceBytesPerSec: &rate}).NewTopic(t, "burst", 1, nil)
	big := []string{strings.Repeat("y", 8<<10)}
	testenv.Wait(t, 30*time.Second, "a produce over the tenant's rate throttled", func() error {
		res := burst.Produce(ctx, 0, big, sluicev1.Acks_ACKS_ALL, 5*time.Second)
		if connect.CodeOf(res.Err) == connect.CodeResourceExhausted {
			return nil
		}
		return fmt.Errorf("produce answered %v", res.Err)
	})

	// Usage reports whose answers are lost fail on the brokers (and are retried once answers
	// pass again: duplicates at the control plane).
	for _, id := range c.BrokerIDs() {
		c.Broker(id).RPC.DropAnswers("ReportUsage", true)
	}
	testenv.Wait(t, 30*time.Second, "a usage report failed", func() error {
		n, err := sum(ctx, c, "sluice_broker_usage_report_failures_total")
		if err == nil && n < 1 {
			err = fmt.Errorf("%v failed reports", n)
		}
		return err
	})
	for _, id := range c.BrokerIDs() {
		c.Broker(id).RPC.DropAnswers("ReportUsage", false)
	}

	// Everything the queries read is there, or comes within the wait: series the control plane
	// derives (lag, the forecast, meters, billing) follow their intervals.
	var fs families
	var problems []string
	testenv.Wait(t, 60*time.Second, "every metric and label the dashboards and rules read exported", func() error {
		var err error
		if fs, err = scrapeAll(ctx, c); err != nil {
			return err
		}
		if problems = fs.check(qs, text); len(problems) > 0 {
			return fmt.Errorf("%d problems:\n%s", len(problems), strings.Join(problems, "\n"))
		}
		return nil
	})
	require.Empty(t, problems)
	var names []string
	for n := range text {
		names = append(names, n)
	}
	t.Logf("%d queries and %d sluice_* names checked against %d exported families; not scraped: %v; done in %s",
		len(qs), len(names), len(fs), notScraped, time.Since(start).Round(time.Millisecond))
}
