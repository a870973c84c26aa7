package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// TestBenchScale is the partition-density benchmark of issue 15 (`make scale`;
// docs/benchmarking.md, "Partition density"). For each size N in
// $SLUICE_SCALE_SIZES (default 3,30,300,1500) it starts a fresh cluster
// (Postgres control plane, 3 broker processes, --flush always, the
// production broker lease and replica lag time), creates N tenant
// partitions at RF 3 as free-plan tenants do (10 topics of 3 partitions
// each, at most 30 partitions per tenant), and measures:
//
//   - lead: from the last CreateTopic's answer until the brokers lead
//     every new partition (sluice_broker_leader_partitions summed);
//   - idle: over 10 s, the CPU of the control plane and the brokers
//     (process_cpu_seconds_total, i.e. utime+stime of /proc/<pid>/stat),
//     and each broker's RSS, goroutines and open fds;
//   - produce: 1 KiB records, acks=all, through the Go SDK, round-robin
//     over the N partitions (one producer per tenant, each going over its
//     tenant's partitions), for 10 s after a 3 s warm-up;
//   - failover: SIGKILL broker 1 until the other two lead every partition;
//   - rejoin: once every partition is under-replicated, restart broker 1
//     until no broker reports an under-replicated partition.
//
// It runs only with SLUICE_SCALE set (it takes minutes, and its numbers
// mean nothing under the race detector): make scale.
func TestBenchScale(t *testing.T) {
	if os.Getenv("SLUICE_SCALE") == "" {
		t.Skip("the scale benchmark runs with SLUICE_SCALE=1 (make scale)")
	}
	if raceEnabled {
		t.Fatal("the scale benchmark measures a race-free build: run it without -race (make scale)")
	}
	sizes, err := scaleSizes(os.Getenv("SLUICE_SCALE_SIZES"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []scaleRow
	for _, n := range sizes {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			row := scaleRun(t, n)
			line, _ := json.Marshal(row)
			t.Logf("scale result: %s", line)
			rows = append(rows, row)
		})
	}
	t.Logf("scale table (%d brokers, RF 3, --flush always):\n%s", 3, scaleTable(rows))
}

// scaleSizes parses a comma-separated list of partition counts.
func scaleSizes(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = "3,30,300,1500"
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("SLUICE_SCALE_SIZES: %q is not a partition count (e.g. 30,300,1500)", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleRow is one size's measurements. Durations are in seconds.
type scaleRow struct {
	Partitions int `json:"partitions"`
	Tenants    int `json:"tenants"`
	Topics     int `json:"topics"`
	// CreateSeconds is the time of all CreateTopic calls, one after another.
	CreateSeconds float64 `json:"createSeconds"`
	LeadSeconds   float64 `json:"leadSeconds"`
	// IdleCPUPercent is the control plane's and the brokers' CPU time over
	// the idle window, in % of one core; ControlPlaneCPUPercent its part.
	IdleCPUPercent         float64 `json:"idleCpuPercent"`
	ControlPlaneCPUPercent float64 `json:"controlPlaneCpuPercent"`
	// Per broker, the mean over the three.
	BrokerRSSMiB      float64 `json:"brokerRssMiB"`
	BrokerGoroutines  float64 `json:"brokerGoroutines"`
	BrokerFDs         float64 `json:"brokerFds"`
	ProducePerSecond  float64 `json:"produceRecordsPerSecond"`
	ProduceFailed     int64   `json:"produceFailed"`
	FailoverSeconds   float64 `json:"failoverSeconds"`
	ShrinkSeconds     float64 `json:"isrShrinkSeconds"`
	RejoinSeconds     float64 `json:"rejoinSeconds"`
	LeadersBeforeKill int     `json:"leadersBeforeKill"`
}

// scaleTable renders rows as the Markdown table of issue 15.
func scaleTable(rows []scaleRow) string {
	var b strings.Builder
	b.WriteString("| N | idle CPU, whole cluster (% of one core) | broker RSS | goroutines / fds per broker | brokers lead all after create | failover: new leaders | rejoin: every ISR full | produce msgs/s, round-robin over N |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		rate := fmt.Sprintf("%.0f", r.ProducePerSecond)
		if r.ProducePerSecond >= 1000 {
			rate = fmt.Sprintf("%.1fk", r.ProducePerSecond/1000)
		}
		fmt.Fprintf(&b, "| %d | %.0f | %.0f MiB | %.0f / %.0f | %.1f s | %.1f s | %.1f s | %s |\n",
			r.Partitions, r.IdleCPUPercent, r.BrokerRSSMiB, r.BrokerGoroutines, r.BrokerFDs,
			r.LeadSeconds, r.FailoverSeconds, r.RejoinSeconds, rate)
	}
	return b.String()
}

// scaleTenant is one tenant of the benchmark and its topics.
type scaleTenant struct {
	apiKey string
	topics []scaleTopic
}

type scaleTopic struct {
	name       string
	partitions int32
}

// Free-plan shape: 10 topics and 30 partitions per tenant
// (tenants.PlanFree); topics of 3 partitions.
const (
	scaleTopicPartitions = 3
	scaleTopicsPerTenant = 10
	// scaleOffsetsPartitions is the internal offsets topic's size
	// (controlplane.Config's default).
	scaleOffsetsPartitions = 16
)

func scaleRun(t *testing.T, n int) scaleRow {
	ctx := t.Context()
	start := time.Now()
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		// The production defaults (controlplane.Config, broker.Config),
		// so that failover and ISR times are what an operator gets.
		BrokerLease:       10 * time.Second,
		ReplicaLagTimeMax: 30 * time.Second,
		// The default, named: the wait below counts on it.
		ExtraControlPlaneArgs: []string{"--offsets-topic-partitions", strconv.Itoa(scaleOffsetsPartitions)},
	})
	t.Logf("cluster up in %s", time.Since(start).Round(time.Millisecond))
	ids := c.BrokerIDs()
	// Waits grow with the size: the issue measured minutes at N=3000.
	long := time.Minute + time.Duration(n)*100*time.Millisecond
	row := scaleRow{Partitions: n}

	// The control plane creates the internal offsets topic once enough
	// brokers are live; it is led before the clock starts.
	baseLeaders := scaleOffsetsPartitions
	testenv.Wait(t, long, "the internal offsets topic led", func() error {
		if l := sumMetric(t, c, ids, "sluice_broker_leader_partitions"); l != baseLeaders {
			return fmt.Errorf("brokers lead %d", l)
		}
		return nil
	})

	// Create: free-plan tenants, topics of 3 partitions.
	hc := c.HTTPClient()
	cp := c.ControlPlane()
	var ts []scaleTenant
	createStart := time.Now()
	for left, i := n, 0; left > 0; i++ {
		name := fmt.Sprintf("scale-%04d", i)
		su, err := sluicev1connect.NewTenantServiceClient(hc, cp, connect.WithGRPC()).Signup(ctx,
			connect.NewRequest(&sluicev1.SignupRequest{Email: name + "@e2e.example", TenantName: name}))
		if err != nil {
			t.Fatalf("signup %s: %v", name, err)
		}
		tok, err := sluicev1connect.NewAuthServiceClient(hc, cp, connect.WithGRPC()).CreateToken(ctx,
			connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: su.Msg.GetApiKeySecret()}))
		if err != nil {
			t.Fatalf("create token for %s: %v", name, err)
		}
		topics := sluicev1connect.NewTopicServiceClient(hc, cp, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken())))
		tn := scaleTenant{apiKey: su.Msg.GetApiKeySecret()}
		for j := 0; j < scaleTopicsPerTenant && left > 0; j++ {
			tp := scaleTopic{name: fmt.Sprintf("t%02d", j), partitions: int32(min(left, scaleTopicPartitions))}
			if _, err := topics.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{
				Name: tp.name, PartitionCount: tp.partitions, ReplicationFactor: 3,
			})); err != nil {
				t.Fatalf("create topic %s of %s: %v", tp.name, name, err)
			}
			tn.topics = append(tn.topics, tp)
			left -= int(tp.partitions)
			row.Topics++
		}
		ts = append(ts, tn)
	}
	created := time.Now()
	row.Tenants = len(ts)
	row.CreateSeconds = created.Sub(createStart).Seconds()

	// Lead: every new partition led by a broker that has taken over.
	total := baseLeaders + n
	testenv.Wait(t, long, fmt.Sprintf("brokers leading %d partitions", total), func() error {
		if l := sumMetric(t, c, ids, "sluice_broker_leader_partitions"); l != total {
			return fmt.Errorf("brokers lead %d", l)
		}
		return nil
	})
	row.LeadSeconds = time.Since(created).Seconds()
	t.Logf("created %d partitions (%d topics, %d tenants) in %.1f s; brokers lead all %.1f s later",
		n, row.Topics, row.Tenants, row.CreateSeconds, row.LeadSeconds)

	// Idle: every ISR full first, then a fixed window.
	testenv.Wait(t, long, "every ISR full after create", func() error {
		if u := sumMetric(t, c, ids, "sluice_broker_under_replicated_partitions"); u != 0 {
			return fmt.Errorf("%d under-replicated", u)
		}
		return nil
	})
	scaleIdle(t, c, &row)

	scaleProduce(t, c, ts, &row)

	// Failover: the two other brokers lead everything.
	row.LeadersBeforeKill = sumMetric(t, c, ids, "sluice_broker_leader_partitions")
	victim, rest := ids[0], ids[1:]
	killed := time.Now()
	c.Kill(victim)
	testenv.Wait(t, long, fmt.Sprintf("brokers %v leading all %d partitions", rest, row.LeadersBeforeKill), func() error {
		if l := sumMetric(t, c, rest, "sluice_broker_leader_partitions"); l != row.LeadersBeforeKill {
			return fmt.Errorf("brokers %v lead %d", rest, l)
		}
		return nil
	})
	row.FailoverSeconds = time.Since(killed).Seconds()

	// The ISRs shrink (replica lag time), so that the rejoin has every
	// partition to catch up on.
	testenv.Wait(t, long, "every partition under-replicated", func() error {
		if u := sumMetric(t, c, rest, "sluice_broker_under_replicated_partitions"); u != row.LeadersBeforeKill {
			return fmt.Errorf("%d of %d under-replicated", u, row.LeadersBeforeKill)
		}
		return nil
	})
	row.ShrinkSeconds = time.Since(killed).Seconds()

	// Rejoin: from the restart until no ISR misses a replica.
	restarted := time.Now()
	c.Restart(victim, false)
	testenv.Wait(t, 2*long, "every ISR full after the rejoin", func() error {
		u, err := sumMetricErr(c, ids, "sluice_broker_under_replicated_partitions")
		if err != nil {
			return err
		}
		if u != 0 {
			return fmt.Errorf("%d under-replicated", u)
		}
		return nil
	})
	row.RejoinSeconds = time.Since(restarted).Seconds()
	t.Logf("failover %.1f s, ISRs shrunk %.1f s after the kill, rejoin %.1f s", row.FailoverSeconds, row.ShrinkSeconds, row.RejoinSeconds)
	return row
}

// scaleIdle measures the cluster's CPU over an idle window and each
// broker's RSS, goroutines and fds at its end.
func scaleIdle(t *testing.T, c *testcluster.Cluster, row *scaleRow) {
	const window = 10 * time.Second
	addrs := []string{c.ControlPlaneMetricsAddr()}
	for _, id := range c.BrokerIDs() {
		addrs = append(addrs, c.Broker(id).MetricsAddr)
	}
	cpu := func() []float64 {
		out := make([]float64, len(addrs))
		for i, a := range addrs {
			m, err := scrape(c.HTTPClient(), a, "process_cpu_seconds_total")
			if err != nil {
				t.Fatal(err)
			}
			out[i] = m["process_cpu_seconds_total"]
		}
		return out
	}
	before, t0 := cpu(), time.Now()
	// A measurement window, not a wait for a condition.
	select {
	case <-t.Context().Done():
		t.Fatal(t.Context().Err())
	case <-time.After(window):
	}
	after, wall := cpu(), time.Since(t0).Seconds()
	for i := range addrs {
		pct := (after[i] - before[i]) / wall * 100
		row.IdleCPUPercent += pct
		if i == 0 {
			row.ControlPlaneCPUPercent = pct
		}
	}
	ids := c.BrokerIDs()
	for _, id := range ids {
		m, err := scrape(c.HTTPClient(), c.Broker(id).MetricsAddr, "process_resident_memory_bytes", "go_goroutines", "process_open_fds")
		if err != nil {
			t.Fatal(err)
		}
		row.BrokerRSSMiB += m["process_resident_memory_bytes"] / (1 << 20) / float64(len(ids))
		row.BrokerGoroutines += m["go_goroutines"] / float64(len(ids))
		row.BrokerFDs += m["process_open_fds"] / float64(len(ids))
	}
	t.Logf("idle: CPU %.0f %% of one core (control plane %.0f %%); per broker RSS %.0f MiB, %.0f goroutines, %.0f fds",
		row.IdleCPUPercent, row.ControlPlaneCPUPercent, row.BrokerRSSMiB, row.BrokerGoroutines, row.BrokerFDs)
}

// scaleProduce produces 1 KiB records with acks=all over every partition,
// one SDK client and producer per tenant, each fed by its own goroutine
// that goes round-robin over the tenant's partitions (so that a producer
// whose buffer is full holds only its own tenant back), and counts the
// records acknowledged within the measured window.
func scaleProduce(t *testing.T, c *testcluster.Cluster, ts []scaleTenant, row *scaleRow) {
	const warmup, window = 3 * time.Second, 10 * time.Second
	ctx := t.Context()
	type target struct {
		topic     string
		partition int32
	}
	// The SDK's default buffer (32 MiB) shared among the producers, at
	// least 1 MiB each.
	buffer := max(1<<20, (32<<20)/len(ts))
	producers := make([]*client.Producer, len(ts))
	targets := make([][]target, len(ts))
	for i, tn := range ts {
		cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tn.apiKey))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		producers[i], err = cl.NewProducer(ctx, client.WithManualPartitioner(), client.WithBufferBytes(buffer))
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range tn.topics {
			for part := range tp.partitions {
				targets[i] = append(targets[i], target{topic: tp.name, partition: part})
			}
		}
	}
	value := make([]byte, 1024)
	for i := range value {
		value[i] = byte(rand.N(256))
	}
	var acked, failed atomic.Int64
	var errMu sync.Mutex
	errs := map[string]int{} // distinct failures, to log
	begin := time.Now()
	from, until := begin.Add(warmup), begin.Add(warmup+window)
	pctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	cb := func(_ *client.Record, err error) {
		now := time.Now()
		if now.Before(from) || now.After(until) {
			return
		}
		if err != nil {
			failed.Add(1)
			errMu.Lock()
			if len(errs) < 10 {
				errs[err.Error()]++
			}
			errMu.Unlock()
			return
		}
		acked.Add(1)
	}
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Go(func() {
			for j := 0; pctx.Err() == nil; j++ {
				tg := targets[i][j%len(targets[i])]
				p.Produce(pctx, &client.Record{Topic: tg.topic, Partition: tg.partition, Value: value}, cb)
			}
		})
	}
	wg.Wait()
	fctx, fcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer fcancel()
	for _, p := range producers {
		if err := p.Close(fctx); err != nil {
			t.Logf("close producer: %v", err)
		}
	}
	for e, n := range errs {
		t.Logf("produce failure (%d×): %s", n, e)
	}
	row.ProducePerSecond = float64(acked.Load()) / window.Seconds()
	row.ProduceFailed = failed.Load()
	t.Logf("produce: %.0f records/s acknowledged (1 KiB, acks=all, over %d partitions, %d producers), %d failed",
		row.ProducePerSecond, row.Partitions, len(producers), row.ProduceFailed)
}

// sumMetric sums an integer gauge over brokers, failing the test when a
// broker does not answer.
func sumMetric(t *testing.T, c *testcluster.Cluster, ids []int32, name string) int {
	t.Helper()
	v, err := sumMetricErr(c, ids, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sumMetricErr(c *testcluster.Cluster, ids []int32, name string) (int, error) {
	var sum float64
	for _, id := range ids {
		m, err := scrape(c.HTTPClient(), c.Broker(id).MetricsAddr, name)
		if err != nil {
			return 0, fmt.Errorf("broker %d: %w", id, err)
		}
		v, ok := m[name]
		if !ok {
			return 0, fmt.Errorf("broker %d has no %s", id, name)
		}
		sum += v
	}
	return int(sum), nil
}

// scrape reads the named metrics from an operator listener's /metrics
// (asking for those names only, so that a broker with thousands of
// partitions need not encode every series), summing each over its label
// sets.
func scrape(hc *http.Client, addr string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := url.Values{"name[]": names}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, res.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name := line[:strings.IndexAny(line+" ", " {")]
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:]) // value [timestamp]
		if !strings.Contains(line, "}") {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}
