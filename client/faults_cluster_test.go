package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// The producer's error paths on the package's real cluster, with faults
// injected on the brokers' client ports (localcluster.Fault). Each test
// has its own topic, and its faults name it: the cluster is shared.

// countOf is how many times v is among vals.
func countOf(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

// An earlier batch whose answer was lost (it was written) is not renumbered
// because a later batch was refused for good: it is retried as it was and
// answered as a duplicate, and its callback runs before the refused one's.
func TestFaultRefusalBehindAnUnknownBatch(t *testing.T) {
	topic := fresh("fault-unknown-batch")
	createTopic(t, topic, 1, nil)
	// A: written, its answer lost after 300 ms; B, sent meanwhile: refused.
	lost := cluster.AddFault(localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Count: 1, Delay: 300 * time.Millisecond, DropAnswer: true})
	refused := cluster.AddFault(localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Count: 1, Err: connect.NewError(connect.CodeInvalidArgument, errors.New("bad record"))})
	defer lost.Remove()
	defer refused.Remove()
	c := newClient(t)
	p, err := c.NewProducer(context.Background(), client.WithLinger(0))
	require.NoError(t, err)
	defer p.Close(context.Background())
	var order []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := map[string]error{}
	for _, v := range []string{"A", "B"} {
		wg.Add(1)
		p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte(v)}, func(r *client.Record, err error) {
			mu.Lock()
			order = append(order, v)
			errs[v] = err
			mu.Unlock()
			wg.Done()
		})
		if v == "A" {
			// B is produced once A's request holds the lost fault (its
			// 300 ms): A and B are two batches, and B's request comes
			// second. Sent 20 ms apart, B's request once reached the
			// broker first on a loaded machine (make test-busy): B took
			// the lost fault and A the refusal.
			testenv.Wait(t, 30*time.Second, "A's request at the broker", func() error {
				if lost.Hits() == 0 {
					return errors.New("not yet")
				}
				return nil
			})
		}
	}
	wg.Wait()
	require.Equal(t, 1, lost.Hits())
	require.Equal(t, 1, refused.Hits())
	got := readAll(t, c, topic, client.ReadUncommitted)
	require.Equal(t, 1, countOf(got, "A"), "A written once: %v", got)
	require.Zero(t, countOf(got, "B"))
	require.NoError(t, errs["A"])
	var de *client.DeliveryError
	require.ErrorAs(t, errs["B"], &de)
	require.False(t, de.Indefinite)
	require.Equal(t, []string{"A", "B"}, order, "callbacks in order")
}

// A batch acknowledged while an earlier one was being refused is never
// sent again (without idempotence that would write it twice).
func TestFaultAcknowledgedBatchNotResent(t *testing.T) {
	topic := fresh("fault-acked-not-resent")
	createTopic(t, topic, 1, nil)
	f := cluster.AddFault(localcluster.Fault{Topic: topic, Partition: 0, Count: 1, Delay: 200 * time.Millisecond,
		Err: connect.NewError(connect.CodeFailedPrecondition, errors.New("not enough replicas"))})
	defer f.Remove()
	c := newClient(t)
	p, err := c.NewProducer(context.Background(), client.WithLinger(0), client.WithAcks(client.AcksLeader))
	require.NoError(t, err)
	var res []fakeResult
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, v := range []string{"A", "B"} {
		wg.Add(1)
		p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte(v)}, func(r *client.Record, err error) {
			mu.Lock()
			res = append(res, fakeResult{v, err, r.Offset})
			mu.Unlock()
			wg.Done()
		})
		time.Sleep(20 * time.Millisecond) // pacing: one record per batch
	}
	wg.Wait()
	require.NoError(t, p.Close(context.Background()))
	require.Equal(t, 1, f.Hits())
	for _, r := range res {
		require.NoError(t, r.err, r.v)
	}
	// Acknowledged by the leader: readable once the followers have it.
	var got []string
	testenv.Wait(t, 30*time.Second, "both records below the high watermark", func() error {
		if got = readAll(t, c, topic, client.ReadUncommitted); len(got) < 2 {
			return fmt.Errorf("read %v", got)
		}
		return nil
	})
	require.Equal(t, 1, countOf(got, "A"), "%v", got)
	require.Equal(t, 1, countOf(got, "B"), "%v", got)
}
