package client_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
)

// steadyProducer produces "0", "1", … to a topic every 2 ms until
// stopped, and records each outcome.
type steadyProducer struct {
	mu      sync.Mutex
	acked   map[string]time.Time
	failed  map[string]error
	failAt  map[string]time.Time // when each failure was reported
	sentAt  map[string]time.Time
	stop    chan struct{}
	stopped chan struct{}
}

func produceEvery2ms(p *client.Producer, topic string) *steadyProducer {
	sp := &steadyProducer{acked: map[string]time.Time{}, failed: map[string]error{}, failAt: map[string]time.Time{}, sentAt: map[string]time.Time{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(sp.stopped)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-sp.stop:
				return
			case <-tick.C:
			}
			v := strconv.Itoa(i)
			sp.mu.Lock()
			sp.sentAt[v] = time.Now()
			sp.mu.Unlock()
			p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte(v)}, func(_ *client.Record, err error) {
				sp.mu.Lock()
				defer sp.mu.Unlock()
				if err != nil {
					sp.failed[v] = err
					sp.failAt[v] = time.Now()
				} else {
					sp.acked[v] = time.Now()
				}
			})
		}
	}()
	return sp
}

// ackedProducedAfter reports whether a record produced after t was
// acknowledged.
func (sp *steadyProducer) ackedProducedAfter(t time.Time) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for v := range sp.acked {
		if sp.sentAt[v].After(t) {
			return true
		}
	}
	return false
}

// A partition whose records keep failing at their delivery deadline while
// the leader refuses them must send again as soon as the leader accepts:
// a rewind that only fails batches past their deadline must not push the
// retry backoff further out (issue 12: with records arriving faster than
// the backoff, the partition never sent again and every record failed at
// its deadline, unsent). A refusal that says the batch was not written
// must not bump the producer epoch either (each bump used to renumber
// every queued batch, and enough of them exhaust the epoch), and every
// failure names the partition's last error, also for records never sent.
func TestFaultDeadlineFailuresDoNotStallThePartition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal func() error
		certain bool // the refusal says the batch was not written
	}{
		{"refused", func() error {
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("not enough replicas in sync"))
		}, true},
		{"unknown outcome", func() error {
			return connect.NewError(connect.CodeUnavailable, errors.New("leadership moved while waiting for replicas"))
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := fresh("stall-deadline-" + strings.ReplaceAll(tc.name, " ", "-"))
			createTopic(t, topic, 1, nil)
			// The leader refuses the partition's batches (in their
			// ProduceMany results) until the outage is removed.
			outage := addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Err: tc.refusal(), Entries: true})
			c := newClient(t)
			// A second, not less: once the outage ends the real cluster
			// must confirm acks=all within the timeout, or a record fails
			// with an unknown outcome (and bumps the epoch) for reasons
			// this test is not about (300 ms failed at load average ~10).
			p, err := c.NewProducer(context.Background(), client.WithLinger(0), client.WithDeliveryTimeout(time.Second))
			require.NoError(t, err)
			sp := produceEvery2ms(p, topic)

			// Let records fail at their deadline for a while: the queue is
			// full of batches past or near their deadline.
			testenv.Wait(t, 30*time.Second, "300 records failed at their deadline", func() error {
				sp.mu.Lock()
				defer sp.mu.Unlock()
				if len(sp.failed) < 300 {
					return fmt.Errorf("%d failed", len(sp.failed))
				}
				return nil
			})
			healed := time.Now()
			outage.Remove()
			testenv.Wait(t, 5*time.Second, "a record produced after the leader accepts again to be acknowledged", func() error {
				if !sp.ackedProducedAfter(healed) {
					return errors.New("none acknowledged yet")
				}
				return nil
			})
			close(sp.stop)
			<-sp.stopped
			require.NoError(t, p.Close(context.Background()))

			sp.mu.Lock()
			defer sp.mu.Unlock()
			// A record reported failed before the outage ended met only
			// the refusal. One failed later may have reached the healed
			// leader and failed waiting for acks=all, an unknown outcome
			// for reasons this test is not about (a loaded machine). Its
			// send time says nothing: a record joins a batch still
			// waiting to be sent and fails at that batch's deadline.
			refusedOnly := 0
			for v, err := range sp.failed {
				var de *client.DeliveryError
				require.ErrorAs(t, err, &de, v)
				require.NotNil(t, de.Last, "record %s: the failure names the partition's last error: %v", v, err)
				if tc.certain && sp.failAt[v].Before(healed) {
					refusedOnly++
					require.False(t, de.Indefinite, "record %s: refused, so certainly not written: %v", v, err)
				}
			}
			if tc.certain {
				require.GreaterOrEqual(t, refusedOnly, 300, "records failed during the outage")
			}
			logged := dataBatches(logBatches(t, topic, 0, len(sp.acked)))
			for v := range sp.acked {
				require.Equal(t, 1, countIn(logged, v), "acknowledged record %s written once: %v", v, logged)
			}
			// A record reported certainly not written is not in the log.
			// One that failed with an unknown outcome (after the outage,
			// waiting for acks=all on a loaded machine) may be.
			indefinite := 0
			for v, err := range sp.failed {
				var de *client.DeliveryError
				require.ErrorAs(t, err, &de, v)
				if de.Indefinite {
					indefinite++
					continue
				}
				require.Zero(t, countIn(logged, v), "record %s reported certainly not written: %v", v, err)
			}
			if tc.certain {
				// The refused batches were never written, so the log starts
				// after the outage: its first batch shows whether the
				// refusals bumped the epoch. They must not (each bump used
				// to renumber every queued batch). An unknown outcome after
				// the outage does bump it, rightly: only without one must
				// the whole log stay at epoch 0.
				require.NotEmpty(t, logged)
				require.Equal(t, int16(0), logged[0].epoch, "no epoch bump for refusals that said the batches were not written: %v", logged)
				if indefinite == 0 {
					for _, b := range logged {
						require.Equal(t, int16(0), b.epoch, "no epoch bump when every failed batch was certainly not written: %v", logged)
					}
				}
			}
		})
	}
}

// When a partition's producer epoch is exhausted, the partition continues
// under a new producer id instead of failing every record from then on.
func TestFaultEpochExhaustionTakesANewProducerID(t *testing.T) {
	topic := fresh("stall-epoch-exhaustion")
	createTopic(t, topic, 1, nil)
	// Every producer id comes one epoch short of the last (a real broker
	// hands those out only after 32766 bumps).
	var mu sync.Mutex
	var pids []int64
	addFault(t, localcluster.Fault{Procedure: "InitProducerId", Answer: func(_ localcluster.Call, res proto.Message) {
		r := res.(*sluicev1.InitProducerIdResponse)
		r.ProducerEpoch = math.MaxInt16 - 1
		mu.Lock()
		pids = append(pids, r.GetProducerId())
		mu.Unlock()
	}})
	// A and B: outcome unknown: the batch fails as indefinite at its
	// deadline and the epoch is bumped.
	reset := connect.NewError(connect.CodeUnavailable, errors.New("connection reset"))
	refuseA, refuseB := refuseValue("A", reset), refuseValue("B", reset)
	addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Entries: true,
		Hook: func(ctx context.Context, c localcluster.Call) error {
			if err := refuseA(ctx, c); err != nil {
				return err
			}
			return refuseB(ctx, c)
		}})
	c := newClient(t)
	// A and B fail at the delivery timeout; C and D, written under the
	// same producer, need theirs for acks=all, which took over 200 ms
	// with every core busy: 3 s serves both.
	p, err := c.NewProducer(context.Background(), client.WithDeliveryTimeout(3*time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	for _, v := range []string{"A", "B"} {
		err := p.ProduceSync(ctx, &client.Record{Topic: topic, Value: []byte(v)})
		var de *client.DeliveryError
		require.ErrorAs(t, err, &de, v)
		require.True(t, de.Indefinite, "%s: %v", v, err)
	}
	// A bumped the epoch to the last one, B past it: C goes out under a
	// new producer id.
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: topic, Value: []byte("C")}))
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: topic, Value: []byte("D")}))
	require.NoError(t, p.Close(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, pids, 2, "a second producer id")
	logged := dataBatches(logBatches(t, topic, 0, 2))
	epochs := map[[2]int64]int{}
	for _, b := range logged {
		epochs[[2]int64{b.pid, int64(b.epoch)}]++
	}
	require.Equal(t, map[[2]int64]int{{pids[1], math.MaxInt16 - 1}: 2}, epochs, "C and D written under the second producer id: %v", logged)
}

// Produce never waits for a metadata refresh once the topic is known: with
// every GetMetadata hanging (a paused broker) and the cached metadata past
// its max age, Produce returns at once and the record is delivered when
// metadata answers again (issue 12: Produce blocked on the refresh until
// its context ended and called back with a bare deadline_exceeded).
func TestFaultProduceNeverBlocksOnAMetadataRefresh(t *testing.T) {
	topic := fresh("stall-metadata-refresh")
	createTopic(t, topic, 1, nil)
	c := clientWith(t, client.WithMetadataMaxAge(time.Millisecond))
	p, err := c.NewProducer(context.Background())
	require.NoError(t, err)
	require.NoError(t, p.ProduceSync(context.Background(), &client.Record{Topic: topic, Value: []byte("A")}))

	g := make(gate)
	held := everywhere(t, localcluster.Fault{Procedure: "GetMetadata", Hook: g.hold})
	time.Sleep(5 * time.Millisecond) // clock: the cached metadata is now older than its max age
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res := make(chan error, 1)
	p.Produce(ctx, &client.Record{Topic: topic, Value: []byte("B")}, func(_ *client.Record, err error) { res <- err })
	select {
	case err := <-res:
		t.Fatalf("the record failed although it could be delivered once metadata answers: %v", err)
	case <-time.After(300 * time.Millisecond): // past Produce's ctx: still pending, not failed
	}
	close(g)
	select {
	case err := <-res:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("B was not delivered after metadata answered again")
	}
	held[0].Remove()
	held[1].Remove()
	require.Equal(t, 1, countIn(logBatches(t, topic, 0, 2), "B"))
	require.NoError(t, p.Close(context.Background()))
}

// Every failure a callback sees is a *DeliveryError, also the refusals
// before a record is buffered; those say it was not written, and keep
// their cause for errors.Is, errors.As and connect.CodeOf.
func TestFaultEveryCallbackErrorIsADeliveryError(t *testing.T) {
	topic := fresh("stall-delivery-errors")
	// Batches up to the producer's 4 KiB: a larger record is refused.
	createTopic(t, topic, 1, &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(4096))})
	c := newClient(t)
	p, err := c.NewProducer(context.Background(), client.WithMaxBatchBytes(4096), client.WithBufferBytes(4096),
		client.WithBlockOnFullBuffer(false), client.WithLinger(time.Hour))
	require.NoError(t, err)
	callback := func(ctx context.Context, r *client.Record) error {
		res := make(chan error, 1)
		p.Produce(ctx, r, func(_ *client.Record, err error) { res <- err })
		return <-res
	}
	notWritten := func(err error) *client.DeliveryError {
		t.Helper()
		var de *client.DeliveryError
		require.ErrorAs(t, err, &de)
		require.False(t, de.Indefinite, "refused before it was buffered: %v", err)
		require.ErrorContains(t, err, "the record was not written")
		return de
	}

	err = callback(context.Background(), nil)
	notWritten(err)
	err = callback(context.Background(), &client.Record{Topic: topic, Value: make([]byte, 8192)})
	notWritten(err)
	require.ErrorIs(t, err, client.ErrRecordTooLarge)
	err = callback(context.Background(), &client.Record{Topic: "", Value: []byte("x")})
	notWritten(err)
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))

	// A topic not cached yet, while metadata hangs: Produce waits for the
	// first fetch as long as its ctx lasts.
	g := make(gate)
	held := everywhere(t, localcluster.Fault{Procedure: "GetMetadata", Hook: g.hold})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err = callback(ctx, &client.Record{Topic: "other", Value: []byte("x")})
	cancel()
	notWritten(err)
	require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "%v", err)
	close(g)
	held[0].Remove()
	held[1].Remove()

	// A full buffer with WithBlockOnFullBuffer(false).
	p.Produce(context.Background(), &client.Record{Topic: topic, Value: make([]byte, 3000)}, nil)
	err = callback(context.Background(), &client.Record{Topic: topic, Value: make([]byte, 3000)})
	notWritten(err)
	require.ErrorIs(t, err, client.ErrBufferFull)

	require.NoError(t, p.Close(context.Background()))
	err = callback(context.Background(), &client.Record{Topic: topic, Value: []byte("x")})
	notWritten(err)
	require.ErrorIs(t, err, client.ErrProducerClosed)
}

// Metadata refreshes of a topic are shared and spaced: with the cached
// metadata always past its max age, 8 goroutines producing as fast as they
// can for 1 s cause one refresh at a time, at least 100 ms apart (about
// 10), not one per Produce.
func TestFaultMetadataRefreshesAreSharedAndSpaced(t *testing.T) {
	topic := fresh("stall-metadata-spaced")
	createTopic(t, topic, 1, nil)
	c := clientWith(t, client.WithMetadataMaxAge(time.Nanosecond))
	p, err := c.NewProducer(context.Background(), client.WithAcks(client.AcksLeader))
	require.NoError(t, err)
	require.NoError(t, p.ProduceSync(context.Background(), &client.Record{Topic: topic, Value: []byte("first")}))
	seen := everywhere(t, localcluster.Fault{Procedure: "GetMetadata"})
	metadataCalls := func() int64 { return int64(seen[0].Hits() + seen[1].Hits()) }
	before := metadataCalls()
	start := time.Now()
	var produced atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Since(start) < time.Second {
				p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte("x")}, nil)
				produced.Add(1)
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(context.Background()))
	calls, elapsed := metadataCalls()-before, time.Since(start) // Close's sends refresh too
	t.Logf("%d produces, %d metadata refreshes in %s", produced.Load(), calls, elapsed.Round(time.Millisecond))
	require.Greater(t, produced.Load(), 10*calls, "refreshes are shared, not one per Produce")
	require.LessOrEqual(t, calls, int64(elapsed/(100*time.Millisecond))+2, "refreshes start at least 100 ms apart")
}
