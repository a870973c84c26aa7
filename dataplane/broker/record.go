package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/connectapi"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

// NoForwardHeader is connectapi.NoForwardHeader.
const NoForwardHeader = connectapi.NoForwardHeader

const (
	defaultFetchMaxBytes = 1 << 20
	maxFetchMaxBytes     = 64 << 20
	maxFetchWait         = 30 * time.Second
	defaultProduceWait   = 30 * time.Second
	maxProduceWait       = 5 * time.Minute
)

// recordService implements sluicev1connect.RecordServiceHandler.
type recordService struct{ b *Broker }

// resolve finds the caller's topic partition in the cluster metadata.
func (s *recordService) resolve(ctx context.Context, topic string, partition int32) (*cluster.Topic, cluster.Partition, tenants.Principal, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return nil, cluster.Partition{}, p, errors.New("no tenant principal in context")
	}
	t, pm, err := s.b.metadata().Resolve(p.TenantID, topic, partition)
	return t, pm, p, err
}

// unknownPartition is cluster.PartitionNotFound as a Connect error, for
// the handlers that still build Connect errors themselves.
func unknownPartition(t *cluster.Topic, partition int32) *connect.Error {
	return asConnect(cluster.PartitionNotFound(t, partition))
}

// local returns the partition if this broker leads it; otherwise the error
// to return or the cue to forward.
func (s *recordService) local(pm cluster.Partition, t *cluster.Topic) (*partition.Replica, error) {
	if pm.Leader == s.b.cfg.ID {
		if p := s.b.partition(t.ID, pm.Partition); p != nil {
			return p, nil
		}
	}
	return nil, s.b.notLeader(pm)
}

// unknownTopic is View.TopicNotFound as a Connect error, for the handlers
// that still build Connect errors themselves.
func unknownTopic(meta *cluster.View, name string) *connect.Error {
	return asConnect(meta.TopicNotFound(name))
}

func forwardable(h http.Header, err error) bool { return connectapi.Forwardable(h, err) }

func (s *recordService) Produce(ctx context.Context, req *connect.Request[sluicev1.ProduceRequest]) (*connect.Response[sluicev1.ProduceResponse], error) {
	m := req.Msg
	t, pm, _, err := s.resolve(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, err
	}
	acks, timeout, err := produceOptions(m.GetAcks(), m.GetTimeoutMs())
	if err != nil {
		return nil, err
	}
	batches, err := produceBatches(m, t.Config.MaxMessageBytes, time.Now())
	if err != nil {
		return nil, err
	}
	txn, err := transactionalBatches(batches, m.GetTransactionalId())
	if err != nil {
		return nil, err
	}
	p, err := s.local(pm, t)
	if err != nil && forwardable(req.Header(), err) { // Header() allocates: only on the refusal path
		return forward(ctx, s.b, pm, req, s.b.recordClient(pm.Leader).Produce)
	}
	if err != nil {
		return nil, err
	}
	cost := batchBytes(batches)
	if err := s.b.quota.AdmitProduce(ctx, cost); err != nil {
		return nil, err
	}
	res, err := s.produceOn(ctx, t, p, batches, acks, timeout, m.CurrentLeaderEpoch, s.verifier(txn, req.Header, t, pm.Partition))
	s.b.quota.RefundProduce(ctx, len(batches), cost, res.GetDuplicate(), err)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// produceOptions checks a produce request's acks and timeout and returns
// them with their defaults applied.
func produceOptions(acks sluicev1.Acks, timeoutMs int64) (sluicev1.Acks, time.Duration, error) {
	if acks == sluicev1.Acks_ACKS_UNSPECIFIED {
		acks = sluicev1.Acks_ACKS_ALL
	}
	if acks < sluicev1.Acks_ACKS_NONE || acks > sluicev1.Acks_ACKS_ALL {
		return 0, 0, derr.New(derr.InvalidRequest, "acks: unknown value %d", acks)
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	switch {
	case timeoutMs < 0:
		return 0, 0, derr.New(derr.InvalidRequest, "timeout_ms: must not be negative")
	case timeout == 0:
		timeout = defaultProduceWait
	case timeout > maxProduceWait:
		timeout = maxProduceWait
	}
	return acks, timeout, nil
}

// produceOn writes checked batches to p, a replica this broker leads, and
// counts them in the metrics. With verify (transactional batches) it
// produces them with partition.ProduceTransactional.
func (s *recordService) produceOn(ctx context.Context, t *cluster.Topic, p *partition.Replica, batches []log.ValidBatch, acks sluicev1.Acks, timeout time.Duration, epoch *int32, verify partition.Verifier) (*sluicev1.ProduceResponse, error) {
	start := time.Now()
	var res partition.ProduceResult
	var err error
	if verify != nil {
		res, err = p.ProduceTransactional(ctx, batches, acks, timeout, epoch, verify)
	} else {
		res, err = p.Produce(ctx, batches, acks, timeout, epoch)
	}
	s.b.metrics.produceLatency.WithLabelValues(acksLabel(acks)).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	n := 0
	for _, b := range batches {
		n += len(b.Batch())
	}
	s.b.metrics.produced(t.TenantID, n)
	return &sluicev1.ProduceResponse{BaseOffset: res.Base, LogStartOffset: p.Log().LogStartOffset(), Duplicate: res.Duplicate}, nil
}

// Bounds of one ProduceMany request, refused whole beyond them.
const (
	maxProduceManyEntries = 4096
	maxProduceManyBytes   = 64 << 20
)

// ProduceMany writes every entry as Produce would (the same resolution
// and tenant scoping, checks, leader epoch fencing and acks), each on its
// own goroutine, so that their appends, fsyncs (concurrent fsyncs of
// different logs, which the file system commits together) and acks=all
// waits overlap; entries of one partition run one after another, in
// request order. It never forwards: an entry for a partition another
// broker leads gets the NotLeader answer. Each entry's error is mapped as
// the error interceptor maps a Produce error, and travels in its result.
func (s *recordService) ProduceMany(ctx context.Context, req *connect.Request[sluicev1.ProduceManyRequest]) (*connect.Response[sluicev1.ProduceManyResponse], error) {
	m := req.Msg
	if _, ok := tenants.PrincipalFrom(ctx); !ok {
		return nil, errors.New("no tenant principal in context")
	}
	entries := m.GetPartitions()
	switch {
	case len(entries) == 0:
		return nil, derr.New(derr.InvalidRequest, "partitions: must not be empty")
	case len(entries) > maxProduceManyEntries:
		return nil, derr.New(derr.InvalidRequest, "partitions: at most %d per request; got %d", maxProduceManyEntries, len(entries))
	}
	size := 0
	for _, e := range entries {
		size += len(e.GetBatches().GetData())
	}
	if size > maxProduceManyBytes {
		return nil, derr.New(derr.RecordListTooLarge, "partitions: at most %d bytes of batches per request; got %d", maxProduceManyBytes, size)
	}
	acks, timeout, err := produceOptions(m.GetAcks(), m.GetTimeoutMs())
	if err != nil {
		return nil, err
	}
	if err := s.b.quota.AdmitProduce(ctx, size); err != nil {
		return nil, err // charged whole: the SDK sends each entry to its leader
	}
	// One goroutine per partition, taking its entries in request order.
	type key struct {
		topic     string
		partition int32
	}
	groups := make(map[key][]int, len(entries))
	order := make([]key, 0, len(entries))
	for i, e := range entries {
		k := key{e.GetTopic(), e.GetPartition()}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	results := make([]*sluicev1.ProducePartitionResult, len(entries))
	now := time.Now()
	var wg sync.WaitGroup
	for _, k := range order {
		wg.Go(func() {
			for _, i := range groups[k] {
				res, err := s.produceEntry(ctx, req.Header, m.GetTransactionalId(), entries[i], acks, timeout, now)
				if err != nil {
					results[i] = &sluicev1.ProducePartitionResult{Error: s.produceError(ctx, err)}
					continue
				}
				results[i] = &sluicev1.ProducePartitionResult{BaseOffset: res.GetBaseOffset(), LogStartOffset: res.GetLogStartOffset(), Duplicate: res.GetDuplicate()}
			}
		})
	}
	wg.Wait()
	return connect.NewResponse(&sluicev1.ProduceManyResponse{Results: results}), nil
}

// produceEntry writes one ProduceMany entry as Produce writes a request
// with the same fields, except that it never forwards. header returns the
// request's headers (for a transactional entry's verification).
//
// An entry refused before it reaches the log (an unknown topic, invalid
// batches, a partition led elsewhere) is refunded the bytes ProduceMany
// charged for it; one the log refused unwritten is refunded as a Produce
// is (refundProduce).
func (s *recordService) produceEntry(ctx context.Context, header func() http.Header, transactionalID string, e *sluicev1.ProducePartition, acks sluicev1.Acks, timeout time.Duration, now time.Time) (_ *sluicev1.ProduceResponse, err error) {
	data := e.GetBatches().GetData()
	toLog := false // the log decides the refund from here (refundProduce)
	defer func() {
		if err != nil && !toLog {
			s.b.quota.RefundUnwritten(ctx, len(data))
		}
	}()
	t, pm, _, err := s.resolve(ctx, e.GetTopic(), e.GetPartition())
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return nil, derr.New(derr.InvalidRequest, "batches: must not be empty")
	}
	batches, err := splitBatches(data, t.Config.MaxMessageBytes)
	if err != nil {
		return nil, err
	}
	txn, err := transactionalBatches(batches, transactionalID)
	if err != nil {
		return nil, err
	}
	p, err := s.local(pm, t)
	if err != nil {
		return nil, err
	}
	toLog = true
	res, err := s.produceOn(ctx, t, p, batches, acks, timeout, e.CurrentLeaderEpoch, s.verifier(txn, header, t, pm.Partition))
	s.b.quota.RefundProduce(ctx, len(batches), len(data), res.GetDuplicate(), err)
	return res, err
}

// produceError maps an entry's error as errorInterceptor maps a handler's
// and carries it in a message: code, message and details.
func (s *recordService) produceError(ctx context.Context, err error) *sluicev1.ProduceError {
	err = connectapi.ErrorInterceptor{Logger: s.b.logger}.MapErr(ctx, sluicev1connect.RecordServiceProduceManyProcedure, err)
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

// acksLabel is the produce latency metric's acks label ("none", "leader",
// "all"), without building it per request.
func acksLabel(a sluicev1.Acks) string {
	switch a {
	case sluicev1.Acks_ACKS_NONE:
		return "none"
	case sluicev1.Acks_ACKS_LEADER:
		return "leader"
	case sluicev1.Acks_ACKS_ALL:
		return "all"
	}
	return strings.ToLower(strings.TrimPrefix(a.String(), "ACKS_"))
}

// produceBatches validates the request's payload and returns it as batches
// in the log format: records are encoded into one batch; given batches are
// split and checked (CRC, format, size). This is the one check a produced
// batch gets on the leader: the log appends the ValidBatch without
// checking it again, and the idempotence check reads its header.
func produceBatches(m *sluicev1.ProduceRequest, maxMessageBytes int32, now time.Time) ([]log.ValidBatch, error) {
	switch pl := m.GetPayload().(type) {
	case *sluicev1.ProduceRequest_Records:
		recs := pl.Records.GetRecords()
		if len(recs) == 0 {
			return nil, derr.New(derr.InvalidRequest, "records: must not be empty")
		}
		if len(recs) > 100000 {
			return nil, derr.New(derr.RecordListTooLarge, "records: at most 100000 per request; got %d", len(recs))
		}
		first := recs[0].GetTimestampMs()
		if first <= 0 {
			first = now.UnixMilli()
		}
		// One allocation each for the records, their headers, the header
		// keys and the encoded batch (sized from above, so it never
		// grows), however many records: keys and values are copied once,
		// from the request into the batch.
		size, nh, hkeys := record.HeaderSize, 0, 0
		for _, r := range recs {
			size += maxRecordOverhead + len(r.GetKey()) + len(r.GetValue())
			for _, h := range r.GetHeaders() {
				size += maxHeaderOverhead + len(h.GetKey()) + len(h.GetValue())
				hkeys += len(h.GetKey())
			}
			nh += len(r.GetHeaders())
		}
		lr := make([]record.Record, len(recs))
		hs := make([]record.RecordHeader, nh)
		keys := make([]byte, 0, hkeys) // header keys arrive as strings
		for i, r := range recs {
			ts := r.GetTimestampMs()
			if ts <= 0 {
				ts = now.UnixMilli()
			}
			rh := hs[:len(r.GetHeaders()):len(r.GetHeaders())]
			hs = hs[len(rh):]
			for j, h := range r.GetHeaders() {
				k := len(keys)
				keys = append(keys, h.GetKey()...)
				rh[j] = record.RecordHeader{Key: keys[k:len(keys):len(keys)], Value: h.GetValue()}
			}
			lr[i] = record.Record{TimestampDelta: ts - first, OffsetDelta: int32(i), Key: r.GetKey(), Value: r.GetValue(), Headers: rh}
		}
		// Encoded here, so valid by construction: no CRC check follows.
		v, err := log.EncodeLeaderBatch(make([]byte, 0, size), record.BatchHeader{FirstTimestamp: first, ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1}, lr)
		if err != nil {
			return nil, derr.New(derr.InvalidRecord, "records: %w", err)
		}
		if b := v.Batch(); maxMessageBytes > 0 && len(b) > int(maxMessageBytes) {
			return nil, batchTooLarge("records", len(b), maxMessageBytes)
		}
		return []log.ValidBatch{v}, nil
	case *sluicev1.ProduceRequest_Batches:
		data := pl.Batches.GetData()
		if len(data) == 0 {
			return nil, derr.New(derr.InvalidRequest, "batches: must not be empty")
		}
		return splitBatches(data, maxMessageBytes)
	}
	return nil, derr.New(derr.InvalidRequest, "payload: set records or batches")
}

// splitBatches splits and checks batches in the SDK's format (CRC, format,
// size, and the records of compressed batches): every check the log makes,
// before any batch is appended, so that a request is written whole or not
// at all. Control batches (transaction markers) are refused: only
// Sluice writes them; transactionalBatches checks transactional ones.
func splitBatches(data []byte, maxMessageBytes int32) ([]log.ValidBatch, error) {
	var out []log.ValidBatch
	for len(data) > 0 {
		// Split at the length prefix; ValidateLeaderBatch checks what
		// it frames (and says truncated when it frames past the end).
		end := len(data)
		if len(data) >= record.PrefixSize {
			if n := record.Size(data); n >= record.HeaderSize && n <= int64(len(data)) {
				end = int(n)
				if maxMessageBytes > 0 && end > int(maxMessageBytes) {
					return nil, batchTooLarge("batches", end, maxMessageBytes)
				}
			}
		}
		// Every check the log makes, before any batch is appended: a
		// request is written whole or not at all.
		v, err := log.ValidateLeaderBatch(data[:end], 0)
		if err != nil {
			return nil, derr.New(derr.CorruptMessage, "batches: batch %d: %w", len(out)+1, err)
		}
		if v.Header().Attributes.Control() {
			// Markers are written by the transaction coordinators alone
			// (WriteTxnMarkers): a client's would end transactions.
			return nil, derr.New(derr.InvalidRecord, "batches: batch %d is a control batch (a transaction marker): only Sluice writes those", len(out)+1)
		}
		if h := v.Header(); h.Attributes.Codec() != record.CodecNone {
			// The records of a compressed batch are checked too, so
			// that consumers never meet a batch they cannot decode
			// (the decompressed copy's CRC is fresh: not checked).
			plain, err := compress.DecompressBatch(nil, v.Batch(), compress.DefaultLimit)
			if err == nil {
				err = log.CheckLeaderRecords(plain)
			}
			if err != nil {
				return nil, derr.New(derr.InvalidRecord, "batches: batch %d (codec %d): %w", len(out)+1, h.Attributes.Codec(), err)
			}
		}
		out = append(out, v)
		data = data[end:]
	}
	return out, nil
}

// The most a record's (and a record header's) encoding adds to its key and
// value bytes: varints of at most 10 bytes for the record's length,
// timestamp delta, offset delta, key and value lengths and header count,
// plus its attributes byte; for a header, its key and value lengths.
const (
	maxRecordOverhead = 6*binary.MaxVarintLen64 + 1
	maxHeaderOverhead = 2 * binary.MaxVarintLen64
)

// batchTooLarge refuses a batch over max.message.bytes, with the sizes
// (the BatchTooLarge detail) so that clients can split it.
func batchTooLarge(field string, size int, maxMessageBytes int32) error {
	return &derr.Error{Kind: derr.MessageTooLarge, TooLarge: &derr.SizeLimit{Bytes: int32(min(size, math.MaxInt32)), Max: maxMessageBytes},
		Err: fmt.Errorf("%s: batch of %d bytes exceeds the topic's max.message.bytes %d", field, size, maxMessageBytes)}
}

func (s *recordService) Fetch(ctx context.Context, req *connect.Request[sluicev1.FetchRequest]) (*connect.Response[sluicev1.FetchResponse], error) {
	m := req.Msg
	t, pm, caller, err := s.resolve(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, err
	}
	maxBytes := int(m.GetMaxBytes())
	switch {
	case maxBytes < 0:
		return nil, derr.New(derr.InvalidRequest, "max_bytes: must not be negative")
	case maxBytes == 0:
		maxBytes = defaultFetchMaxBytes
	case maxBytes > maxFetchMaxBytes:
		maxBytes = maxFetchMaxBytes
	}
	if m.GetMaxWaitMs() < 0 {
		return nil, derr.New(derr.InvalidRequest, "max_wait_ms: must not be negative")
	}
	wait := min(time.Duration(m.GetMaxWaitMs())*time.Millisecond, maxFetchWait)
	if m.GetOffset() < 0 {
		return nil, derr.New(derr.InvalidRequest, "offset: must not be negative; got %d", m.GetOffset())
	}
	if wait > 0 && caller.Kind == tenants.PrincipalTenant {
		// A long poll ends as soon as its tenant is suspended.
		var stop func()
		ctx, stop = s.b.revoked.UntilSuspended(ctx, caller.TenantID)
		defer stop()
	}
	suspended := func(err error) error {
		if errors.Is(context.Cause(ctx), errTenantSuspended) {
			return derr.Wrap(derr.TopicAuthorizationFailed, errTenantSuspended)
		}
		return err
	}
	p, err := s.local(pm, t)
	if err != nil && forwardable(req.Header(), err) { // Header() allocates: only on the refusal path
		res, err := forward(ctx, s.b, pm, req, s.b.recordClient(pm.Leader).Fetch)
		return res, suspended(err)
	}
	if err != nil {
		return nil, err
	}
	iso := m.GetIsolationLevel()
	if iso < sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED || iso > sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED {
		return nil, derr.New(derr.InvalidRequest, "isolation_level: unknown value %d", iso)
	}
	if err := s.b.quota.CheckFetch(ctx, maxBytes); err != nil {
		return nil, err
	}
	start := time.Now()
	f, err := p.FetchRecords(ctx, m.GetOffset(), partition.FetchOptions{MaxBytes: maxBytes, Wait: wait, ClientEpoch: m.CurrentLeaderEpoch,
		ReadCommitted: iso == sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED})
	s.b.metrics.fetchLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, suspended(err)
	}
	s.b.quota.ChargeFetch(ctx, len(f.Data))
	// Markers (and with read_committed aborted batches) are gone from
	// f.Data; NextOffset passes them anyway.
	res := &sluicev1.FetchResponse{HighWatermark: f.HW, LastStableOffset: f.LSO, LogStartOffset: p.StartOffset(ctx), NextOffset: f.Next}
	if len(f.Data) > 0 {
		if m.GetRawBatches() {
			res.Batches = &sluicev1.RecordBatches{Data: f.Data}
		} else if res.Records, err = decodeRecords(f.Data, m.GetOffset()); err != nil {
			return nil, err
		}
	}
	if caller.Kind == tenants.PrincipalTenant {
		s.b.metrics.fetched(t.TenantID, len(f.Data)) // a broker's own reads (group lag) are not the tenant's
		s.b.usageCounters.AddEgress(t.TenantID, int64(len(f.Data)))
	}
	return connect.NewResponse(res), nil
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
			fr.Offset, fr.TimestampMs, fr.LeaderEpoch = off, h.FirstTimestamp+r.TimestampDelta, h.LeaderEpoch
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

func (s *recordService) ListOffsets(ctx context.Context, req *connect.Request[sluicev1.ListOffsetsRequest]) (*connect.Response[sluicev1.ListOffsetsResponse], error) {
	m := req.Msg
	t, pm, _, err := s.resolve(ctx, m.GetTopic(), m.GetPartition())
	if err != nil {
		return nil, err
	}
	if m.GetSpec() < sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST || m.GetSpec() > sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP {
		return nil, derr.New(derr.InvalidRequest, "spec: choose earliest, latest or timestamp")
	}
	p, err := s.local(pm, t)
	if err != nil && forwardable(req.Header(), err) { // Header() allocates: only on the refusal path
		return forward(ctx, s.b, pm, req, s.b.recordClient(pm.Leader).ListOffsets)
	}
	if err != nil {
		return nil, err
	}
	hw, lso, err := p.ReaderOffsets()
	if err != nil {
		return nil, err
	}
	// read_committed readers see up to the last stable offset.
	end := hw
	switch iso := m.GetIsolationLevel(); {
	case iso < sluicev1.IsolationLevel_ISOLATION_LEVEL_UNSPECIFIED || iso > sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
		return nil, derr.New(derr.InvalidRequest, "isolation_level: unknown value %d", iso)
	case iso == sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED:
		end = lso
	}
	res := &sluicev1.ListOffsetsResponse{LogStartOffset: p.StartOffset(ctx), HighWatermark: hw, LastStableOffset: lso, SizeBytes: p.SizeBytes(ctx)}
	switch m.GetSpec() {
	case sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST:
		res.Offset = res.LogStartOffset
	case sluicev1.OffsetSpec_OFFSET_SPEC_LATEST:
		res.Offset = end
	case sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP:
		off, ok, err := p.OffsetForTimestamp(ctx, m.GetTimestampMs())
		switch {
		case err != nil:
			return nil, err
		case !ok || off >= end:
			res.Offset = -1
		default:
			res.Offset = off
		}
	}
	return connect.NewResponse(res), nil
}

func (s *recordService) GetMetadata(ctx context.Context, req *connect.Request[sluicev1.GetMetadataRequest]) (*connect.Response[sluicev1.GetMetadataResponse], error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return nil, errors.New("no tenant principal in context")
	}
	meta := s.b.metadata()
	res := &sluicev1.GetMetadataResponse{}
	for _, b := range cluster.SortedNodes(meta) {
		res.Brokers = append(res.Brokers, &sluicev1.BrokerAddress{Id: b.ID, Address: b.Address, Rack: b.Rack})
	}
	names := req.Msg.GetTopics()
	if len(names) == 0 {
		for name := range meta.ByTenant[p.TenantID] {
			names = append(names, name)
		}
		sortStrings(names)
	}
	for _, name := range names {
		t, ok := meta.Topic(p.TenantID, name)
		if !ok {
			return nil, meta.TopicNotFound(name)
		}
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
