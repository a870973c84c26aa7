package records

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

const (
	defaultProduceWait = 30 * time.Second
	maxProduceWait     = 5 * time.Minute
	// maxRecords bounds a records payload.
	maxRecords = 100000
)

// Acks is how many replicas a produce waits for before it is answered.
// The values are the API's (sluice.v1.Acks), so that a value the service
// does not know is reported with the number the client sent.
type Acks int32

const (
	// AcksDefault is AcksAll.
	AcksDefault Acks = 0
	// AcksNone: no answer waited for (the base offset is -1).
	AcksNone Acks = 1
	// AcksLeader: answered once the leader appended.
	AcksLeader Acks = 2
	// AcksAll: answered once every in-sync replica holds the batches
	// (min.insync.replicas of them at least).
	AcksAll Acks = 3
)

// String is the produce latency metric's acks label: "none", "leader",
// "all".
func (a Acks) String() string {
	switch a {
	case AcksNone:
		return "none"
	case AcksLeader:
		return "leader"
	case AcksAll:
		return "all"
	}
	return strconv.Itoa(int(a))
}

// RecordList is a produce payload of records not yet in a batch (the
// Connect API's records payload), which the service encodes into one
// batch. It is read in place: keys and values are copied once, from the
// request into the batch.
type RecordList interface {
	Len() int
	// Record is record i: its timestamp (<= 0: the broker's time), key
	// and value (nil: none) and how many headers it has.
	Record(i int) (timestampMs int64, key, value []byte, headers int)
	// Header is record i's header j.
	Header(i, j int) (key string, value []byte)
}

// Record is a record of a RecordSlice.
type Record struct {
	TimestampMs int64
	Key, Value  []byte
	Headers     []Header
}

// Header is a record header.
type Header struct {
	Key   string
	Value []byte
}

// RecordSlice is a RecordList of plain records.
type RecordSlice []Record

func (r RecordSlice) Len() int { return len(r) }
func (r RecordSlice) Record(i int) (int64, []byte, []byte, int) {
	return r[i].TimestampMs, r[i].Key, r[i].Value, len(r[i].Headers)
}
func (r RecordSlice) Header(i, j int) (string, []byte) {
	return r[i].Headers[j].Key, r[i].Headers[j].Value
}

// Payload is what a produce writes: batches in the log's format (what
// the SDK and Kafka clients send), or records the service encodes into one
// batch. The zero Payload is none (refused).
type Payload struct {
	kind    payloadKind
	batches []byte
	records RecordList
}

type payloadKind uint8

const (
	noPayload payloadKind = iota
	batchesPayload
	recordsPayload
)

// BatchPayload is a payload of batches: data holds whole batches, one
// after another, in the log's format.
func BatchPayload(data []byte) Payload { return Payload{kind: batchesPayload, batches: data} }

// RecordPayload is a payload of records, encoded into one batch.
func RecordPayload(l RecordList) Payload { return Payload{kind: recordsPayload, records: l} }

// ProduceRequest is a produce to one partition.
type ProduceRequest struct {
	Topic     string
	Partition int32
	Acks      Acks
	// Timeout bounds the wait for the acks: 0 is 30 s, at most 5 minutes;
	// negative is refused.
	Timeout time.Duration
	// CurrentLeaderEpoch, when set, fences: a request for another leader
	// epoch than the leader's is refused.
	CurrentLeaderEpoch *int32
	// TransactionalID is the producer's, with transactional batches.
	TransactionalID string
	Payload         Payload
}

// Headers returns the headers a request came with, which carry the
// caller's credential to a transaction coordinator on another broker
// (Deps.VerifyTransaction). It is called only for transactional batches
// (building the headers may allocate); nil is none. It is a parameter of
// its own, not a request field, so that an adapter's request does not
// escape through it.
type Headers func() http.Header

// ProduceResult is a produce's answer.
type ProduceResult struct {
	// BaseOffset is the offset of the first record written (the
	// original's for a duplicate); -1 with AcksNone.
	BaseOffset     int64
	LogStartOffset int64
	// Duplicate: the batch was a retry of one written before, answered
	// with the original's offsets and not written again.
	Duplicate bool
	// LogAppendTime is the first batch's append time (ms) on a topic
	// with message.timestamp.type=LogAppendTime; -1 otherwise, with
	// AcksNone and for a duplicate.
	LogAppendTime int64
}

// Produce writes the request's batches to the partition, which this
// broker must lead: the request is resolved and checked whole (acks,
// timeout, the payload: CRC, format, max.message.bytes, control and
// transactional batches) before anything else, then a partition another
// broker leads is answered with a *NotLedHereError, uncharged. On the
// leader the produce is admitted (Quotas.AdmitProduce), written
// (transactional batches verified with their coordinator first), and
// refunded when the log wrote nothing (Quotas.RefundProduce). headers
// are the request's, for the transactional verification.
func (s *Service) Produce(ctx context.Context, req ProduceRequest, headers Headers) (ProduceResult, error) {
	t, pm, _, err := s.resolve(ctx, req.Topic, req.Partition)
	if err != nil {
		return ProduceResult{}, err
	}
	acks, timeout, err := produceOptions(req.Acks, req.Timeout)
	if err != nil {
		return ProduceResult{}, err
	}
	batches, err := produceBatches(req.Payload, t.Config.MaxMessageBytes, time.Now())
	if err != nil {
		return ProduceResult{}, err
	}
	txn, err := transactionalBatches(batches, req.TransactionalID)
	if err != nil {
		return ProduceResult{}, err
	}
	p, err := s.local(pm, t)
	if err != nil {
		return ProduceResult{}, err
	}
	cost := batchBytes(batches)
	if err := s.d.Quotas.AdmitProduce(ctx, cost); err != nil {
		return ProduceResult{}, err
	}
	res, err := s.produceOn(ctx, t, p, batches, acks, timeout, req.CurrentLeaderEpoch, s.verifier(txn, headers, t, pm.Partition))
	s.d.Quotas.RefundProduce(ctx, len(batches), cost, res.Duplicate, err)
	return res, err
}

// produceOptions checks a produce request's acks and timeout and returns
// them with their defaults applied.
func produceOptions(acks Acks, timeout time.Duration) (Acks, time.Duration, error) {
	if acks == AcksDefault {
		acks = AcksAll
	}
	if acks < AcksNone || acks > AcksAll {
		return 0, 0, derr.New(derr.InvalidRequest, "acks: unknown value %d", acks)
	}
	switch {
	case timeout < 0:
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
func (s *Service) produceOn(ctx context.Context, t *cluster.Topic, p *partition.Replica, batches []log.ValidBatch, acks Acks, timeout time.Duration, epoch *int32, verify partition.Verifier) (ProduceResult, error) {
	start := time.Now()
	var res partition.ProduceResult
	var err error
	if verify != nil {
		res, err = p.ProduceTransactional(ctx, batches, sluicev1.Acks(acks), timeout, epoch, verify)
	} else {
		res, err = p.Produce(ctx, batches, sluicev1.Acks(acks), timeout, epoch)
	}
	s.metrics.produceLatency.WithLabelValues(acks.String()).Observe(time.Since(start).Seconds())
	if err != nil {
		return ProduceResult{}, err
	}
	s.metrics.produced(t.TenantID, batchBytes(batches))
	return ProduceResult{BaseOffset: res.Base, LogStartOffset: p.Log().LogStartOffset(), Duplicate: res.Duplicate, LogAppendTime: res.LogAppendTime}, nil
}

// batchBytes is the size of produced batches, what a produce is charged.
func batchBytes(batches []log.ValidBatch) int {
	n := 0
	for _, b := range batches {
		n += len(b.Batch())
	}
	return n
}

// produceBatches validates a produce's payload and returns it as batches
// in the log format: records are encoded into one batch; given batches are
// split and checked (CRC, format, size). This is the one check a produced
// batch gets on the leader: the log appends the ValidBatch without
// checking it again, and the idempotence check reads its header.
func produceBatches(pl Payload, maxMessageBytes int32, now time.Time) ([]log.ValidBatch, error) {
	switch pl.kind {
	case recordsPayload:
		return encodeRecords(pl.records, maxMessageBytes, now)
	case batchesPayload:
		if len(pl.batches) == 0 {
			return nil, derr.New(derr.InvalidRequest, "batches: must not be empty")
		}
		return splitBatches(pl.batches, maxMessageBytes)
	}
	return nil, derr.New(derr.InvalidRequest, "payload: set records or batches")
}

// encodeRecords encodes recs into one batch. It takes one allocation each
// for the records, their headers, the header keys and the encoded batch
// (sized from above, so it never grows), however many records: keys and
// values are copied once, from the request into the batch.
func encodeRecords(recs RecordList, maxMessageBytes int32, now time.Time) ([]log.ValidBatch, error) {
	n := 0
	if recs != nil {
		n = recs.Len()
	}
	if n == 0 {
		return nil, derr.New(derr.InvalidRequest, "records: must not be empty")
	}
	if n > maxRecords {
		return nil, derr.New(derr.RecordListTooLarge, "records: at most %d per request; got %d", maxRecords, n)
	}
	first, _, _, _ := recs.Record(0)
	if first <= 0 {
		first = now.UnixMilli()
	}
	size, nh, hkeys := record.HeaderSize, 0, 0
	for i := range n {
		_, key, value, headers := recs.Record(i)
		size += maxRecordOverhead + len(key) + len(value)
		for j := range headers {
			hk, hv := recs.Header(i, j)
			size += maxHeaderOverhead + len(hk) + len(hv)
			hkeys += len(hk)
		}
		nh += headers
	}
	lr := make([]record.Record, n)
	hs := make([]record.RecordHeader, nh)
	keys := make([]byte, 0, hkeys) // header keys arrive as strings
	for i := range n {
		ts, key, value, headers := recs.Record(i)
		if ts <= 0 {
			ts = now.UnixMilli()
		}
		rh := hs[:headers:headers]
		hs = hs[len(rh):]
		for j := range headers {
			hk, hv := recs.Header(i, j)
			k := len(keys)
			keys = append(keys, hk...)
			rh[j] = record.RecordHeader{Key: keys[k:len(keys):len(keys)], Value: hv}
		}
		lr[i] = record.Record{TimestampDelta: ts - first, OffsetDelta: int32(i), Key: key, Value: value, Headers: rh}
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
		if v.Header().Attributes.LogAppendTime() {
			// The timestamp type is the topic's: its leader stamps a
			// LogAppendTime topic's batches (Kafka's producers never
			// set it).
			return nil, derr.New(derr.InvalidRecord, "batches: batch %d is marked LogAppendTime: only a partition's leader sets the timestamp type", len(out)+1)
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
