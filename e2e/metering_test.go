package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// countingHTTP is an h2c client that counts the requests it sends to any
// host but skip (the control plane): the SDK's requests to brokers.
func countingHTTP(skip string, n *atomic.Int64) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: countingTransport{
		rt:   &http.Transport{Protocols: &p, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext},
		skip: skip, n: n,
	}}
}

type countingTransport struct {
	rt   http.RoundTripper
	skip string
	n    *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != c.skip {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// TestQuotaMeteringExactlyOnce: idempotent SDK producers write to a tenant's
// two topics while the answers to the brokers' usage reports are lost (an
// RPCProxy between each broker and the control plane serves ReportUsage
// whole and answers UNAVAILABLE, for 3 s windows, so the broker retries a
// report the control plane applied; twice a TCP proxy also loses every
// answer of the control plane, reports, heartbeats and assignments alike,
// for 1.5 s, well below the broker lease), the leader of a partition is
// SIGKILLed while no broker hears its reports answered (its successor
// meters the partition from where the control plane says metering
// stands), and later another broker. Once the load stops, the billed
// ingress (BillingService.GetUsage) settles at exactly the bytes in the
// log: the sum of the sizes of every data batch below each partition's
// high watermark, read back with raw fetches; no sample taken during the
// run is above it (ingress never goes down, so a range or report applied
// twice would show as more). Egress settles at exactly the bytes the
// test's raw fetches were answered (the tenant's only consumer), and the
// billed requests never exceed the requests the test's clients sent to
// brokers.
func TestQuotaMeteringExactlyOnce(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{
		Bin: plainBin, DatabaseURL: testenv.PostgresURL(t),
		// RPCProxies lose ReportUsage's answers only; Proxies lose every
		// answer of the control plane, in windows (1.5 s) well below the
		// lease, so that a broker whose heartbeats' answers are lost keeps
		// its epoch.
		Proxies: true, RPCProxies: true,
		BrokerLease:     6 * time.Second,
		ExtraBrokerArgs: []string{"--usage-report-interval", "200ms"},
	})
	ctx := t.Context()
	m1 := c.NewClient(t, "metered", "m1", 3, 2)
	m2 := m1.NewTopic(t, "m2", 3, nil)
	topics := []*testcluster.Client{m1, m2}

	var sdkSent atomic.Int64
	sdk, err := client.New(ctx, c.ControlPlane(), client.APIKey(m1.APIKey),
		client.WithHTTPClient(countingHTTP(c.ControlPlane()[len("http://"):], &sdkSent)))
	require.NoError(t, err)
	defer sdk.Close()

	// The load: two idempotent producers, about 200 records/s each of
	// random sizes (30 B to 3 KiB), spread over both topics' partitions.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var acked, failed atomic.Int64
	var wg sync.WaitGroup
	var producers []*client.Producer
	for i := range 2 {
		p, err := sdk.NewProducer(ctx, client.WithIdempotence(true), client.WithLinger(5*time.Millisecond))
		require.NoError(t, err)
		producers = append(producers, p)
		wg.Go(func() {
			rng := mrand.New(mrand.NewPCG(uint64(i), 17))
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				for range 2 {
					v := make([]byte, 30+rng.IntN(3000))
					_, _ = rand.Read(v)
					topic := topics[rng.IntN(len(topics))].Topic
					p.Produce(loadCtx, &client.Record{Topic: topic, Value: v}, func(_ *client.Record, err error) {
						if err != nil {
							failed.Add(1)
							return
						}
						acked.Add(1)
					})
				}
			}
		})
	}

	// The sampler: billed usage every 250 ms while the run lasts.
	type sample struct {
		at      time.Time
		ingress int64
	}
	var samplesMu sync.Mutex
	var samples []sample
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if u, err := m1.Usage(sampleCtx); err == nil {
				samplesMu.Lock()
				samples = append(samples, sample{time.Now(), u[sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES]})
				samplesMu.Unlock()
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-tick.C:
			}
		}
	})

	ingress := func() int64 {
		var v int64
		testenv.Wait(t, 10*time.Second, "GetUsage", func() error {
			u, err := m1.Usage(ctx)
			v = u[sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES]
			return err
		})
		return v
	}
	// growing waits until the billed ingress passed what it was, so each
	// fault lands while reports flow.
	growing := func(what string) {
		before := ingress()
		testenv.Wait(t, 30*time.Second, "billed ingress growing "+what, func() error {
			if now := ingress(); now <= before {
				return fmt.Errorf("billed ingress %d, was %d", now, before)
			}
			return nil
		})
	}
	// dropAnswers loses every answer of the control plane to the brokers
	// (reports, heartbeats, assignments) for a window of 1.5 s.
	dropAnswers := func(ids ...int32) {
		for _, id := range ids {
			c.Broker(id).CP.SetMode(testcluster.DropResponses)
		}
		c.Mark("dropping every answer of the control plane to brokers %v", ids)
		time.Sleep(1500 * time.Millisecond) // fault: the fault's length
		for _, id := range ids {
			c.Broker(id).CP.SetMode(testcluster.Pass)
		}
		c.Mark("passing the control plane's answers to brokers %v again", ids)
	}
	// dropReports loses the answers of the brokers' usage reports (and
	// only those) while it lasts.
	dropReports := func(on bool, ids ...int32) {
		for _, id := range ids {
			c.Broker(id).RPC.DropAnswers("ReportUsage", on)
		}
		c.Mark("dropping ReportUsage answers to brokers %v: %t", ids, on)
	}
	window := func() { time.Sleep(3 * time.Second) } // fault: a fault's length
	leaderOf := func(cl *testcluster.Client, partition int32) int32 {
		var l int32
		testenv.Wait(t, 30*time.Second, "a leader", func() error {
			if l = cl.NewestMetadata(ctx)[partition].Leader; l < 0 {
				return errors.New("offline")
			}
			return nil
		})
		return l
	}

	all := c.BrokerIDs()
	growing("at the start")
	dropReports(true, 1)
	window()
	dropReports(false, 1)
	growing("after losing broker 1's report answers")
	dropAnswers(2, 3)
	growing("after losing every answer to brokers 2 and 3")

	// The leader of m1/0 dies while no broker hears its reports answered.
	dropReports(true, all...)
	window()
	leader := leaderOf(m1, 0)
	c.Kill(leader)
	testenv.Wait(t, 30*time.Second, "a new leader of m1/0", func() error {
		if l := m1.NewestMetadata(ctx)[0].Leader; l < 0 || l == leader {
			return fmt.Errorf("leader %d", l)
		}
		return nil
	})
	dropReports(false, all...)
	growing("with the leader down")
	c.Restart(leader, false)
	c.WaitLive(all...)
	testcluster.WaitQuiesced(t, m1, []int32{0, 1, 2}, 30*time.Second)
	testcluster.WaitQuiesced(t, m2, []int32{0, 1, 2}, 30*time.Second)

	// Another broker dies while the restarted one's answers are lost.
	var other int32
	for _, id := range all {
		if id != leader && id != leaderOf(m1, 0) {
			other = id
		}
	}
	dropReports(true, leader)
	c.Kill(other)
	window()
	dropReports(false, leader)
	growing("with another broker down")
	c.Restart(other, false)
	c.WaitLive(all...)
	dropAnswers(all...)
	growing("after the last fault")

	stopLoad()
	wg.Wait()
	for _, p := range producers {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_ = p.Close(cctx)
		cancel()
	}
	t.Logf("records acknowledged %d, failed %d", acked.Load(), failed.Load())
	require.Positive(t, acked.Load())

	testcluster.WaitQuiesced(t, m1, []int32{0, 1, 2}, 30*time.Second)
	testcluster.WaitQuiesced(t, m2, []int32{0, 1, 2}, 30*time.Second)
	var logBytes, logBatches, logRecords, fetched int64
	for _, cl := range topics {
		for p := range int32(3) {
			s, err := cl.LogBytes(ctx, p)
			require.NoError(t, err)
			t.Logf("%s/%d: hw %d, %d data batches, %d records, %d bytes", cl.Topic, p, s.HW, s.Batches, s.Records, s.Bytes)
			logBytes += s.Bytes
			logBatches += s.Batches
			logRecords += s.Records
			fetched += s.Fetched
		}
	}
	require.GreaterOrEqual(t, logRecords, acked.Load(), "every acknowledged record is in the log")

	// Billed ingress settles at the log's bytes and stays there.
	var final map[sluicev1.UsageDimension]int64
	var equalSince time.Time
	testenv.Wait(t, 60*time.Second, "billed ingress equal to the log's bytes for 2 s", func() error {
		u, err := m1.Usage(ctx)
		if err != nil {
			return err
		}
		got := u[sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES]
		if got > logBytes {
			return testenv.Permanent(fmt.Errorf("billed ingress %d is above the log's %d bytes: counted twice", got, logBytes))
		}
		if got != logBytes {
			equalSince = time.Time{}
			return fmt.Errorf("billed ingress %d, log %d bytes", got, logBytes)
		}
		if equalSince.IsZero() {
			equalSince = time.Now()
		}
		if time.Since(equalSince) < 2*time.Second {
			return errors.New("equal; watching it stay so")
		}
		final = u
		return nil
	})
	stopSampling()
	sampler.Wait()
	for _, s := range samples {
		require.LessOrEqual(t, s.ingress, logBytes, "billed ingress at %s", s.at.Format(time.TimeOnly))
	}

	// Egress: the test's raw fetches are the tenant's only consumer. Their
	// answers reach the billing once the brokers report them (no broker
	// crashed after them).
	testenv.Wait(t, 30*time.Second, "billed egress equal to the bytes fetched", func() error {
		u, err := m1.Usage(ctx)
		if err != nil {
			return err
		}
		final = u
		if got := u[sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES]; got != fetched {
			if got > fetched {
				return testenv.Permanent(fmt.Errorf("billed egress %d is above the %d bytes fetched", got, fetched))
			}
			return fmt.Errorf("billed egress %d, fetched %d", got, fetched)
		}
		return nil
	})
	requests := final[sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS]
	sent := sdkSent.Load() + m1.Sent()
	require.Positive(t, requests)
	require.LessOrEqual(t, requests, sent, "billed requests are at most those sent to brokers")
	var lost int64
	for _, id := range all {
		lost += c.Broker(id).RPC.Dropped()
	}
	require.Positive(t, lost, "report answers were lost")
	samplesMu.Lock()
	n := len(samples)
	samplesMu.Unlock()
	t.Logf("log: %d data batches, %d records, %d bytes; billed ingress %d (%d samples during the run, none above); egress billed %d, fetched %d; requests billed %d, sent %d (SDK %d, raw %d); report answers lost %d (and every answer in the TCP windows)",
		logBatches, logRecords, logBytes, final[sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES], n,
		final[sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES], fetched, requests, sent, sdkSent.Load(), m1.Sent(), lost)
}
