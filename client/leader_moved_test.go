package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/record"
)

// stopCluster is a one-partition topic ("t") on two fake brokers that
// share its log and producer state, as replication would: broker 1 leads
// at leader epoch 2 until the test moves the leadership to broker 2 at
// epoch 3.
type stopCluster struct {
	mu     sync.Mutex
	addrs  [2]string
	leader int32
	epoch  int32
	st     *producerstate.State
	log    []string
}

// stopBroker is one broker of a stopCluster. A stopped one behaves as a
// SIGSTOPped process whose connections stay open: it takes what a produce
// carries (as if a follower had fetched it before the stop) and then never
// answers, nor answers metadata.
type stopBroker struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	sluicev1connect.UnimplementedAuthServiceHandler
	id      int32
	c       *stopCluster
	stopped atomic.Bool
	delay   atomic.Int64 // nanoseconds every produce waits before it answers
	// entries counts the partition entries it was sent.
	entries atomic.Int64
}

func (b *stopBroker) CreateToken(context.Context, *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	return connect.NewResponse(&sluicev1.CreateTokenResponse{Token: "t", ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}), nil
}

func (b *stopBroker) InitProducerId(context.Context, *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: 7}), nil
}

func (b *stopBroker) GetMetadata(ctx context.Context, r *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	if b.stopped.Load() {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	res := &sluicev1.GetMetadataResponse{Brokers: []*sluicev1.BrokerAddress{{Id: 1, Address: b.c.addrs[0]}, {Id: 2, Address: b.c.addrs[1]}}}
	for _, t := range r.Msg.GetTopics() {
		res.Topics = append(res.Topics, &sluicev1.TopicMetadata{Name: t, Id: "id-" + t, Partitions: []*sluicev1.PartitionMetadata{
			{Partition: 0, Leader: b.c.leader, LeaderEpoch: b.c.epoch, Replicas: []int32{1, 2}, Isr: []int32{1, 2}}}})
	}
	return connect.NewResponse(res), nil
}

func (b *stopBroker) ProduceMany(ctx context.Context, r *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	res := &sluicev1.ProduceManyResponse{}
	for _, e := range r.Msg.GetPartitions() {
		b.entries.Add(1)
		base, dup, err := b.write(e)
		if err != nil {
			ce := new(connect.Error)
			errors.As(err, &ce)
			pe := &sluicev1.ProduceError{Code: int32(ce.Code()), Message: ce.Message()}
			for _, d := range ce.Details() {
				pe.Details = append(pe.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
			}
			res.Results = append(res.Results, &sluicev1.ProducePartitionResult{Error: pe})
			continue
		}
		res.Results = append(res.Results, &sluicev1.ProducePartitionResult{BaseOffset: base, Duplicate: dup})
	}
	if b.stopped.Load() {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	select {
	case <-time.After(time.Duration(b.delay.Load())):
	case <-ctx.Done():
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewResponse(res), nil
}

// write appends an entry's batch to the shared log when this broker leads
// at the entry's leader epoch, or answers a retry of a batch in the log
// with its offset (a duplicate).
func (b *stopBroker) write(e *sluicev1.ProducePartition) (int64, bool, error) {
	b.c.mu.Lock()
	defer b.c.mu.Unlock()
	if b.c.leader != b.id || e.GetCurrentLeaderEpoch() != b.c.epoch {
		return 0, false, notLeader(&sluicev1.NotLeader{TopicId: "id-" + e.GetTopic(), Partition: 0, LeaderId: b.c.leader, LeaderAddress: b.c.addrs[b.c.leader-1], LeaderEpoch: b.c.epoch})
	}
	batch, _, err := record.ReadBatch(e.GetBatches().GetData())
	if err != nil {
		return 0, false, connect.NewError(connect.CodeInvalidArgument, err)
	}
	h := batch.Header()
	var vals []string
	var it record.RecordIter
	if err := it.Reset(batch); err != nil {
		return 0, false, connect.NewError(connect.CodeInvalidArgument, err)
	}
	for it.Next() {
		vals = append(vals, string(it.Record().Value))
	}
	last := producerstate.LastSequence(h.BaseSequence, int32(len(vals)))
	res, err := b.c.st.Check(h.ProducerID, h.ProducerEpoch, h.BaseSequence, last)
	if err != nil {
		return 0, false, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	if res.Duplicate {
		return res.FirstOffset, true, nil
	}
	base := int64(len(b.c.log))
	b.c.log = append(b.c.log, vals...)
	b.c.st.Apply(producerstate.Batch{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence, LastSequence: last,
		FirstOffset: base, LastOffset: int64(len(b.c.log)) - 1, MaxTimestamp: h.MaxTimestamp})
	return base, false, nil
}

// startStopCluster serves two brokers and returns them and a client whose
// control plane is broker 2.
func startStopCluster(t *testing.T) (*stopCluster, [2]*stopBroker, *client.Client) {
	t.Helper()
	c := &stopCluster{leader: 1, epoch: 2, st: producerstate.New()}
	var bs [2]*stopBroker
	for i := range bs {
		bs[i] = &stopBroker{id: int32(i + 1), c: c}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		c.addrs[i] = ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle(sluicev1connect.NewRecordServiceHandler(bs[i]))
		mux.Handle(sluicev1connect.NewAuthServiceHandler(bs[i]))
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv := &http.Server{Handler: mux, Protocols: &p}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	cl, err := client.New(t.Context(), "http://"+c.addrs[1], client.Token("x"))
	require.NoError(t, err)
	t.Cleanup(func() { cl.Close() })
	return c, bs, cl
}

func (c *stopCluster) logged() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// produceAsync produces one record and returns the channel its callback's
// error arrives on, with the record.
func produceAsync(p *client.Producer, v string) (*client.Record, <-chan error) {
	r := &client.Record{Topic: "t", Value: []byte(v)}
	done := make(chan error, 1)
	p.Produce(context.Background(), r, func(_ *client.Record, err error) { done <- err })
	return r, done
}

// TestRoutingLeavesAStoppedLeader is issue 29 item 7's stall: the leader of
// a partition stops without closing its connections (SIGSTOP) after its
// followers have the producer's batch; the controller elects another
// broker at a higher leader epoch. The producer must write the record
// through the new leader once the metadata names it, not wait for the old
// leader's answer until the request times out (30 s) or HTTP/2's health
// check drops the connection (15 s): in a fault run, producers made no
// progress on a partition for as long as a paused broker stayed stopped
// (20 s for a 20 s SIGSTOP), though a new leader had been elected 3 s
// after the stop. The retry keeps the batch's producer epoch and sequence,
// so the new leader answers it with the offset the old one wrote it at:
// written once.
func TestRoutingLeavesAStoppedLeader(t *testing.T) {
	t.Parallel()
	c, bs, cl := startStopCluster(t)
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = p.Close(ctx)
	})
	require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: "t", Value: []byte("warm")}))

	bs[0].stopped.Store(true)
	r, done := produceAsync(p, "v")
	testenv.Wait(t, 10*time.Second, "the stopped leader to have taken the batch", func() error {
		if got := c.logged(); len(got) != 2 {
			return fmt.Errorf("log %v", got)
		}
		return nil
	})
	moved := time.Now()
	c.mu.Lock()
	c.leader, c.epoch = 2, 3
	c.mu.Unlock()

	// The metadata is looked up a second after the attempt was sent, and
	// again every second; asking the stopped broker costs up to 2 s. 10 s
	// leaves room for a loaded machine, and is a third of the request
	// timeout the producer would otherwise wait for.
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("record not acknowledged 10 s after the new leader was elected (entries sent to broker 1: %d, to broker 2: %d)",
			bs[0].entries.Load(), bs[1].entries.Load())
	}
	t.Logf("acknowledged %s after the leadership moved", time.Since(moved).Round(time.Millisecond))
	require.Equal(t, int64(1), r.Offset, "the offset the stopped leader wrote it at")
	require.Equal(t, []string{"warm", "v"}, c.logged(), "written once")
	require.Positive(t, bs[1].entries.Load(), "the new leader got the retry")
}

// TestRoutingWaitsForASlowLeader: an attempt is only abandoned for a newer
// leader epoch. A leader that takes 2.5 s to answer, and is still the
// leader, gets one attempt, which succeeds, however often the producer
// looked at the metadata meanwhile.
func TestRoutingWaitsForASlowLeader(t *testing.T) {
	t.Parallel()
	c, bs, cl := startStopCluster(t)
	p, err := cl.NewProducer(t.Context(), client.WithDeliveryTimeout(time.Minute))
	require.NoError(t, err)
	defer p.Close(context.Background())
	bs[0].delay.Store(int64(2500 * time.Millisecond))
	require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: "t", Value: []byte("slow")}))
	require.Equal(t, int64(1), bs[0].entries.Load(), "one attempt")
	require.Zero(t, bs[1].entries.Load())
	require.Equal(t, []string{"slow"}, c.logged())
}
