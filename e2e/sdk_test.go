package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// sdkRun is one producer run's history: what each record's callback said.
type sdkRun struct {
	mu     sync.Mutex
	acked  map[int]int32 // value → partition, for records acknowledged
	failed map[int]error
}

// produceSteadily produces values 0..n-1 through p at about rate records/s
// and waits for every outcome.
func produceSteadily(t *testing.T, p *client.Producer, topic string, n, rate int) *sdkRun {
	t.Helper()
	run := &sdkRun{acked: map[int]int32{}, failed: map[int]error{}}
	const tick = 10 * time.Millisecond
	perTick := max(1, rate/int(time.Second/tick))
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for i := 0; i < n; {
		<-ticker.C
		for j := 0; j < perTick && i < n; j, i = j+1, i+1 {
			v := i
			p.Produce(t.Context(), &client.Record{Topic: topic, Value: []byte(strconv.Itoa(v))}, func(r *client.Record, err error) {
				run.mu.Lock()
				defer run.mu.Unlock()
				if err != nil {
					run.failed[v] = err
					return
				}
				run.acked[v] = r.Partition
			})
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, p.Flush(ctx))
	return run
}

// readBack consumes every partition of topic from the start up to its high
// watermark and returns the values per partition, in offset order.
func readBack(t *testing.T, c *client.Client, topic string) map[int32][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := c.Partitions(ctx, topic)
	require.NoError(t, err)
	cs, err := c.NewConsumer(client.WithFetchMaxWait(100 * time.Millisecond))
	require.NoError(t, err)
	defer cs.Close()
	want := 0
	for p := range n {
		var hw int64
		testenv.Wait(t, 30*time.Second, "high watermark", func() error {
			_, hw, err = c.Watermarks(ctx, topic, p)
			return err
		})
		want += int(hw)
		require.NoError(t, cs.Assign(ctx, topic, p, client.Earliest()))
	}
	out := map[int32][]int{}
	got := 0
	for got < want {
		recs, err := cs.Poll(ctx)
		require.NoError(t, err, "read %d of %d", got, want)
		for _, r := range recs {
			v, err := strconv.Atoi(string(r.Value))
			require.NoError(t, err)
			out[r.Partition] = append(out[r.Partition], v)
		}
		got += len(recs)
	}
	return out
}

// verdict counts duplicates (a value at two offsets), acknowledged values
// never read, and values that go backwards within a partition.
type verdict struct{ duplicates, lost, reordered int }

func judge(run *sdkRun, read map[int32][]int) verdict {
	var v verdict
	seen := map[int]int{}
	for _, vals := range read {
		for i, x := range vals {
			seen[x]++
			if seen[x] == 2 {
				v.duplicates++
			}
			if i > 0 && x < vals[i-1] {
				v.reordered++
			}
		}
	}
	for x := range run.acked {
		if seen[x] == 0 {
			v.lost++
		}
	}
	return v
}

// TestSDKLostAcknowledgements drops the brokers' answers now and then (the
// request arrives and is written; its acknowledgement is lost), so the
// producer retries writes that succeeded. With idempotence the leader
// recognises every retry: no duplicate, no gap, no reordering. Without it
// the same faults write duplicates, and the test insists on seeing them.
func TestSDKLostAcknowledgements(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t), Proxies: true})
	tc := c.NewClient(t, "acme", "idem", 3, 2)
	ctl := c.NewClient(t, "beta", "plain", 3, 2)

	faults := func(ctx context.Context) {
		for i := 0; ctx.Err() == nil; i++ {
			b := c.Broker(c.BrokerIDs()[i%3])
			b.In.SetMode(testcluster.DropResponses)
			time.Sleep(120 * time.Millisecond) // fault: a broker drops its answers
			b.In.SetMode(testcluster.Pass)
			time.Sleep(250 * time.Millisecond) // fault: then answers again
		}
	}
	run := func(apiKey, topic string, idempotent bool) (*sdkRun, verdict) {
		cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(apiKey))
		require.NoError(t, err)
		defer cl.Close()
		p, err := cl.NewProducer(t.Context(), client.WithIdempotence(idempotent),
			client.WithRequestTimeout(time.Second), client.WithDeliveryTimeout(90*time.Second), client.WithLinger(5*time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, idempotent, p.Idempotent())
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { defer close(done); faults(ctx) }()
		h := produceSteadily(t, p, topic, 10000, 2500)
		stop()
		<-done
		require.NoError(t, p.Close(t.Context()))
		for _, b := range c.BrokerIDs() {
			c.Broker(b).In.SetMode(testcluster.Pass)
		}
		v := judge(h, readBack(t, cl, topic))
		t.Logf("idempotence=%v: %d acknowledged, %d failed, %d duplicates, %d lost, %d reordered",
			idempotent, len(h.acked), len(h.failed), v.duplicates, v.lost, v.reordered)
		return h, v
	}

	h, v := run(tc.APIKey, "idem", true)
	require.Equal(t, 10000, len(h.acked), "every record acknowledged within the delivery timeout; failures: %v", firstErrors(h.failed))
	require.Equal(t, verdict{}, v, "idempotence: no duplicates, no gaps, no reordering")
	dups := 0.0
	for _, id := range c.BrokerIDs() {
		dups += metricValue(t, "http://"+c.Broker(id).MetricsAddr+"/metrics", "sluice_broker_produce_duplicates_total")
	}
	t.Logf("leaders answered %.0f retried batches as duplicates", dups)
	require.Positive(t, dups, "the faults made the producer retry batches that had been written")

	h, v = run(ctl.APIKey, "plain", false)
	require.Empty(t, h.failed)
	require.Zero(t, v.lost)
	require.Positive(t, v.duplicates, "without idempotence the same faults write duplicates")
}

func firstErrors(m map[int]error) []string {
	var out []string
	for v, err := range m {
		if len(out) == 3 {
			break
		}
		out = append(out, fmt.Sprintf("%d: %v", v, err))
	}
	return out
}

// TestSDKKillLeaderMidStream SIGKILLs the leader of partition 0 while an
// idempotent producer streams to all partitions: every record is
// acknowledged once the partition fails over, none twice, none out of order.
func TestSDKKillLeaderMidStream(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	tc := c.NewClient(t, "acme", "events", 3, 2)
	cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(90*time.Second), client.WithRequestTimeout(5*time.Second))
	require.NoError(t, err)

	killed := make(chan int32, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond) // fault: the kill strikes 1.5 s into the stream
		leader := tc.NewestMetadata(t.Context())[0].Leader
		c.Kill(leader)
		killed <- leader
	}()
	h := produceSteadily(t, p, "events", 12000, 2000)
	require.NoError(t, p.Close(t.Context()))
	leader := <-killed
	c.Restart(leader, false)
	c.WaitLive(c.BrokerIDs()...)

	require.Equal(t, 12000, len(h.acked), "failures: %v", firstErrors(h.failed))
	v := judge(h, readBack(t, cl, "events"))
	require.Equal(t, verdict{}, v, "no duplicates, no loss, no reordering across the failover")
}

// TestSDKOfflinePartition: with the only replica of a partition dead, each
// record fails after the delivery timeout with an error that says why, and
// nothing is reported delivered that was not.
func TestSDKOfflinePartition(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t), Brokers: 1})
	tc := c.NewClient(t, "acme", "solo", 1, 1)
	cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(4*time.Second), client.WithRequestTimeout(time.Second))
	require.NoError(t, err)
	before := &client.Record{Topic: "solo", Value: []byte("before")}
	require.NoError(t, p.ProduceSync(t.Context(), before))

	c.Kill(c.BrokerIDs()[0])
	start := time.Now()
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		p.Produce(t.Context(), &client.Record{Topic: "solo", Value: fmt.Appendf(nil, "during-%d", i)}, func(_ *client.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	wg.Wait()
	took := time.Since(start)
	for i, err := range errs {
		require.Error(t, err, "record %d cannot be delivered", i)
		require.ErrorIs(t, err, client.ErrDeliveryTimeout, "record %d", i)
		var de *client.DeliveryError
		require.True(t, errors.As(err, &de))
		require.NotNil(t, de.Last, "the error names the last cause: %v", err)
	}
	t.Logf("first error after %s: %v", took.Round(time.Millisecond), errs[0])
	require.GreaterOrEqual(t, took, 4*time.Second, "not before the delivery timeout")
	require.Less(t, took, 15*time.Second, "soon after it")

	c.Restart(c.BrokerIDs()[0], false)
	c.WaitLive(c.BrokerIDs()...)
	// The same producer notices the partition is back (its cached routing
	// said offline) and delivers again.
	after := &client.Record{Topic: "solo", Value: []byte("after")}
	actx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.ProduceSync(actx, after))
	require.NoError(t, p.Close(t.Context()))
	// Only the record acknowledged before the kill; failed records that
	// were certainly not written must not appear.
	var vals []string
	cs, err := cl.NewConsumer()
	require.NoError(t, err)
	defer cs.Close()
	require.NoError(t, cs.Assign(t.Context(), "solo", 0, client.Earliest()))
	recs, err := cs.Poll(t.Context())
	require.NoError(t, err)
	for _, r := range recs {
		vals = append(vals, string(r.Value))
	}
	for i, err := range errs {
		var de *client.DeliveryError
		if errors.As(err, &de) && !de.Indefinite {
			require.NotContains(t, vals, fmt.Sprintf("during-%d", i), "reported as not written")
		}
	}
	require.Contains(t, vals, "before")
	require.Contains(t, vals, "after")
}

// metricValue reads one unlabelled metric from a Prometheus text endpoint.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("metric %s not found at %s", name, url)
	return 0
}
