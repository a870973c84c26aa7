package connectapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicemq/sluice/dataplane/records"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/internal/endpoint"
	"github.com/sluicemq/sluice/record"
)

// RecordsDeps are what the RecordService's adapter needs besides the
// service.
type RecordsDeps struct {
	// Logger logs the internal errors of ProduceMany's entries (as the
	// ErrorInterceptor logs a handler's).
	Logger *slog.Logger
	// Leader is the RecordService client of another broker, that a
	// request for a partition it leads is forwarded to.
	Leader func(id int32) sluicev1connect.RecordServiceClient
	// Forwarded, when set, counts a forwarded answer.
	Forwarded func()
	// InitTransactionalProducer answers InitProducerId with a
	// transactional id: the transaction coordinator's business.
	InitTransactionalProducer func(context.Context, *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error)
}

// Records is the RecordService's Connect handler, an adapter of
// records.Service: a request for a partition another broker leads is
// forwarded to it once (unless the caller routes itself:
// NoForwardHeader), after the service resolved and checked it; errors go
// back unmapped (ErrorInterceptor maps them), but ProduceMany's entries',
// which travel in the answer (ProduceError).
type Records struct {
	svc *records.Service
	d   RecordsDeps
}

var _ sluicev1connect.RecordServiceHandler = (*Records)(nil)

// NewRecords returns the adapter of svc.
func NewRecords(svc *records.Service, d RecordsDeps) *Records {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return &Records{svc: svc, d: d}
}

// forwardTo returns the leader to send req, refused with err, to: the
// service found that another broker leads the partition (a
// records.NotLedHereError), and the caller did not ask to route itself
// (NoForwardHeader). req's headers are read only then (Header()
// allocates on an in-process request), by a direct call, so that req
// does not escape.
func forwardTo[T any](req *connect.Request[T], err error) (int32, bool) {
	leader, ok := records.LeaderElsewhere(err)
	return leader, ok && Forwardable(req.Header(), err)
}

// millis is ms milliseconds, saturated at the Duration's bounds.
func millis(ms int64) time.Duration {
	const most = math.MaxInt64 / int64(time.Millisecond)
	switch {
	case ms > most:
		return math.MaxInt64
	case ms < -most:
		return math.MinInt64
	}
	return time.Duration(ms) * time.Millisecond
}

// recordList is the records payload of a ProduceRequest as the service
// reads it, in place.
type recordList sluicev1.RecordList

func (l *recordList) Len() int { return len((*sluicev1.RecordList)(l).GetRecords()) }
func (l *recordList) Record(i int) (int64, []byte, []byte, int) {
	r := l.Records[i]
	return r.GetTimestampMs(), r.GetKey(), r.GetValue(), len(r.GetHeaders())
}
func (l *recordList) Header(i, j int) (string, []byte) {
	h := l.Records[i].GetHeaders()[j]
	return h.GetKey(), h.GetValue()
}

// produceRequest is m as the service takes it.
func produceRequest(m *sluicev1.ProduceRequest) records.ProduceRequest {
	pr := records.ProduceRequest{
		Topic: m.GetTopic(), Partition: m.GetPartition(), Acks: records.Acks(m.GetAcks()), Timeout: millis(m.GetTimeoutMs()),
		CurrentLeaderEpoch: m.CurrentLeaderEpoch, TransactionalID: m.GetTransactionalId(),
	}
	switch pl := m.GetPayload().(type) {
	case *sluicev1.ProduceRequest_Records:
		pr.Payload = records.RecordPayload((*recordList)(pl.Records))
	case *sluicev1.ProduceRequest_Batches:
		pr.Payload = records.BatchPayload(pl.Batches.GetData())
	}
	return pr
}

func (a *Records) Produce(ctx context.Context, req *connect.Request[sluicev1.ProduceRequest]) (*connect.Response[sluicev1.ProduceResponse], error) {
	res, err := a.svc.Produce(ctx, produceRequest(req.Msg), req.Header)
	if err != nil {
		if leader, ok := forwardTo(req, err); ok {
			return Forward(ctx, leader, req, a.d.Leader(leader).Produce, a.d.Forwarded)
		}
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ProduceResponse{BaseOffset: res.BaseOffset, LogStartOffset: res.LogStartOffset, Duplicate: res.Duplicate, LogAppendTimeMs: res.LogAppendTime}), nil
}

// ProduceMany writes every entry as Produce would, but never forwards
// (records.Service.ProduceMany); each entry's error is mapped as the
// error interceptor maps a Produce error, and travels in its result.
func (a *Records) ProduceMany(ctx context.Context, req *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	m := req.Msg
	entries := make([]records.ProduceEntry, len(m.GetPartitions()))
	for i, e := range m.GetPartitions() {
		entries[i] = records.ProduceEntry{Topic: e.GetTopic(), Partition: e.GetPartition(), CurrentLeaderEpoch: e.CurrentLeaderEpoch, Batches: e.GetBatches().GetData()}
	}
	results, err := a.svc.ProduceMany(ctx, records.ProduceManyRequest{
		Acks: records.Acks(m.GetAcks()), Timeout: millis(m.GetTimeoutMs()), TransactionalID: m.GetTransactionalId(), Entries: entries,
	}, req.Header)
	if err != nil {
		return nil, err
	}
	out := make([]*sluicev1.ProducePartitionResult, len(results))
	for i, r := range results {
		if r.Err != nil {
			out[i] = &sluicev1.ProducePartitionResult{Error: a.ProduceError(ctx, r.Err)}
			continue
		}
		out[i] = &sluicev1.ProducePartitionResult{BaseOffset: r.BaseOffset, LogStartOffset: r.LogStartOffset, Duplicate: r.Duplicate, LogAppendTimeMs: r.LogAppendTime}
	}
	return connect.NewResponse(&sluicev1.ProduceManyResponse{Results: out}), nil
}

// ProduceError is err as an answer's message carries it (a ProduceMany
// entry's, a transaction marker's): mapped as ErrorInterceptor maps a
// handler's error (logged when internal), with its code, message and
// details.
func (a *Records) ProduceError(ctx context.Context, err error) *sluicev1.ProduceError {
	err = ErrorInterceptor{Logger: a.d.Logger}.MapErr(ctx, sluicev1connect.RecordServiceProduceManyProcedure, err)
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return &sluicev1.ProduceError{Code: int32(connect.CodeInternal), Message: "internal error"}
	}
	pe := &sluicev1.ProduceError{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		pe.Details = append(pe.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return pe
}

// Fetch reads the partition (records.Service.Fetch) and answers its
// batches as they are (raw_batches) or decoded into records. A forwarded
// long poll ends when the tenant is suspended, as one served here does.
func (a *Records) Fetch(ctx context.Context, req *connect.Request[sluicev1.FetchRequest]) (*connect.Response[sluicev1.FetchResponse], error) {
	m := req.Msg
	fr := records.FetchRequest{
		Topic: m.GetTopic(), Partition: m.GetPartition(), Offset: m.GetOffset(), MaxBytes: int(m.GetMaxBytes()), MaxWait: millis(m.GetMaxWaitMs()),
		CurrentLeaderEpoch: m.CurrentLeaderEpoch, Isolation: records.IsolationLevel(m.GetIsolationLevel()),
	}
	f, err := a.svc.Fetch(ctx, fr)
	if err != nil {
		if leader, ok := forwardTo(req, err); ok {
			ctx, stop := a.svc.LongPoll(ctx, fr.MaxWait)
			defer stop()
			res, err := Forward(ctx, leader, req, a.d.Leader(leader).Fetch, a.d.Forwarded)
			return res, records.Suspended(ctx, err)
		}
		return nil, err
	}
	res := &sluicev1.FetchResponse{HighWatermark: f.HW, LastStableOffset: f.LSO, LogStartOffset: f.LogStartOffset, NextOffset: f.NextOffset}
	if len(f.Data) > 0 {
		if m.GetRawBatches() {
			res.Batches = &sluicev1.RecordBatches{Data: f.Data}
		} else if res.Records, err = decodeRecords(f.Data, m.GetOffset()); err != nil {
			return nil, err
		}
	}
	return connect.NewResponse(res), nil
}

func (a *Records) ListOffsets(ctx context.Context, req *connect.Request[sluicev1.ListOffsetsRequest]) (*connect.Response[sluicev1.ListOffsetsResponse], error) {
	m := req.Msg
	res, err := a.svc.ListOffsets(ctx, records.ListOffsetsRequest{
		Topic: m.GetTopic(), Partition: m.GetPartition(), Spec: records.OffsetSpec(m.GetSpec()), TimestampMs: m.GetTimestampMs(),
		Isolation: records.IsolationLevel(m.GetIsolationLevel()),
	})
	if err != nil {
		if leader, ok := forwardTo(req, err); ok {
			return Forward(ctx, leader, req, a.d.Leader(leader).ListOffsets, a.d.Forwarded)
		}
		return nil, err
	}
	return connect.NewResponse(&sluicev1.ListOffsetsResponse{
		Offset: res.Offset, LogStartOffset: res.LogStartOffset, HighWatermark: res.HW, LastStableOffset: res.LSO, SizeBytes: res.SizeBytes,
		TimestampMs: res.Timestamp,
	}), nil
}

func (a *Records) GetMetadata(ctx context.Context, req *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	md, err := a.svc.Metadata(ctx, req.Msg.GetTopics())
	if err != nil {
		return nil, err
	}
	res := &sluicev1.GetMetadataResponse{}
	for _, b := range md.Brokers {
		res.Brokers = append(res.Brokers, &sluicev1.BrokerAddress{Id: b.ID, Address: endpoint.For(ctx, b.Address, b.ExternalAddress), Rack: b.Rack})
	}
	for _, t := range md.Topics {
		tm := &sluicev1.TopicMetadata{Name: t.Name, Id: t.ID, MaxMessageBytes: t.Config.MaxMessageBytes}
		for _, pm := range t.Partitions {
			tm.Partitions = append(tm.Partitions, &sluicev1.PartitionMetadata{
				Partition: pm.Partition, Leader: pm.Leader, LeaderEpoch: pm.LeaderEpoch, Replicas: pm.Replicas, Isr: pm.ISR,
			})
		}
		res.Topics = append(res.Topics, tm)
	}
	return connect.NewResponse(res), nil
}

// InitProducerId gives an idempotent producer a new producer id at epoch
// 0 (records.Service.InitProducerID), or, with a transactional id, asks
// the id's transaction coordinator (RecordsDeps.InitTransactionalProducer).
func (a *Records) InitProducerId(ctx context.Context, req *connect.Request[sluicev1.InitProducerIdRequest]) (*connect.Response[sluicev1.InitProducerIdResponse], error) {
	if req.Msg.GetTransactionalId() != "" {
		return a.d.InitTransactionalProducer(ctx, req)
	}
	id, epoch, err := a.svc.InitProducerID(ctx, records.InitProducerIDRequest{TransactionTimeout: millis(req.Msg.GetTransactionTimeoutMs())})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&sluicev1.InitProducerIdResponse{ProducerId: id, ProducerEpoch: int32(epoch)}), nil
}

// decodeRecords turns batches (checked by the read that returned them)
// into records at or after from (a fetch may start inside a batch),
// decompressing compressed batches. Allocations do not grow with the
// records: the records come from chunks, keys and values of uncompressed
// batches are copied into one buffer, those of compressed batches alias
// their decompressed copy; only header keys (strings) cost one each.
func decodeRecords(data []byte, from int64) ([]*sluicev1.FetchedRecord, error) {
	count := 0
	for rest := data; len(rest) > 0; {
		b, r, err := record.NextChecked(rest)
		if err != nil {
			return nil, fmt.Errorf("read fetched batch: %w", err)
		}
		count += int(b.Header().RecordCount)
		rest = r
	}
	count = min(count, len(data)) // a record takes at least a byte: bounds what a header claims
	out := make([]*sluicev1.FetchedRecord, 0, count)
	var recs []sluicev1.FetchedRecord
	var hdrs []sluicev1.Header
	var hdrPtrs []*sluicev1.Header
	buf := make([]byte, 0, len(data)) // uncompressed keys and values are within data
	own := func(b []byte, copyOut bool) []byte {
		if b == nil || !copyOut {
			return b
		}
		k := len(buf)
		buf = append(buf, b...)
		return buf[k:len(buf):len(buf)]
	}
	var it record.RecordIter
	for len(data) > 0 {
		b, rest, err := record.NextChecked(data)
		if err != nil {
			return nil, fmt.Errorf("read fetched batch: %w", err)
		}
		data = rest
		h := b.Header()
		if h.Attributes.Control() {
			continue
		}
		// A compressed batch decompresses into a buffer of its own, which
		// the records may keep; an uncompressed one is the caller's.
		copyOut := h.Attributes.Codec() == record.CodecNone
		if b, err = compress.DecompressBatch(nil, b, compress.DefaultLimit); err != nil {
			return nil, fmt.Errorf("decompress fetched batch at offset %d: %w", h.BaseOffset, err)
		}
		if err := it.Reset(b); err != nil {
			return nil, fmt.Errorf("decode fetched batch: %w", err)
		}
		for it.Next() {
			r := it.Record()
			off := h.BaseOffset + int64(r.OffsetDelta)
			if off < from {
				continue
			}
			if len(recs) == cap(recs) {
				recs = make([]sluicev1.FetchedRecord, 0, max(64, min(count, 1024)))
			}
			recs = recs[:len(recs)+1]
			fr := &recs[len(recs)-1]
			fr.Offset, fr.TimestampMs, fr.LeaderEpoch = off, h.Timestamp(r.TimestampDelta), h.LeaderEpoch
			fr.Key, fr.Value = own(r.Key, copyOut), own(r.Value, copyOut)
			if n := len(r.Headers); n > 0 {
				if cap(hdrs)-len(hdrs) < n {
					hdrs = make([]sluicev1.Header, 0, max(n, 64))
				}
				if cap(hdrPtrs)-len(hdrPtrs) < n {
					hdrPtrs = make([]*sluicev1.Header, 0, max(n, 64))
				}
				k := len(hdrPtrs)
				for _, hd := range r.Headers {
					hdrs = hdrs[:len(hdrs)+1]
					x := &hdrs[len(hdrs)-1]
					x.Key, x.Value = string(hd.Key), own(hd.Value, copyOut)
					hdrPtrs = append(hdrPtrs, x)
				}
				fr.Headers = hdrPtrs[k:len(hdrPtrs):len(hdrPtrs)]
			}
			out = append(out, fr)
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("decode fetched batch: %w", err)
		}
	}
	return out, nil
}
