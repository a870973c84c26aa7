package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
)

func TestLocalclusterFaultMatching(t *testing.T) {
	t.Parallel()
	const produce, produceMany, fetch = "/sluice.v1.RecordService/Produce", "/sluice.v1.RecordService/ProduceMany", "/sluice.v1.RecordService/Fetch"
	one := &sluicev1.ProduceRequest{Topic: "orders", Partition: 2}
	many := &sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{{Topic: "a", Partition: 0}, {Topic: "orders", Partition: 1}}}
	for _, c := range []struct {
		name      string
		f         Fault
		broker    int32
		procedure string
		msg       proto.Message
		want      bool
	}{
		{"any call", Fault{}, 1, produce, one, true},
		{"other broker", Fault{Broker: 2}, 1, produce, one, false},
		{"this broker", Fault{Broker: 1}, 1, produce, one, true},
		{"method name", Fault{Procedure: "Produce"}, 1, produce, one, true},
		{"full procedure", Fault{Procedure: produce}, 1, produce, one, true},
		{"other method", Fault{Procedure: "Produce"}, 1, produceMany, many, false},
		{"topic, any partition", Fault{Topic: "orders", Partition: AnyPartition}, 1, produce, one, true},
		{"topic and partition", Fault{Topic: "orders", Partition: 2}, 1, produce, one, true},
		{"other partition", Fault{Topic: "orders", Partition: 0}, 1, produce, one, false},
		{"other topic", Fault{Topic: "payments", Partition: AnyPartition}, 1, produce, one, false},
		{"nested entry", Fault{Topic: "orders", Partition: 1}, 1, produceMany, many, true},
		{"nested partition 0", Fault{Topic: "a", Partition: 0}, 1, produceMany, many, true},
		{"nested, partition of another topic", Fault{Topic: "orders", Partition: 0}, 1, produceMany, many, false},
		{"stream start names no topic", Fault{Topic: "orders", Partition: AnyPartition}, 1, fetch, nil, false},
		{"stream start, no topic in the fault", Fault{Procedure: "Fetch"}, 1, fetch, nil, true},
		{"every broker is not the control plane", Fault{}, ControlPlane, produce, one, false},
		{"the control plane", Fault{Broker: ControlPlane}, ControlPlane, produce, one, true},
		{"the control plane is no broker", Fault{Broker: ControlPlane}, 1, produce, one, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			fs := &Faults{}
			fs.Add(c.f)
			got := fs.take(c.broker, c.procedure, nil, c.msg)
			require.Equal(t, c.want, got != nil)
		})
	}
}

func TestLocalclusterFaultCountAndOrder(t *testing.T) {
	t.Parallel()
	fs := &Faults{}
	first := fs.Add(Fault{Procedure: "Produce", Count: 2, DropAnswer: true})
	second := fs.Add(Fault{Procedure: "Produce", Count: 1})
	msg := &sluicev1.ProduceRequest{Topic: "t"}
	var drops []bool
	for range 4 {
		f := fs.take(1, "/sluice.v1.RecordService/Produce", nil, msg)
		if f == nil {
			drops = append(drops, false)
			continue
		}
		drops = append(drops, f.DropAnswer)
	}
	// Two calls hit the first, one the second, then none.
	require.Equal(t, []bool{true, true, false, false}, drops)
	require.Equal(t, 2, first.Hits())
	require.Equal(t, 1, second.Hits())
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", nil, msg))

	// Unbounded until removed.
	always := fs.Add(Fault{Procedure: "Produce"})
	for range 3 {
		require.NotNil(t, fs.take(1, "/sluice.v1.RecordService/Produce", nil, msg))
	}
	always.Remove()
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", nil, msg))
	require.Equal(t, 3, always.Hits())
	fs.Add(Fault{})
	fs.Clear()
	require.Nil(t, fs.take(1, "/sluice.v1.RecordService/Produce", nil, msg))
}

// stubRecords answers ProduceMany with one result per entry, its base
// offset the entry's position, and InitProducerId with id 5.
type stubRecords struct {
	sluicev1connect.UnimplementedRecordServiceHandler
	mu       sync.Mutex
	entries  []string  // topic/partition of each entry served
	servedAt time.Time // when the last ProduceMany was performed
}

func (s *stubRecords) ProduceMany(_ context.Context, req *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &sluicev1.ProduceManyResponse{}
	s.servedAt = time.Now()
	for _, e := range req.Msg.GetPartitions() {
		s.entries = append(s.entries, fmt.Sprintf("%s/%d", e.GetTopic(), e.GetPartition()))
		res.Results = append(res.Results, &sluicev1.ProducePartitionResult{BaseOffset: int64(len(s.entries))})
	}
	return connect.NewResponse(res), nil
}

func (s *stubRecords) InitProducerId(context.Context, *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: 5}), nil
}

// serveStub serves a stubRecords behind fs's interceptor for broker 1
// and returns a client of it.
func serveStub(t *testing.T, fs *Faults) (*stubRecords, sluicev1connect.RecordServiceClient) {
	t.Helper()
	stub := &stubRecords{}
	mux := http.NewServeMux()
	mux.Handle(sluicev1connect.NewRecordServiceHandler(stub, connect.WithInterceptors(fs.interceptor(1))))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return stub, sluicev1connect.NewRecordServiceClient(srv.Client(), srv.URL)
}

func TestLocalclusterFaultHookAnswerAndCalls(t *testing.T) {
	t.Parallel()
	fs := &Faults{}
	_, rc := serveStub(t, fs)
	ctx := t.Context()

	// Hook decides per call (here: refuse the second), and sees the
	// request and headers; every hit is recorded.
	refusal := connect.NewError(connect.CodeResourceExhausted, errors.New("slow down"))
	n := 0
	hook := fs.Add(Fault{Procedure: "InitProducerId", Hook: func(_ context.Context, c Call) error {
		n++
		if c.Header.Get("X-Test") != "yes" {
			return errors.New("no header")
		}
		if n == 2 {
			return refusal
		}
		return nil
	}})
	call := func() error {
		req := connect.NewRequest(&sluicev1.InitProducerIdRequest{TransactionalId: "tx"})
		req.Header().Set("X-Test", "yes")
		_, err := rc.InitProducerId(ctx, req)
		return err
	}
	require.NoError(t, call())
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(call()))
	require.NoError(t, call())
	calls := hook.Calls()
	require.Len(t, calls, 3)
	require.Equal(t, "tx", calls[0].Request.(*sluicev1.InitProducerIdRequest).GetTransactionalId())
	require.Equal(t, int32(1), calls[0].Broker)
	require.False(t, calls[2].At.Before(calls[0].At))
	hook.Remove()

	// A hook that holds the call until the test lets it go: a gate.
	gate := make(chan struct{})
	held := fs.Add(Fault{Procedure: "InitProducerId", Count: 1, Hook: func(ctx context.Context, _ Call) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	done := make(chan error, 1)
	go func() { done <- call() }()
	testenv.Wait(t, 10*time.Second, "the call at the gate", func() error {
		if held.Hits() == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the call passed the closed gate: %v", err)
	default:
	}
	close(gate)
	require.NoError(t, <-done)

	// Answer edits what the server answered.
	fs.Add(Fault{Procedure: "InitProducerId", Count: 1, Answer: func(_ Call, res proto.Message) {
		res.(*sluicev1.InitProducerIdResponse).ProducerEpoch = 32766
	}})
	res, err := rc.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
	require.NoError(t, err)
	require.Equal(t, int64(5), res.Msg.GetProducerId())
	require.Equal(t, int32(32766), res.Msg.GetProducerEpoch())
	res, err = rc.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
	require.NoError(t, err)
	require.Zero(t, res.Msg.GetProducerEpoch(), "one call only")
}

func TestLocalclusterFaultEntries(t *testing.T) {
	t.Parallel()
	fs := &Faults{}
	stub, rc := serveStub(t, fs)
	ctx := t.Context()
	refusal := connect.NewError(connect.CodeResourceExhausted, errors.New("over quota"))
	d, err := connect.NewErrorDetail(&sluicev1.NotLeader{LeaderId: 2})
	require.NoError(t, err)
	refusal.AddDetail(d)
	f := fs.Add(Fault{Procedure: "ProduceMany", Topic: "q", Partition: 1, Err: refusal, Entries: true})
	req := &sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{
		{Topic: "a", Partition: 0}, {Topic: "q", Partition: 1}, {Topic: "q", Partition: 0},
	}}
	res, err := rc.ProduceMany(ctx, connect.NewRequest(req))
	require.NoError(t, err, "the call is served, its entry refused")
	rs := res.Msg.GetResults()
	require.Len(t, rs, 3)
	require.Nil(t, rs[0].GetError())
	require.Nil(t, rs[2].GetError())
	require.Equal(t, []int64{1, 0, 2}, []int64{rs[0].GetBaseOffset(), rs[1].GetBaseOffset(), rs[2].GetBaseOffset()}, "the others in their places")
	pe := rs[1].GetError()
	require.NotNil(t, pe)
	require.Equal(t, int32(connect.CodeResourceExhausted), pe.GetCode())
	require.Equal(t, "over quota", pe.GetMessage())
	require.Len(t, pe.GetDetails(), 1)
	var nl sluicev1.NotLeader
	require.NoError(t, pe.GetDetails()[0].UnmarshalTo(&nl))
	require.Equal(t, int32(2), nl.GetLeaderId())
	require.Equal(t, []string{"a/0", "q/0"}, stub.entries, "the refused entry never reached the server")

	// Every entry refused: answered without the server.
	res, err = rc.ProduceMany(ctx, connect.NewRequest(&sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{{Topic: "q", Partition: 1}}}))
	require.NoError(t, err)
	require.NotNil(t, res.Msg.GetResults()[0].GetError())
	require.Len(t, stub.entries, 2)
	require.Equal(t, 2, f.Hits())
}

// served is how many entries the stub has served, and when it performed
// the last call.
func (s *stubRecords) served() (int, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries), s.servedAt
}

// TestLocalclusterFaultAnswerDelay: with AnswerDelay the call is performed
// at once and its answer held: it comes no sooner than the delay after
// the call took effect, and with DropAnswer it is lost as late; a caller
// that gives up meanwhile finds the call performed. Durations are only
// bounded below, which a loaded machine cannot break.
func TestLocalclusterFaultAnswerDelay(t *testing.T) {
	t.Parallel()
	fs := &Faults{}
	stub, rc := serveStub(t, fs)
	ctx := t.Context()
	produce := func(ctx context.Context) (time.Time, error) {
		_, err := rc.ProduceMany(ctx, connect.NewRequest(&sluicev1.ProduceManyRequest{Partitions: []*sluicev1.ProducePartition{{Topic: "a"}}}))
		return time.Now(), err
	}

	// Answered late.
	const delay = 200 * time.Millisecond
	late := fs.Add(Fault{Procedure: "ProduceMany", Count: 1, AnswerDelay: delay})
	answered, err := produce(ctx)
	require.NoError(t, err)
	n, performed := stub.served()
	require.Equal(t, 1, n)
	require.GreaterOrEqual(t, answered.Sub(performed), delay, "the answer waited the delay after the call took effect")
	require.Equal(t, 1, late.Hits())
	answered, err = produce(ctx)
	require.NoError(t, err)
	_, performed = stub.served()
	require.Equal(t, 1, late.Hits(), "one call only")
	require.False(t, answered.Before(performed))

	// Lost late: performed, then the stream is reset after the delay.
	fs.Add(Fault{Procedure: "ProduceMany", Count: 1, AnswerDelay: delay, DropAnswer: true})
	answered, err = produce(ctx)
	require.Error(t, err, "the answer is lost")
	n, performed = stub.served()
	require.Equal(t, 3, n, "the call took effect")
	require.GreaterOrEqual(t, answered.Sub(performed), delay, "lost after the delay")

	// Held for an hour: performed at once, still unanswered, until the
	// caller gives up.
	fs.Add(Fault{Procedure: "ProduceMany", Count: 1, AnswerDelay: time.Hour})
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := produce(callCtx); done <- err }()
	testenv.Wait(t, 10*time.Second, "the held call performed", func() error {
		if n, _ := stub.served(); n != 4 {
			return fmt.Errorf("%d entries served", n)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("answered before the delay: %v", err)
	default:
	}
	cancel()
	require.Equal(t, connect.CodeCanceled, connect.CodeOf(<-done))
	n, _ = stub.served()
	require.Equal(t, 4, n, "performed, though its caller gave up")
}
