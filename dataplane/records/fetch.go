package records

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
	"github.com/sluicemq/sluice/tenants"
)

const (
	defaultFetchMaxBytes = 1 << 20
	maxFetchMaxBytes     = 64 << 20
	maxFetchWait         = 30 * time.Second
)

// IsolationLevel is what a reader sees of transactions. The values are
// the API's (sluice.v1.IsolationLevel), so that a value the service does
// not know is reported with the number the client sent.
type IsolationLevel int32

const (
	// IsolationDefault is ReadUncommitted.
	IsolationDefault IsolationLevel = 0
	// ReadUncommitted: every record below the high watermark.
	ReadUncommitted IsolationLevel = 1
	// ReadCommitted: records below the last stable offset, without those
	// of aborted transactions.
	ReadCommitted IsolationLevel = 2
)

// FetchRequest is a consumer's read of one partition.
type FetchRequest struct {
	Topic     string
	Partition int32
	Offset    int64
	// MaxBytes bounds the answer (at least one batch is answered): 0 is
	// 1 MiB, at most 64 MiB; negative is refused.
	MaxBytes int
	// MaxWait is the longest the fetch waits for records at the end of
	// the partition (a long poll), at most 30 s; negative is refused.
	MaxWait time.Duration
	// CurrentLeaderEpoch, when set, fences as in Produce.
	CurrentLeaderEpoch *int32
	Isolation          IsolationLevel
	// Unfiltered keeps transaction markers and, with ReadCommitted, the
	// batches of aborted transactions in Data, and answers the aborted
	// transactions in FetchResult.Aborted instead: for clients that
	// filter themselves (Kafka's), whose next offset follows the last
	// batch they got.
	Unfiltered bool
}

// AbortedTxn is an aborted transaction an Unfiltered read_committed
// fetch's data may hold batches of: the producer's batches from
// FirstOffset on, up to the producer's abort marker, are aborted.
type AbortedTxn struct {
	ProducerID  int64
	FirstOffset int64
}

// FetchResult is a fetch's answer.
type FetchResult struct {
	HW, LSO, LogStartOffset int64
	// NextOffset is where the consumer fetches next: past transaction
	// markers and (with ReadCommitted) aborted batches, which Data lacks.
	NextOffset int64
	// Data holds whole batches in the log's format; the first may start
	// before the fetch's offset.
	Data []byte
	// Aborted, for an Unfiltered read_committed fetch, are the aborted
	// transactions Data may hold batches of.
	Aborted []AbortedTxn
}

// Fetch reads the partition, which this broker must lead: the request is
// resolved and checked, then a partition another broker leads is answered
// with a *NotLedHereError. On the leader the fetch is checked against the
// tenant's fetch quota and charged what it answered; a tenant's long poll
// ends, answered TopicAuthorizationFailed, when the tenant is suspended
// (LongPoll). A tenant's fetched bytes are counted for its metering; a
// broker's own reads (group lag) are not.
func (s *Service) Fetch(ctx context.Context, req FetchRequest) (FetchResult, error) {
	t, pm, caller, err := s.resolve(ctx, req.Topic, req.Partition)
	if err != nil {
		return FetchResult{}, err
	}
	maxBytes := req.MaxBytes
	switch {
	case maxBytes < 0:
		return FetchResult{}, derr.New(derr.InvalidRequest, "max_bytes: must not be negative")
	case maxBytes == 0:
		maxBytes = defaultFetchMaxBytes
	case maxBytes > maxFetchMaxBytes:
		maxBytes = maxFetchMaxBytes
	}
	if req.MaxWait < 0 {
		return FetchResult{}, derr.New(derr.InvalidRequest, "max_wait_ms: must not be negative")
	}
	wait := min(req.MaxWait, maxFetchWait)
	if req.Offset < 0 {
		return FetchResult{}, derr.New(derr.InvalidRequest, "offset: must not be negative; got %d", req.Offset)
	}
	p, err := s.local(pm, t)
	if err != nil {
		return FetchResult{}, err
	}
	iso := req.Isolation
	if iso < IsolationDefault || iso > ReadCommitted {
		return FetchResult{}, derr.New(derr.InvalidRequest, "isolation_level: unknown value %d", iso)
	}
	if err := s.d.Quotas.CheckFetch(ctx, maxBytes); err != nil {
		return FetchResult{}, err
	}
	reqCtx := ctx
	ctx, stop := s.LongPoll(ctx, wait)
	defer stop()
	start := time.Now()
	f, err := p.FetchRecords(ctx, req.Offset, partition.FetchOptions{MaxBytes: maxBytes, Wait: wait, ClientEpoch: req.CurrentLeaderEpoch,
		ReadCommitted: iso == ReadCommitted, Unfiltered: req.Unfiltered})
	s.metrics.fetchLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return FetchResult{}, Suspended(ctx, err)
	}
	if err := reqCtx.Err(); err != nil {
		// The caller gave up (its deadline passed, or it went away) while
		// the fetch read: what is not answered is neither charged nor
		// billed as egress.
		return FetchResult{}, derr.Wrap(derr.Canceled, err)
	}
	s.d.Quotas.ChargeFetch(ctx, len(f.Data))
	if caller.Kind == tenants.PrincipalTenant {
		s.metrics.fetched(t.TenantID, len(f.Data)) // a broker's own reads (group lag) are not the tenant's
		s.d.Usage.AddEgress(t.TenantID, int64(len(f.Data)))
	}
	// Markers (and with read_committed aborted batches) are gone from
	// f.Data; NextOffset passes them anyway.
	res := FetchResult{HW: f.HW, LSO: f.LSO, LogStartOffset: p.StartOffset(ctx), NextOffset: f.Next, Data: f.Data}
	for _, a := range f.Aborted {
		res.Aborted = append(res.Aborted, AbortedTxn{ProducerID: a.ProducerID, FirstOffset: a.FirstOffset})
	}
	return res, nil
}

// LongPoll returns the context a fetch that waits up to wait runs in:
// for a tenant's long poll (wait > 0), one that ends as soon as the
// tenant is suspended (Suspended tells); otherwise ctx. Call stop when
// the fetch is done. An adapter that forwards a long poll runs the
// forwarded call in it, as Fetch runs its read.
func (s *Service) LongPoll(ctx context.Context, wait time.Duration) (_ context.Context, stop func()) {
	if p, ok := tenants.PrincipalFrom(ctx); ok && wait > 0 && p.Kind == tenants.PrincipalTenant && s.d.UntilSuspended != nil {
		return s.d.UntilSuspended(ctx, p.TenantID)
	}
	return ctx, func() {}
}

// Suspended is err as a fetch running in ctx (from LongPoll) answers it:
// TopicAuthorizationFailed, whatever err is (nil too), when its tenant was
// suspended meanwhile; err otherwise.
func Suspended(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, tenants.ErrPermissionDenied) {
		return derr.Wrap(derr.TopicAuthorizationFailed, cause)
	}
	return err
}

// OffsetSpec is which offset ListOffsets answers. The values are the
// API's (sluice.v1.OffsetSpec).
type OffsetSpec int32

const (
	// Earliest: the log start offset.
	Earliest OffsetSpec = 1
	// Latest: the high watermark (the LSO for ReadCommitted).
	Latest OffsetSpec = 2
	// Timestamp: the first offset whose record's timestamp is at or after
	// ListOffsetsRequest.TimestampMs.
	Timestamp OffsetSpec = 3
	// MaxTimestamp: the offset of the record with the largest timestamp
	// (the first such record when several share it), Kafka's KIP-734.
	MaxTimestamp OffsetSpec = 4
)

// ListOffsetsRequest asks for one offset of a partition.
type ListOffsetsRequest struct {
	Topic       string
	Partition   int32
	Spec        OffsetSpec
	TimestampMs int64 // with Timestamp
	Isolation   IsolationLevel
}

// ListOffsetsResult is ListOffsets' answer: the offset asked for (-1 for
// a timestamp past the end, or no record), with the partition's offsets
// and size.
type ListOffsetsResult struct {
	Offset int64
	// Timestamp is the found record's, with Timestamp and MaxTimestamp;
	// -1 otherwise.
	Timestamp               int64
	LogStartOffset, HW, LSO int64
	// LocalLogStartOffset is where this broker's disk starts: above
	// LogStartOffset when older segments live in the object store only.
	LocalLogStartOffset int64
	SizeBytes           int64
}

// ListOffsets answers an offset of the partition, which this broker must
// lead (otherwise a *NotLedHereError, once the request is resolved and
// its spec checked).
func (s *Service) ListOffsets(ctx context.Context, req ListOffsetsRequest) (ListOffsetsResult, error) {
	t, pm, _, err := s.resolve(ctx, req.Topic, req.Partition)
	if err != nil {
		return ListOffsetsResult{}, err
	}
	if req.Spec < Earliest || req.Spec > MaxTimestamp {
		return ListOffsetsResult{}, derr.New(derr.InvalidRequest, "spec: choose earliest, latest, timestamp or max timestamp")
	}
	p, err := s.local(pm, t)
	if err != nil {
		return ListOffsetsResult{}, err
	}
	hw, lso, err := p.ReaderOffsets()
	if err != nil {
		return ListOffsetsResult{}, err
	}
	// read_committed readers see up to the last stable offset.
	end := hw
	switch iso := req.Isolation; {
	case iso < IsolationDefault || iso > ReadCommitted:
		return ListOffsetsResult{}, derr.New(derr.InvalidRequest, "isolation_level: unknown value %d", iso)
	case iso == ReadCommitted:
		end = lso
	}
	res := ListOffsetsResult{Timestamp: -1, LogStartOffset: p.StartOffset(ctx), HW: hw, LSO: lso,
		LocalLogStartOffset: p.Log().LogStartOffset(), SizeBytes: p.SizeBytes(ctx)}
	switch req.Spec {
	case Earliest:
		res.Offset = res.LogStartOffset
	case Latest:
		res.Offset = end
	case Timestamp, MaxTimestamp:
		ts, ok := req.TimestampMs, true
		if req.Spec == MaxTimestamp {
			if ts, ok, err = p.MaxTimestamp(ctx); err != nil {
				return ListOffsetsResult{}, err
			}
		}
		res.Offset = -1
		if !ok {
			break
		}
		off, ok, err := p.OffsetForTimestamp(ctx, ts)
		switch {
		case err != nil:
			return ListOffsetsResult{}, err
		case ok && off < end:
			// As Kafka: a record above the end readers see is not
			// answered (max timestamp's then too: -1 until it is).
			if o, t := recordForTimestamp(ctx, p, off, ts); o < end {
				res.Offset, res.Timestamp = o, t
			}
		}
	}
	return res, nil
}

// Metadata is the cluster as a tenant sees it: every broker, and the
// tenant's topics asked for. Its topics are the view's, read-only.
type Metadata struct {
	Brokers []cluster.Node // by id
	Topics  []*cluster.Topic
}

// Metadata answers the brokers and the caller's topics named (all of
// them, by name, when none is): a topic the view does not know is
// refused (View.TopicNotFound).
func (s *Service) Metadata(ctx context.Context, topics []string) (Metadata, error) {
	p, ok := tenants.PrincipalFrom(ctx)
	if !ok || p.TenantID == "" {
		return Metadata{}, errNoPrincipal
	}
	meta := s.d.View()
	res := Metadata{Brokers: cluster.SortedNodes(meta)}
	names := topics
	if len(names) == 0 {
		for name := range meta.ByTenant[p.TenantID] {
			names = append(names, name)
		}
		slices.Sort(names)
	}
	for _, name := range names {
		t, ok := meta.Topic(p.TenantID, name)
		if !ok {
			return Metadata{}, meta.TopicNotFound(name)
		}
		res.Topics = append(res.Topics, t)
	}
	return res, nil
}

// EndOffsetForEpoch answers a consumer's OffsetForLeaderEpoch (KIP-320:
// has the log been truncated below what it read at epoch?): the largest
// epoch at or below epoch the partition's log knows and the offset where
// it ends (the log end for the latest epoch), or -1 and -1 when it knows
// none. The partition must be led here (else a *NotLedHereError);
// currentLeaderEpoch, when set, fences as in Produce.
func (s *Service) EndOffsetForEpoch(ctx context.Context, topic string, partition int32, currentLeaderEpoch *int32, epoch int32) (int32, int64, error) {
	t, pm, _, err := s.resolve(ctx, topic, partition)
	if err != nil {
		return 0, 0, err
	}
	p, err := s.local(pm, t)
	if err != nil {
		return 0, 0, err
	}
	if e := currentLeaderEpoch; e != nil && *e >= 0 {
		switch {
		case *e < pm.LeaderEpoch:
			return 0, 0, derr.New(derr.FencedLeaderEpoch, "leader epoch %d is older than the partition's %d", *e, pm.LeaderEpoch)
		case *e > pm.LeaderEpoch:
			return 0, 0, derr.New(derr.UnknownLeaderEpoch, "leader epoch %d is newer than this broker knows (%d)", *e, pm.LeaderEpoch)
		}
	}
	if _, _, err := p.ReaderOffsets(); err != nil {
		return 0, 0, err
	}
	if epoch == pm.LeaderEpoch {
		// The current epoch ends at the log's end (the log's epoch cache
		// holds only the epochs that wrote a batch).
		return epoch, p.Log().LEO(), nil
	}
	e, end := p.Log().EndOffsetFor(epoch)
	return e, end, nil
}

// recordForTimestamp is the offset and timestamp of the first record at
// or after ts in the batch at off (the first batch whose max timestamp is
// at least ts, as the log's time index finds it), as Kafka answers
// ListOffsets: a record's offset, not its batch's. When the batch cannot
// be read (moved to the object store meanwhile, say), the batch's offset
// and ts.
func recordForTimestamp(ctx context.Context, p *partition.Replica, off, ts int64) (int64, int64) {
	f, err := p.FetchRecords(ctx, off, partition.FetchOptions{MaxBytes: 1})
	if err != nil || len(f.Data) < record.HeaderSize {
		return off, ts
	}
	b, _, err := record.ReadBatch(f.Data)
	if err != nil || b.BaseOffset() > off || b.LastOffset() < off {
		return off, ts
	}
	h := b.Header()
	if h.Attributes.Codec() != record.CodecNone {
		if b, err = compress.DecompressBatch(nil, b, compress.DefaultLimit); err != nil {
			return off, ts
		}
	}
	it, err := b.Records()
	if err != nil {
		return off, ts
	}
	for it.Next() {
		r := it.Record()
		if o, t := h.BaseOffset+int64(r.OffsetDelta), h.Timestamp(r.TimestampDelta); o >= off && t >= ts {
			return o, t
		}
	}
	return off, ts
}

// DescribeProducers returns the producers the partition's leader knows
// (Kafka's DescribeProducers), at the leader only: NotLedHere elsewhere.
func (s *Service) DescribeProducers(ctx context.Context, topic string, partition int32) ([]partition.ProducerInfo, error) {
	t, pm, _, err := s.resolve(ctx, topic, partition)
	if err != nil {
		return nil, err
	}
	p, err := s.local(pm, t)
	if err != nil {
		return nil, err
	}
	return p.Producers()
}
