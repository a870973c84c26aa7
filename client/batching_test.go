package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/localcluster"
)

// gatedTopic creates topic with partitions and holds every produce
// request to it until the test opens the gate: a broker slow enough
// that every request slot of the producer is busy while the test
// produces. The fault's Hits count the requests that arrived.
func gatedTopic(t *testing.T, topic string, partitions int32) (*localcluster.FaultHandle, func()) {
	createTopic(t, topic, partitions, nil)
	g := make(gate)
	var once sync.Once
	open := func() { once.Do(func() { close(g) }) }
	t.Cleanup(open)
	f := addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Hook: g.hold})
	return f, open
}

// written is the data batches of topic's partition 0, once it holds n
// records.
func written(t *testing.T, topic string, n int) []loggedBatch {
	return dataBatches(logBatches(t, topic, 0, n))
}

// burst produces n records of a 1 KiB value to topic t without waiting
// for them, pace apart (a steady stream rather than a burst when not 0),
// and returns a func that waits for their callbacks and checks they all
// succeeded, in order per partition.
func burst(t *testing.T, p *client.Producer, topic string, n int, pace time.Duration) (recs []*client.Record, wait func()) {
	t.Helper()
	var (
		mu    sync.Mutex
		errs  []error
		order = map[int32][]int{}
		wg    sync.WaitGroup
	)
	wg.Add(n)
	for i := range n {
		if pace > 0 {
			time.Sleep(pace) // pacing: the load's shape
		}
		r := &client.Record{Topic: topic, Value: fmt.Appendf(make([]byte, 0, 1024), "%04d%01020d", i, 0)}
		recs = append(recs, r)
		p.Produce(context.Background(), r, func(r *client.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("record %d: %w", i, err))
			}
			order[r.Partition] = append(order[r.Partition], i)
			wg.Done()
		})
	}
	return recs, func() {
		t.Helper()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		require.Empty(t, errs)
		for part, is := range order {
			for j := 1; j < len(is); j++ {
				require.Less(t, is[j-1], is[j], "partition %d: callbacks in produce order", part)
			}
		}
	}
}

// TestProducerBatchesNaturallyUnderLoad: with linger 0 (the default),
// records produced while every request slot of the partition is busy
// gather into batches as large as the batch limit allows, instead of a
// request each (issue 14: WithLinger(0) sent one-record requests and
// collapsed at 10 MiB/s), for a burst of 1000 records and for a steady
// stream of them. At most maxInFlight requests go out before the gate
// opens, holding whatever had arrived; the rest follows in full batches.
// Idempotent: the broker's producer state checks that the batches'
// sequences follow each other.
func TestProducerBatchesNaturallyUnderLoad(t *testing.T) {
	type tcase struct {
		name        string
		opts        []client.ProducerOption
		maxInFlight int
		batchBytes  int
		pace        time.Duration
	}
	var cases []tcase
	for _, pace := range []time.Duration{0, 200 * time.Microsecond} {
		shape := "burst"
		if pace > 0 {
			shape = "steady"
		}
		cases = append(cases,
			tcase{shape + "/default", nil, 5, 256 << 10, pace},
			tcase{shape + "/linger 0", []client.ProducerOption{client.WithLinger(0)}, 5, 256 << 10, pace},
			tcase{shape + "/one in flight, 64 KiB batches", []client.ProducerOption{client.WithLinger(0), client.WithMaxInFlight(1), client.WithMaxBatchBytes(64 << 10)}, 1, 64 << 10, pace})
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := fresh(fmt.Sprintf("batching-under-load-%d", i))
			f, open := gatedTopic(t, topic, 1)
			defer open()
			c := newClient(t)
			p, err := c.NewProducer(context.Background(), tc.opts...)
			require.NoError(t, err)
			defer p.Close(context.Background())
			require.True(t, p.Idempotent())

			const n = 1000
			_, wait := burst(t, p, topic, n, tc.pace)
			// Every request slot is taken (the first records went out at
			// once), and the rest of the burst waits in the producer.
			testenv.Wait(t, 10*time.Second, "the first requests at the gate", func() error {
				if got := f.Hits(); got == 0 {
					return fmt.Errorf("%d requests arrived", got)
				}
				return nil
			})
			open()
			wait()
			// Released together, the first requests may reach the broker
			// out of order and be refused for a sequence gap, then retried:
			// the batches written are what the producer made.
			bs := written(t, topic, n)
			records := 0
			for _, b := range bs {
				records += len(b.values)
				require.LessOrEqual(t, b.bytes, tc.batchBytes, "a batch stays within the batch limit")
			}
			require.Equal(t, n, records, "each record written once")
			// The records behind the first wave fill batches: about 1 KiB
			// each, so batchBytes/1.1 KiB or more per batch.
			full := tc.batchBytes / 1100
			bound := tc.maxInFlight + (n+full-1)/full + 1
			t.Logf("%d records in %d batches (bound %d; %d requests with retries): %v", n, len(bs), bound, f.Hits(), bs)
			require.LessOrEqual(t, len(bs), bound, "records gathered into few large batches while the slots were busy")
		})
	}
}

// TestProducerSendsARecordAtOnceWhenIdle: on an idle partition a record
// goes out on its own, without Flush or ProduceSync and without waiting
// for more records (no linger by default), and the next one too: natural
// batching never holds a record back while a request slot is free.
func TestProducerSendsARecordAtOnceWhenIdle(t *testing.T) {
	t.Parallel()
	topic := fresh("batching-idle")
	createTopic(t, topic, 1, nil)
	c := newClient(t)
	p, err := c.NewProducer(context.Background())
	require.NoError(t, err)
	defer p.Close(context.Background())
	for i := range 3 {
		start := time.Now()
		done := make(chan error, 1)
		p.Produce(context.Background(), &client.Record{Topic: topic, Value: fmt.Appendf(nil, "r%d", i)}, func(_ *client.Record, err error) { done <- err })
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("record %d not sent: it waits for more records or a flush", i)
		}
		t.Logf("record %d acknowledged after %s", i, time.Since(start))
	}
	bs := written(t, topic, 3)
	require.Len(t, bs, 3, "one batch per record: each was sent before the next was produced")
	for _, b := range bs {
		require.Len(t, b.values, 1)
	}
}

// TestProducerLingerHoldsABatchUntilFlush: WithLinger(d) holds a batch
// that could be sent for up to d (here an hour), so records produced one
// after another share one request; Flush sends it without waiting.
func TestProducerLingerHoldsABatchUntilFlush(t *testing.T) {
	t.Parallel()
	topic := fresh("batching-linger")
	createTopic(t, topic, 1, nil)
	c := newClient(t)
	p, err := c.NewProducer(context.Background(), client.WithLinger(time.Hour))
	require.NoError(t, err)
	defer p.Close(context.Background())
	_, wait := burst(t, p, topic, 10, 0)
	require.NoError(t, p.Flush(context.Background()))
	wait()
	bs := written(t, topic, 10)
	require.Len(t, bs, 1, "the lingering batch took every record: %v", bs)
	require.Len(t, bs[0].values, 10)
}

// TestProducerStickyPartitionerKeepsOnePartitionPerBatch: records without
// a key stay on one partition until the batch they go into there is
// sealed (sent, or full), not for a fixed 16 KiB: with every request slot
// busy, a burst fills one partition's batch before the partitioner moves
// on, so consecutive records change partition only at a batch boundary.
func TestProducerStickyPartitionerKeepsOnePartitionPerBatch(t *testing.T) {
	t.Parallel()
	topic := fresh("batching-sticky")
	_, open := gatedTopic(t, topic, 3)
	defer open()
	c := newClient(t)
	const batchBytes = 64 << 10
	p, err := c.NewProducer(context.Background(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader),
		client.WithMaxInFlight(1), client.WithMaxBatchBytes(batchBytes))
	require.NoError(t, err)
	defer p.Close(context.Background())

	const n = 1000
	recs, wait := burst(t, p, topic, n, 0)
	// The partition is chosen in Produce: the sequence is known already.
	switches := 0
	runs := []int{1}
	for i := 1; i < n; i++ {
		if recs[i].Partition != recs[i-1].Partition {
			switches++
			runs = append(runs, 0)
		}
		runs[len(runs)-1]++
	}
	open()
	wait()
	// A switch follows a sealed batch: one per partition whose first
	// batch was sent at once (its slot was free), then one per full batch.
	full := batchBytes / 1100
	bound := 3 + (n+full-1)/full
	t.Logf("%d switches (bound %d), records per stay: %v", switches, bound, runs)
	require.LessOrEqual(t, switches, bound, "the partitioner moves on only when a batch is sealed")
	parts := map[int32]bool{}
	for _, r := range recs {
		parts[r.Partition] = true
	}
	require.Greater(t, len(parts), 1, "the records still spread over the partitions")
}
