package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// crashLoopProducer is one live producer of TestSDKWholeClusterCrashLoop
// and its history: what each record's callback said, and when each
// partition last acknowledged a record.
type crashLoopProducer struct {
	name string
	p    *client.Producer
	log  *syncBuffer // the SDK's debug log

	mu        sync.Mutex
	acked     map[int]int32 // value → partition
	failed    map[int]error
	lastAck   map[int32]time.Time
	produced  int
	firstFail map[int32]error // the first failure per partition, for the report
}

func (cp *crashLoopProducer) outcome(v int, r *client.Record, err error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if err != nil {
		cp.failed[v] = err
		if cp.firstFail[r.Partition] == nil {
			cp.firstFail[r.Partition] = err
		}
		return
	}
	cp.acked[v] = r.Partition
	cp.lastAck[r.Partition] = time.Now()
}

// ackedSince reports the partitions that acknowledged a record after t.
func (cp *crashLoopProducer) ackedSince(t time.Time) map[int32]bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := map[int32]bool{}
	for p, at := range cp.lastAck {
		if at.After(t) {
			out[p] = true
		}
	}
	return out
}

// TestSDKWholeClusterCrashLoop SIGKILLs all three brokers at once and
// restarts them, 5–7 times, down 1–4 s and up 1–4 s, while two idempotent
// producers (acks=all) write about 300 records/s in all, spread over a
// 3-partition RF 3 topic with min ISR 2. Once the cluster acknowledges
// acks=all writes on every partition again, every producer × partition
// must be acknowledged again within a bound: no producer may stay wedged
// on a partition (issue 12: one producer's records to one partition failed
// at their delivery timeout, never attempted, for up to 40 s after the
// cluster was healthy). Then the usual checks: nothing acknowledged is
// lost, nothing is written twice, nothing reordered.
//
// The wedge needs records to reach their delivery timeout during the
// outage, so the producers run with a 4 s delivery timeout (the report's
// 20 s rarely expires on this machine, where the cluster comes back
// faster). The fault schedule comes from a seed (-fault-seed or
// SLUICE_FAULT_SEED, default 1); SLUICE_SOAK=1 runs 5 seeds, each with a
// 4 s and a 20 s delivery timeout.
func TestSDKWholeClusterCrashLoop(t *testing.T) {
	t.Parallel()
	seeds := []uint64{faultSeed(t)}
	timeouts := []time.Duration{4 * time.Second}
	if soak() {
		for i := uint64(1); i < 5; i++ {
			seeds = append(seeds, seeds[0]+i)
		}
		timeouts = append(timeouts, 20*time.Second)
	}
	for _, dt := range timeouts {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("delivery-timeout=%s/seed=%d", dt, seed), func(t *testing.T) { sdkCrashLoop(t, seed, dt) })
		}
	}
}

func sdkCrashLoop(t *testing.T, seed uint64, deliveryTimeout time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a54))
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	const partitions = 3
	tc := c.NewClient(t, "acme", "crashloop", partitions, 2)

	producers := make([]*crashLoopProducer, 2)
	for i := range producers {
		cp := &crashLoopProducer{
			name: fmt.Sprintf("producer %d", i), log: &syncBuffer{},
			acked: map[int]int32{}, failed: map[int]error{}, lastAck: map[int32]time.Time{}, firstFail: map[int32]error{},
		}
		logger := slog.New(slog.NewTextHandler(cp.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey), client.WithLogger(logger))
		require.NoError(t, err)
		t.Cleanup(func() { cl.Close() })
		cp.p, err = cl.NewProducer(t.Context(), client.WithManualPartitioner(),
			client.WithDeliveryTimeout(deliveryTimeout), client.WithRequestTimeout(5*time.Second))
		require.NoError(t, err)
		require.True(t, cp.p.Idempotent())
		producers[i] = cp
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, cp := range producers {
				t.Logf("%s's SDK log (tail):\n%s", cp.name, tailLines(cp.log.String(), 80))
			}
			var buf strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Logf("goroutines:\n%s", buf.String())
		}
	})

	// Each producer writes 150 records/s, round-robin over the partitions,
	// values unique across producers.
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i, cp := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticker := time.NewTicker(20 * time.Millisecond)
			defer ticker.Stop()
			for n := 0; ctx.Err() == nil; {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
				for range 3 {
					v := n*len(producers) + i
					r := &client.Record{Topic: "crashloop", Partition: int32(n % partitions), Value: fmt.Appendf(nil, "%d", v)}
					cp.mu.Lock()
					cp.produced++
					cp.mu.Unlock()
					cp.p.Produce(ctx, r, func(r *client.Record, err error) { cp.outcome(v, r, err) })
					n++
				}
			}
		}()
	}

	// healthy waits until every partition acknowledges an acks=all write
	// from an independent client, and returns when it did.
	healthy := func(what string) time.Time {
		t.Helper()
		c.WaitLive(c.BrokerIDs()...)
		for p := range int32(partitions) {
			testenv.Wait(t, 90*time.Second, fmt.Sprintf("partition %d to acknowledge acks=all (%s)", p, what), func() error {
				pctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
				defer cancel()
				return tc.Produce(pctx, p, []string{"-1"}, sluicev1.Acks_ACKS_ALL, 2*time.Second).Err
			})
		}
		return time.Now()
	}
	// everyPartitionAcked waits until every producer × partition has
	// acknowledged a record after since, and fails with the wedged ones.
	everyPartitionAcked := func(since time.Time, bound time.Duration, what string) {
		t.Helper()
		testenv.Wait(t, bound, what, func() error {
			var wedged []string
			for _, cp := range producers {
				got := cp.ackedSince(since)
				for p := range int32(partitions) {
					if !got[p] {
						cp.mu.Lock()
						wedged = append(wedged, fmt.Sprintf("%s partition %d (last ack %s ago, first failure: %v)",
							cp.name, p, time.Since(cp.lastAck[p]).Round(time.Millisecond), cp.firstFail[p]))
						cp.mu.Unlock()
					}
				}
			}
			if len(wedged) > 0 {
				return fmt.Errorf("no acknowledgement since %s: %s", since.Format("15:04:05.000"), strings.Join(wedged, "; "))
			}
			return nil
		})
	}
	// The bound after the cluster is healthy: a producer's backoff is at
	// most 1 s and a metadata refresh one round trip; 15 s leaves room for a
	// loaded machine. A wedged partition (records failing at their
	// deadline, unsent) never acknowledges again and fails it.
	const bound = 15 * time.Second
	everyPartitionAcked(healthy("before the faults"), bound, "every producer × partition acknowledged before the faults")

	crashes := 5 + rng.IntN(3)
	c.Mark("crash loop: seed %d, %d whole-cluster crashes", seed, crashes)
	for i := range crashes {
		ids := c.BrokerIDs()
		rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
		for _, id := range ids {
			c.Kill(id)
		}
		down := time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		time.Sleep(down) // fault: the whole cluster down
		for _, id := range ids {
			c.Restart(id, false)
		}
		if i == crashes-1 {
			break
		}
		up := time.Duration(1000+rng.IntN(3000)) * time.Millisecond
		c.Mark("crash %d/%d: down %s, up for %s", i+1, crashes, down, up)
		time.Sleep(up) // fault: up for a while before the next crash
	}
	restarted := time.Now()
	h := healthy("after the faults")
	t.Logf("healthy %s after the last restart", h.Sub(restarted).Round(time.Millisecond))
	everyPartitionAcked(h, bound, "every producer × partition acknowledged again after the cluster is healthy")
	t.Logf("every producer × partition acknowledged again %s after the cluster was healthy", time.Since(h).Round(time.Millisecond))

	stop()
	wg.Wait()
	for _, cp := range producers {
		fctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		require.NoError(t, cp.p.Close(fctx))
		cancel()
	}

	// Nothing acknowledged lost, nothing twice, nothing reordered per
	// producer within a partition.
	cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()
	read := readBack(t, cl, "crashloop")
	seen := map[int]int{}
	dups, reordered := 0, 0
	for _, vals := range read {
		last := map[int]int{} // producer → last value
		for _, v := range vals {
			if v < 0 {
				continue
			}
			if seen[v]++; seen[v] == 2 {
				dups++
			}
			pr := v % len(producers)
			if lv, ok := last[pr]; ok && v < lv {
				reordered++
			}
			last[pr] = v
		}
	}
	lost := 0
	for _, cp := range producers {
		for v := range cp.acked {
			if seen[v] == 0 {
				lost++
			}
		}
		t.Logf("%s: %d produced, %d acknowledged, %d failed (first: %v)", cp.name, cp.produced, len(cp.acked), len(cp.failed), firstErrors(cp.failed))
	}
	require.Zero(t, lost, "acknowledged records lost")
	require.Zero(t, dups, "records written twice")
	require.Zero(t, reordered, "records out of order within a partition")
}

// tailLines is the last n lines of s.
func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
