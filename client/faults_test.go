package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

type fakeResult struct {
	v   string
	err error
	off int64
}

// produceEach produces vals to topic, one record a batch, and waits for
// their callbacks.
func produceEach(t *testing.T, p *client.Producer, topic string, vals ...string) []fakeResult {
	out := make([]fakeResult, len(vals))
	var wg sync.WaitGroup
	for i, v := range vals {
		wg.Add(1)
		p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte(v)}, func(r *client.Record, err error) {
			out[i] = fakeResult{v, err, r.Offset}
			wg.Done()
		})
		time.Sleep(20 * time.Millisecond) // pacing: one record per batch
	}
	wg.Wait()
	return out
}

// sentValues is the record values in a Produce or ProduceMany request's
// batches.
func sentValues(msg proto.Message) []string {
	var batches [][]byte
	switch m := msg.(type) {
	case *sluicev1.ProduceManyRequest:
		for _, e := range m.GetPartitions() {
			batches = append(batches, e.GetBatches().GetData())
		}
	case *sluicev1.ProduceRequest:
		batches = append(batches, m.GetBatches().GetData())
	}
	var out []string
	for _, data := range batches {
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				break
			}
			var it record.RecordIter
			if it.Reset(b) == nil {
				for it.Next() {
					out = append(out, string(it.Record().Value))
				}
			}
			data = rest
		}
	}
	return out
}

// refuseValue is a Fault.Hook that refuses, with err, a produce call that
// carries a record of value v.
func refuseValue(v string, err error) func(context.Context, localcluster.Call) error {
	return func(_ context.Context, c localcluster.Call) error {
		if countOf(sentValues(c.Request), v) > 0 {
			return err
		}
		return nil
	}
}

// A lost answer (A), an acknowledged batch (B) and a refused one (C): no
// batch is written twice, the partition is not fenced, and a later record
// still gets through.
func TestFaultNoFencingAfterARefusal(t *testing.T) {
	topic := fresh("fault-no-fencing")
	createTopic(t, topic, 1, nil)
	// A: written, its answer lost 300 ms later; C: refused every time.
	lost := addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition, Count: 1,
		AnswerDelay: 300 * time.Millisecond, DropAnswer: true})
	addFault(t, localcluster.Fault{Procedure: "ProduceMany", Topic: topic, Partition: localcluster.AnyPartition,
		Hook: refuseValue("C", connect.NewError(connect.CodeInvalidArgument, errors.New("bad record")))})
	c := newClient(t)
	p, err := c.NewProducer(context.Background(), client.WithLinger(0))
	require.NoError(t, err)
	// A and B in flight together; C once they are answered, so that it
	// cannot share their batch (pacing alone did not keep B and C apart
	// with every core busy).
	res := append(produceEach(t, p, topic, "A", "B"), produceEach(t, p, topic, "C")...)
	require.NoError(t, res[0].err)
	require.NoError(t, res[1].err)
	require.Error(t, res[2].err)
	require.Equal(t, 1, lost.Hits())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: topic, Value: []byte("D")}))
	require.NoError(t, p.Close(ctx))
	logged := logBatches(t, topic, 0, 3)
	for _, v := range []string{"A", "B", "D"} {
		require.Equal(t, 1, countIn(logged, v), "%s: %v", v, logged)
	}
	require.Zero(t, countIn(logged, "C"))
}

// Produce racing Close: every record gets its callback, exactly once.
func TestFaultProduceDuringClose(t *testing.T) {
	topic := fresh("fault-produce-during-close")
	createTopic(t, topic, 1, nil)
	c := newClient(t)
	for range 20 {
		p, err := c.NewProducer(context.Background(), client.WithLinger(time.Millisecond))
		require.NoError(t, err)
		var calls, cbs atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond) // pacing: producers at random moments
					calls.Add(1)
					p.Produce(context.Background(), &client.Record{Topic: topic, Value: []byte("x")}, func(*client.Record, error) { cbs.Add(1) })
				}
			})
		}
		time.Sleep(2 * time.Millisecond) // window: the producers get going before Close races them
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_ = p.Close(ctx) // producers keep going: Flush gives up and the rest fail
		_ = p.Close(ctx) // twice is harmless
		cancel()
		close(stop)
		wg.Wait()
		testenv.Wait(t, 10*time.Second, "a callback for every produce", func() error {
			if c, b := calls.Load(), cbs.Load(); c != b {
				return fmt.Errorf("%d produces, %d callbacks", c, b)
			}
			return nil
		})
	}
}
