package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestProducerGathersPartitionsIntoOneRequestPerBroker: the batches of
// many partitions led by one broker travel together. With every
// ProduceMany slot to the broker busy (the first five batches, one request
// each, held at the gate), the batches of the broker's other partitions
// wait in the producer and then leave as one request.
func TestProducerGathersPartitionsIntoOneRequestPerBroker(t *testing.T) {
	t.Parallel()
	topic := fresh("producemany-gather")
	f, open := gatedTopic(t, topic, 30)
	defer open()
	c := newClient(t)
	parts := ledByOne(t, topic)
	n := len(parts)
	require.Greater(t, n, 5, "a broker leads more partitions than a producer has slots: %v", parts)
	p, err := c.NewProducer(context.Background(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader), client.WithManualPartitioner())
	require.NoError(t, err)
	defer p.Close(context.Background())

	var wg sync.WaitGroup
	var failed atomic.Int64
	wg.Add(n)
	for _, i := range parts {
		p.Produce(context.Background(), &client.Record{Topic: topic, Partition: i, Value: []byte("x")}, func(_ *client.Record, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
	}
	// The five requests are counted when the broker receives them, which
	// may be after the producer queued the rest (a loaded machine).
	testenv.Wait(t, 10*time.Second, fmt.Sprintf("%d batches waiting for a slot, 5 requests at the gate", n-5), func() error {
		if q, calls := client.QueuedProduces(p), f.Hits(); q != n-5 || calls < 5 {
			return fmt.Errorf("%d waiting, %d requests at the gate", q, calls)
		}
		return nil
	})
	require.Equal(t, 5, f.Hits(), "one request per free slot")
	require.Equal(t, n-5, client.QueuedProduces(p))
	open()
	wg.Wait()
	require.Zero(t, failed.Load())
	require.Equal(t, 6, f.Hits(), "the waiting batches left together")
	entries := 0
	for _, call := range f.Calls() {
		entries += len(call.Request.(*sluicev1.ProduceManyRequest).GetPartitions())
	}
	require.Equal(t, n, entries)
	batches := 0
	for _, i := range parts {
		batches += len(dataBatches(logBatches(t, topic, i, 1)))
	}
	require.Equal(t, n, batches)
}

// TestProducerFallsBackToProduceOnAnOldBroker: a broker that answers
// ProduceMany with Unimplemented (a version before it) gets one Produce per
// batch, and every record is written once.
func TestProducerFallsBackToProduceOnAnOldBroker(t *testing.T) {
	t.Parallel()
	topic := fresh("producemany-old-broker")
	createTopic(t, topic, 30, nil)
	many := addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition,
		Err: connect.NewError(connect.CodeUnimplemented, errors.New("sluice.v1.RecordService.ProduceMany is not implemented"))})
	single := observe(t, "Produce", topic)
	c := newClient(t)
	// One broker's partitions: one connection learns it is old.
	parts := ledByOne(t, topic)
	p, err := c.NewProducer(context.Background(), client.WithIdempotence(false), client.WithAcks(client.AcksLeader), client.WithManualPartitioner())
	require.NoError(t, err)
	defer p.Close(context.Background())
	for round := range 3 {
		recs := make([]*client.Record, len(parts))
		for i, part := range parts {
			recs[i] = &client.Record{Topic: topic, Partition: part, Value: fmt.Appendf(nil, "%d-%d", round, part)}
		}
		require.NoError(t, p.ProduceSync(context.Background(), recs...))
	}
	batches := 0
	for _, part := range parts {
		logged := dataBatches(logBatches(t, topic, part, 3))
		batches += len(logged)
		for round := range 3 {
			require.Equal(t, 1, countIn(logged, fmt.Sprintf("%d-%d", round, part)))
		}
	}
	require.Equal(t, 3*len(parts), batches, "each batch written once, by Produce")
	require.Equal(t, 3*len(parts), single.Hits())
	require.LessOrEqual(t, many.Hits(), 5, "ProduceMany is tried only until the broker said it does not serve it")
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
	many60Name := fresh("many60")
	t.Parallel()
	createTopic(t, many60Name, 60, nil)
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
			recs = append(recs, &client.Record{Topic: many60Name, Partition: int32(i), Value: fmt.Appendf(nil, "%d-%d", round, i)})
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
