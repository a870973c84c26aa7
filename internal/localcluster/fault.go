package localcluster

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
)

// AnyPartition in Fault.Partition matches every partition of the topic.
const AnyPartition int32 = -1

// ControlPlane in Fault.Broker matches the calls the control plane
// serves (its API port), and only those.
const ControlPlane int32 = -1

// A Fault changes how brokers answer the calls it matches, as franz-go's
// kfake does: it refuses them with an error, holds them, or performs them
// and loses the answer.
//
// A call matches when every field set says so: Broker (0: every broker;
// ControlPlane: the control plane),
// Procedure (the full "/sluice.v1.RecordService/Produce" or the method
// name "Produce"; empty: every procedure), Topic and Partition (only
// calls whose request names that topic, at the top or in a nested
// message such as a ProduceMany entry, and that partition unless
// Partition is AnyPartition; a streaming call names none at its start, so
// a fault with a Topic never matches one). Partition is read only when
// Topic is set.
//
// The first fault added that matches a call, and has calls left, applies
// to it: Count bounds how many calls it hits (0: every call, until
// removed). It then waits Delay (or until the call's context ends), then
// answers Err when set (a domain error from dataplane/derr or a
// *connect.Error: the broker maps it as any of its own), else performs
// the call and, with DropAnswer, resets the stream instead of answering
// (the client sees a reset stream, as after a lost connection: the call
// may have taken effect), else answers as usual (a pure delay).
//
// AnswerDelay, when set, waits after a call is performed, before its
// answer is sent or dropped (the call took effect; its answer comes
// late, or is lost late).
//
// Hook, when set, decides the error in place of Err, after Delay: it
// sees the call (its request, its headers) and may block until its
// context ends (a gate the test opens). Answer, when set, sees the
// answer of a call performed, and may edit it (an answer the real server would not give
// on cue: an exhausted producer epoch, a stale coordinator). With
// Entries, a ProduceMany call is not refused as a whole: the entries
// that name Topic (and Partition) each get the error in their result,
// as the broker refuses one partition's batch, and the others are
// served; Entries needs Topic.
//
// Every call a fault hits is recorded (Calls), so a fault with no
// effect observes calls: when they came, what they asked.
type Fault struct {
	Broker      int32
	Procedure   string
	Topic       string
	Partition   int32
	Err         error
	Count       int
	Delay       time.Duration
	DropAnswer  bool
	AnswerDelay time.Duration
	Hook        func(ctx context.Context, c Call) error
	Answer      func(c Call, res proto.Message)
	Entries     bool
}

// A Call is one call a fault hit.
type Call struct {
	At        time.Time // when it arrived
	Broker    int32     // ControlPlane for the control plane
	Procedure string
	Header    http.Header
	// Request is the call's request; nil for a stream.
	Request proto.Message
}

// Faults holds a cluster's faults and applies them.
type Faults struct {
	mu     sync.Mutex
	faults []*FaultHandle
	// n is len(faults), read without mu: a call on a cluster with no
	// fault (every call of sluice dev) takes no lock.
	n atomic.Int32
}

// A FaultHandle is one added fault.
type FaultHandle struct {
	f       Fault
	owner   *Faults
	calls   []Call
	removed bool
}

// Add adds a fault after those already added.
func (fs *Faults) Add(f Fault) *FaultHandle {
	h := &FaultHandle{f: f, owner: fs}
	fs.mu.Lock()
	fs.faults = append(fs.faults, h)
	fs.n.Store(int32(len(fs.faults)))
	fs.mu.Unlock()
	return h
}

// Clear removes every fault.
func (fs *Faults) Clear() {
	fs.mu.Lock()
	for _, h := range fs.faults {
		h.removed = true
	}
	fs.faults = nil
	fs.n.Store(0)
	fs.mu.Unlock()
}

// Remove removes the fault: calls that start afterwards are not hit.
func (h *FaultHandle) Remove() {
	fs := h.owner
	fs.mu.Lock()
	defer fs.mu.Unlock()
	h.removed = true
	for i, g := range fs.faults {
		if g == h {
			fs.faults = append(fs.faults[:i:i], fs.faults[i+1:]...)
			fs.n.Store(int32(len(fs.faults)))
			break
		}
	}
}

// Hits is how many calls the fault has hit so far.
func (h *FaultHandle) Hits() int {
	h.owner.mu.Lock()
	defer h.owner.mu.Unlock()
	return len(h.calls)
}

// Calls lists the calls the fault hit, in the order they were hit.
func (h *FaultHandle) Calls() []Call {
	h.owner.mu.Lock()
	defer h.owner.mu.Unlock()
	return append([]Call(nil), h.calls...)
}

// take returns the fault that applies to a call of procedure on broker
// with request msg (nil for a stream's start), recording the hit; nil
// when none does.
func (fs *Faults) take(broker int32, procedure string, header http.Header, msg proto.Message) *Fault {
	if fs.n.Load() == 0 {
		return nil
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.faults) == 0 {
		return nil
	}
	var named []topicPartition
	walked := false
	for _, h := range fs.faults {
		if h.f.Count > 0 && len(h.calls) >= h.f.Count {
			continue
		}
		if !h.f.matchesCall(broker, procedure) {
			continue
		}
		if h.f.Topic != "" {
			if msg == nil {
				continue
			}
			if !walked {
				named, walked = namedPartitions(msg.ProtoReflect(), "", nil), true
			}
			if !h.f.matchesPartitions(named) {
				continue
			}
		}
		h.calls = append(h.calls, Call{At: time.Now(), Broker: broker, Procedure: procedure, Header: header.Clone(), Request: msg})
		f := h.f
		return &f
	}
	return nil
}

// matchesCall reports whether f's broker and procedure match.
func (f *Fault) matchesCall(broker int32, procedure string) bool {
	if (f.Broker != 0 || broker == ControlPlane) && f.Broker != broker {
		return false
	}
	return f.Procedure == "" || f.Procedure == procedure || strings.HasSuffix(procedure, "/"+f.Procedure)
}

// matchesPartitions reports whether a request naming named matches f's
// topic and partition.
func (f *Fault) matchesPartitions(named []topicPartition) bool {
	for _, tp := range named {
		if tp.topic == f.Topic && (f.Partition == AnyPartition || (tp.hasPartition && tp.partition == f.Partition)) {
			return true
		}
	}
	return false
}

// topicPartition is a topic, and maybe a partition, a request names.
type topicPartition struct {
	topic        string
	partition    int32
	hasPartition bool
}

// namedPartitions appends what m and the messages in it name: a message
// with a string field "topic" names that topic; with an int32 field
// "partition" too, that partition of it, or, without one, of the topic
// of the message that holds it (a partition list under a topic).
func namedPartitions(m protoreflect.Message, topic string, out []topicPartition) []topicPartition {
	fields := m.Descriptor().Fields()
	if fd := fields.ByName("topic"); fd != nil && fd.Kind() == protoreflect.StringKind && fd.Cardinality() != protoreflect.Repeated {
		topic = m.Get(fd).String()
		out = append(out, topicPartition{topic: topic})
	}
	if fd := fields.ByName("partition"); fd != nil && fd.Kind() == protoreflect.Int32Kind && fd.Cardinality() != protoreflect.Repeated && topic != "" {
		out = append(out, topicPartition{topic: topic, partition: int32(m.Get(fd).Int()), hasPartition: true})
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				out = namedPartitions(l.Get(i).Message(), topic, out)
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					out = namedPartitions(mv.Message(), topic, out)
					return true
				})
			}
		default:
			out = namedPartitions(v.Message(), topic, out)
		}
		return true
	})
	return out
}

// hold waits f's delay, or until ctx ends (its error then).
func (f *Fault) hold(ctx context.Context) error {
	return f.wait(ctx, f.Delay)
}

// wait waits d, or until ctx ends (its error then).
func (f *Fault) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	return clock.Sleep(ctx, d)
}

// answer is the error f answers call with (nil: perform it): Hook's
// when set, else Err.
func (f *Fault) answer(ctx context.Context, call Call) error {
	if f.Hook != nil {
		return f.Hook(ctx, call)
	}
	return f.Err
}

// dropAnswer ends the call without an answer: net/http resets the
// stream (HTTP/2) or closes the connection (HTTP/1) when a handler
// panics with http.ErrAbortHandler, and logs nothing.
func dropAnswer() {
	panic(http.ErrAbortHandler)
}

// interceptor applies the faults to the calls a broker (or, with
// ControlPlane, the control plane) serves.
func (fs *Faults) interceptor(broker int32) connect.Interceptor {
	return faultInterceptor{fs: fs, broker: broker}
}

type faultInterceptor struct {
	fs     *Faults
	broker int32
}

func (i faultInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		msg, _ := req.Any().(proto.Message)
		f := i.fs.take(i.broker, req.Spec().Procedure, req.Header(), msg)
		if f == nil {
			return next(ctx, req)
		}
		if err := f.hold(ctx); err != nil {
			return nil, err
		}
		call := Call{At: time.Now(), Broker: i.broker, Procedure: req.Spec().Procedure, Header: req.Header(), Request: msg}
		if err := f.answer(ctx, call); err != nil {
			if many, ok := msg.(*sluicev1.ProduceManyRequest); ok && f.Entries {
				return f.refuseEntries(ctx, next, req, many, err)
			}
			return nil, err
		}
		res, err := next(ctx, req)
		f.wait(ctx, f.AnswerDelay)
		if f.DropAnswer {
			dropAnswer()
		}
		if err == nil && f.Answer != nil {
			if m, ok := res.Any().(proto.Message); ok {
				f.Answer(call, m)
			}
		}
		return res, err
	}
}

// refuseEntries answers a ProduceMany call with err in the result of
// each entry that names f's topic and partition, and serves the others
// (a request of those alone), as the broker answers when it refuses one
// partition's batch.
func (f *Fault) refuseEntries(ctx context.Context, next connect.UnaryFunc, req connect.AnyRequest, many *sluicev1.ProduceManyRequest, err error) (connect.AnyResponse, error) {
	refused := produceError(err)
	results := make([]*sluicev1.ProducePartitionResult, len(many.GetPartitions()))
	var rest []*sluicev1.ProducePartition
	var restAt []int
	for j, e := range many.GetPartitions() {
		if f.matchesPartitions(namedPartitions(e.ProtoReflect(), "", nil)) {
			results[j] = &sluicev1.ProducePartitionResult{Error: refused}
			continue
		}
		rest, restAt = append(rest, e), append(restAt, j)
	}
	if len(rest) > 0 {
		sub := proto.CloneOf(many)
		sub.Partitions = rest
		subReq := connect.NewRequest(sub)
		for k, v := range req.Header() {
			subReq.Header()[k] = v
		}
		res, err := next(ctx, subReq)
		if err != nil {
			return nil, err
		}
		served, _ := res.Any().(*sluicev1.ProduceManyResponse)
		for k, r := range served.GetResults() {
			if k < len(restAt) {
				results[restAt[k]] = r
			}
		}
	}
	return connect.NewResponse(&sluicev1.ProduceManyResponse{Results: results}), nil
}

// produceError is err as a ProduceMany entry's error: its Connect code,
// message and details.
func produceError(err error) *sluicev1.ProduceError {
	ce := new(connect.Error)
	if !errors.As(err, &ce) {
		ce = connect.NewError(connect.CodeOf(err), err)
	}
	pe := &sluicev1.ProduceError{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		pe.Details = append(pe.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return pe
}

func (i faultInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i faultInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		f := i.fs.take(i.broker, conn.Spec().Procedure, conn.RequestHeader(), nil)
		if f == nil {
			return next(ctx, conn)
		}
		if err := f.hold(ctx); err != nil {
			return err
		}
		if err := f.answer(ctx, Call{At: time.Now(), Broker: i.broker, Procedure: conn.Spec().Procedure, Header: conn.RequestHeader()}); err != nil {
			return err
		}
		err := next(ctx, conn)
		f.wait(ctx, f.AnswerDelay)
		if f.DropAnswer {
			dropAnswer()
		}
		return err
	}
}
