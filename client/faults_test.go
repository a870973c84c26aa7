package client_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/sluicemq/sluice/internal/testenv"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/dataplane/producerstate"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/record"
	"github.com/stretchr/testify/require"
)

type fakeEntry struct {
	epoch int16
	seq   int32
	value string
}

type fakeAction int

const (
	normal    fakeAction = iota
	writeLose            // write, then answer Unavailable (lost ack)
	refuse               // answer with the given error, write nothing
)

// fakeBroker is one broker with one partition, for the producer's error
// paths that a real cluster cannot be made to hit on cue (a lost answer
// after a write, a refusal of one chosen batch). It keeps its producer
// state with the real producerstate package.
type fakeBroker struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	sluicev1connect.UnimplementedAuthServiceHandler
	addr string
	mu   sync.Mutex
	st   *producerstate.State
	log  []fakeEntry
	n    int
	pid  int64
	hook func(n int, h record.BatchHeader, vals []string) (fakeAction, time.Duration, error)
	// initEpoch is the epoch InitProducerId hands out with each new id.
	initEpoch int16
	// metadataGate, when set, holds every GetMetadata until it is closed
	// or the call's context ends (a broker that stopped answering).
	metadataGate chan struct{}
	// epochs counts the batches written per (producer id, epoch).
	epochs map[[2]int64]int
	// metadataCalls counts GetMetadata calls.
	metadataCalls atomic.Int64
	// partitions is the topics' partition count (1 when 0); all share one
	// log, so with several use them without idempotence.
	partitions int32
	// written lists the batches written, in order.
	written []fakeBatch
	// single: the fake serves Produce only, as a broker of a version
	// before ProduceMany does (Unimplemented).
	single bool
	// manyCalls counts ProduceMany calls, entries the entries it served.
	manyCalls, entries atomic.Int64
}

// fakeBatch is one batch the fake broker wrote.
type fakeBatch struct {
	partition int32
	records   int
	bytes     int
}

func (f *fakeBroker) CreateToken(context.Context, *connect.Request[sluicev1.CreateTokenRequest]) (*connect.Response[sluicev1.CreateTokenResponse], error) {
	return connect.NewResponse(&sluicev1.CreateTokenResponse{Token: "t", ExpireTime: timestamppb.New(time.Now().Add(time.Hour))}), nil
}

func (f *fakeBroker) GetMetadata(ctx context.Context, r *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	f.metadataCalls.Add(1)
	f.mu.Lock()
	gate := f.metadataGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
		}
	}
	res := &sluicev1.GetMetadataResponse{Brokers: []*sluicev1.BrokerAddress{{Id: 1, Address: f.addr}}}
	for _, t := range r.Msg.GetTopics() {
		tm := &sluicev1.TopicMetadata{Name: t, Id: "id-" + t}
		for i := range max(f.partitions, 1) {
			tm.Partitions = append(tm.Partitions, &sluicev1.PartitionMetadata{Partition: i, Leader: 1, Replicas: []int32{1}, Isr: []int32{1}})
		}
		res.Topics = append(res.Topics, tm)
	}
	return connect.NewResponse(res), nil
}

func (f *fakeBroker) InitProducerId(context.Context, *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pid++
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: f.pid, ProducerEpoch: int32(f.initEpoch)}), nil
}

func (f *fakeBroker) Produce(ctx context.Context, r *connect.Request[sluicev1.ProduceRequest]) (*connect.Response[sluicev1.ProduceResponse], error) {
	data := r.Msg.GetBatches().GetData()
	b, _, err := record.ReadBatch(data)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	h := b.Header()
	var vals []string
	var it record.RecordIter
	if err := it.Reset(b); err != nil {
		return nil, err
	}
	for it.Next() {
		vals = append(vals, string(it.Record().Value))
	}
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	act, delay, herr := normal, time.Duration(0), error(nil)
	if f.hook != nil {
		act, delay, herr = f.hook(n, h, vals)
	}
	if act != writeLose {
		time.Sleep(delay) // fault: the fake broker answers late
	}
	if act == refuse {
		return nil, herr
	}
	f.mu.Lock()
	unlocked := false
	defer func() {
		if !unlocked {
			f.mu.Unlock()
		}
	}()
	last := producerstate.LastSequence(h.BaseSequence, int32(len(vals)))
	var res producerstate.Result
	if h.ProducerID >= 0 {
		res, err = f.st.Check(h.ProducerID, h.ProducerEpoch, h.BaseSequence, last)
	}
	if err != nil {
		var se *producerstate.SequenceError
		pe := &sluicev1.ProducerError{}
		switch {
		case errors.As(err, &se):
			pe.Reason = sluicev1.ProducerError_REASON_OUT_OF_ORDER_SEQUENCE
		case errors.Is(err, producerstate.ErrProducerFenced):
			pe.Reason = sluicev1.ProducerError_REASON_PRODUCER_FENCED
		case errors.Is(err, producerstate.ErrDuplicateSequence):
			pe.Reason = sluicev1.ProducerError_REASON_DUPLICATE_SEQUENCE
		}
		ce := connect.NewError(connect.CodeFailedPrecondition, err)
		d, _ := connect.NewErrorDetail(pe)
		ce.AddDetail(d)
		return nil, ce
	}
	if res.Duplicate {
		return connect.NewResponse(&sluicev1.ProduceResponse{BaseOffset: res.FirstOffset, Duplicate: true}), nil
	}
	base := int64(len(f.log))
	f.written = append(f.written, fakeBatch{partition: r.Msg.GetPartition(), records: len(vals), bytes: len(data)})
	for i, v := range vals {
		f.log = append(f.log, fakeEntry{h.ProducerEpoch, h.BaseSequence + int32(i), v})
	}
	if h.ProducerID >= 0 {
		if f.epochs == nil {
			f.epochs = map[[2]int64]int{}
		}
		f.epochs[[2]int64{h.ProducerID, int64(h.ProducerEpoch)}]++
		f.st.Apply(producerstate.Batch{ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch, BaseSequence: h.BaseSequence, LastSequence: last,
			FirstOffset: base, LastOffset: int64(len(f.log)) - 1, MaxTimestamp: h.MaxTimestamp})
	}
	if act == writeLose {
		f.mu.Unlock()
		unlocked = true
		time.Sleep(delay) // fault: the fake broker answers late
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("connection reset (ack lost)"))
	}
	return connect.NewResponse(&sluicev1.ProduceResponse{BaseOffset: base}), nil
}

// ProduceMany serves each entry as Produce would, concurrently, and
// carries each error in the entry's result as the broker does.
func (f *fakeBroker) ProduceMany(ctx context.Context, r *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	f.manyCalls.Add(1)
	if f.single {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("sluice.v1.RecordService.ProduceMany is not implemented"))
	}
	f.entries.Add(int64(len(r.Msg.GetPartitions())))
	results := make([]*sluicev1.ProducePartitionResult, len(r.Msg.GetPartitions()))
	var wg sync.WaitGroup
	for i, e := range r.Msg.GetPartitions() {
		wg.Go(func() {
			res, err := f.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: e.GetTopic(), Partition: e.GetPartition(), Acks: r.Msg.GetAcks(),
				TimeoutMs: r.Msg.GetTimeoutMs(), CurrentLeaderEpoch: e.CurrentLeaderEpoch, Payload: &sluicev1.ProduceRequest_Batches{Batches: e.GetBatches()}}))
			if err == nil {
				results[i] = &sluicev1.ProducePartitionResult{BaseOffset: res.Msg.GetBaseOffset(), Duplicate: res.Msg.GetDuplicate()}
				return
			}
			ce := new(connect.Error)
			if !errors.As(err, &ce) {
				ce = connect.NewError(connect.CodeInternal, err)
			}
			pe := &sluicev1.ProduceError{Code: int32(ce.Code()), Message: ce.Message()}
			for _, d := range ce.Details() {
				pe.Details = append(pe.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
			}
			results[i] = &sluicev1.ProducePartitionResult{Error: pe}
		})
	}
	wg.Wait()
	return connect.NewResponse(&sluicev1.ProduceManyResponse{Results: results}), nil
}

func startFake(t *testing.T, f *fakeBroker, opts ...client.Option) *client.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	f.st = producerstate.New()
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewRecordServiceHandler(f))
	mux.Handle(sluicev1connect.NewAuthServiceHandler(f))
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &p}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	c, err := client.New(context.Background(), "http://"+f.addr, client.Token("x"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *fakeBroker) dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprint(f.log)
}

type fakeResult struct {
	v   string
	err error
	off int64
}

func produceEach(t *testing.T, p *client.Producer, vals ...string) []fakeResult {
	out := make([]fakeResult, len(vals))
	var wg sync.WaitGroup
	for i, v := range vals {
		wg.Add(1)
		p.Produce(context.Background(), &client.Record{Topic: "t", Value: []byte(v)}, func(r *client.Record, err error) {
			out[i] = fakeResult{v, err, r.Offset}
			wg.Done()
		})
		time.Sleep(20 * time.Millisecond) // pacing: one record per batch
	}
	wg.Wait()
	return out
}

// count is how many times value v is in the fake's log.
func (f *fakeBroker) count(v string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, e := range f.log {
		if e.value == v {
			n++
		}
	}
	return n
}

// A lost answer (A), an acknowledged batch (B) and a refused one (C): no
// batch is written twice, the partition is not fenced, and a later record
// still gets through.
func TestFaultNoFencingAfterARefusal(t *testing.T) {
	f := &fakeBroker{}
	f.hook = func(n int, h record.BatchHeader, vals []string) (fakeAction, time.Duration, error) {
		switch {
		case n == 1 && vals[0] == "A":
			return writeLose, 300 * time.Millisecond, nil
		case vals[0] == "C":
			return refuse, 0, connect.NewError(connect.CodeInvalidArgument, errors.New("bad record"))
		}
		return normal, 0, nil
	}
	c := startFake(t, f)
	p, err := c.NewProducer(context.Background(), client.WithLinger(0))
	require.NoError(t, err)
	res := produceEach(t, p, "A", "B", "C")
	require.NoError(t, res[0].err)
	require.NoError(t, res[1].err)
	require.Error(t, res[2].err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: "t", Value: []byte("D")}))
	require.NoError(t, p.Close(ctx))
	for _, v := range []string{"A", "B", "D"} {
		require.Equal(t, 1, f.count(v), "%s: %s", v, f.dump())
	}
	require.Zero(t, f.count("C"))
}

// Produce racing Close: every record gets its callback, exactly once.
func TestFaultProduceDuringClose(t *testing.T) {
	f := &fakeBroker{}
	c := startFake(t, f)
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
					p.Produce(context.Background(), &client.Record{Topic: "t", Value: []byte("x")}, func(*client.Record, error) { cbs.Add(1) })
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
		testenv.Wait(t, 2*time.Second, "a callback for every produce", func() error {
			if c, b := calls.Load(), cbs.Load(); c != b {
				return fmt.Errorf("%d produces, %d callbacks", c, b)
			}
			return nil
		})
	}
}
