package client_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestProducerGathersPartitionsIntoOneRequestPerBroker: the batches of
// many partitions led by one broker travel together. With every
// ProduceMany slot to the broker busy (the first five batches, one request
// each, held at the fake's gate), the next 25 partitions' batches wait in
// the producer and then leave as one request of 25 entries.
func TestProducerGathersPartitionsIntoOneRequestPerBroker(t *testing.T) {
	t.Parallel()
	f, open := gatedBroker(30)
	defer open()
	c := startFake(t, f)
	p, err := c.NewProducer(context.Background(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader), client.WithManualPartitioner())
	require.NoError(t, err)
	defer p.Close(context.Background())

	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(30)
	for i := range int32(30) {
		p.Produce(context.Background(), &client.Record{Topic: "t", Partition: i, Value: []byte("x")}, func(_ *client.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	// The five requests are counted when the fake receives them, which
	// may be after the producer queued the rest (a loaded machine).
	testenv.Wait(t, 10*time.Second, "25 batches waiting for a slot, 5 requests at the gate", func() error {
		if n, calls := client.QueuedProduces(p), f.manyCalls.Load(); n != 25 || calls < 5 {
			return fmt.Errorf("%d waiting, %d requests at the gate", n, calls)
		}
		return nil
	})
	require.EqualValues(t, 5, f.manyCalls.Load(), "one request per free slot")
	require.Equal(t, 25, client.QueuedProduces(p))
	open()
	wg.Wait()
	require.Zero(t, failed.Load())
	require.EqualValues(t, 6, f.manyCalls.Load(), "the waiting batches left together")
	require.EqualValues(t, 30, f.entries.Load())
	require.Len(t, f.batches(), 30)
}

// TestProducerFallsBackToProduceOnAnOldBroker: a broker that answers
// ProduceMany with Unimplemented (a version before it) gets one Produce per
// batch, and every record is written once.
func TestProducerFallsBackToProduceOnAnOldBroker(t *testing.T) {
	t.Parallel()
	f := &fakeBroker{partitions: 30, single: true}
	c := startFake(t, f)
	p, err := c.NewProducer(context.Background(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader), client.WithManualPartitioner())
	require.NoError(t, err)
	defer p.Close(context.Background())
	for round := range 3 {
		recs := make([]*client.Record, 30)
		for i := range recs {
			recs[i] = &client.Record{Topic: "t", Partition: int32(i), Value: fmt.Appendf(nil, "%d-%d", round, i)}
		}
		require.NoError(t, p.ProduceSync(context.Background(), recs...))
	}
	require.Len(t, f.batches(), 90, "each batch written once, by Produce")
	require.EqualValues(t, 90, f.requests())
	require.LessOrEqual(t, f.manyCalls.Load(), int64(5), "ProduceMany is tried only until the broker said it does not serve it")
	require.Zero(t, f.entries.Load())
}

// countingTransport counts requests by path.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// TestProducerManyPartitionsFewRequests: against the in-process cluster,
// records spread over 60 partitions (20 per broker) travel in ProduceMany
// requests that each carry many partitions, never in Produce requests, and
// every record of a partition is written once, in order.
func TestProducerManyPartitionsFewRequests(t *testing.T) {
	t.Parallel()
	createTopic(t, "many60", 60, nil)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	ct := &countingTransport{next: &http.Transport{Protocols: &protos}, n: map[string]int{}}
	c, err := client.New(context.Background(), endpoint, client.APIKey(apiKey), client.WithHTTPClient(&http.Client{Transport: ct}))
	require.NoError(t, err)
	defer c.Close()
	p, err := c.NewProducer(context.Background(), client.WithManualPartitioner(), client.WithMaxInFlight(1))
	require.NoError(t, err)
	defer p.Close(context.Background())
	require.True(t, p.Idempotent())

	const rounds = 5
	var recs []*client.Record
	for round := range rounds {
		for i := range 60 {
			recs = append(recs, &client.Record{Topic: "many60", Partition: int32(i), Value: fmt.Appendf(nil, "%d-%d", round, i)})
		}
	}
	require.NoError(t, p.ProduceSync(context.Background(), recs...))
	last := map[int32]int64{}
	for _, r := range recs {
		if prev, ok := last[r.Partition]; ok {
			require.Greater(t, r.Offset, prev, "partition %d in order", r.Partition)
		}
		last[r.Partition] = r.Offset
	}
	for part, off := range last {
		require.EqualValues(t, rounds-1, off, "partition %d holds each record once", part)
	}
	many, single := ct.count("ProduceMany"), ct.count("Produce")
	t.Logf("%d records over 60 partitions: %d ProduceMany requests, %d Produce", len(recs), many, single)
	require.Zero(t, single)
	require.Less(t, many, 60*rounds/4, "requests carry many partitions each")
}
