package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

// Offset says where a consumer starts reading a partition.
type Offset struct {
	kind int // 0 exact, 1 earliest, 2 latest, 3 time
	at   int64
	t    time.Time
}

// Earliest starts at the oldest record still retained.
func Earliest() Offset { return Offset{kind: 1} }

// Latest starts after the newest record: only new records are read.
func Latest() Offset { return Offset{kind: 2} }

// At starts at offset n.
func At(n int64) Offset { return Offset{at: n} }

// AtTime starts at the first record with a timestamp at or after t.
func AtTime(t time.Time) Offset { return Offset{kind: 3, t: t} }

func (o Offset) String() string {
	switch o.kind {
	case 1:
		return "earliest"
	case 2:
		return "latest"
	case 3:
		return "@" + o.t.Format(time.RFC3339Nano)
	}
	return fmt.Sprint(o.at)
}

// ConsumerOption configures a Consumer.
type ConsumerOption func(*consumerConfig)

type consumerConfig struct {
	maxBytes  int32
	maxWait   time.Duration
	prefetch  int
	isolation Isolation
}

// Isolation says which records a consumer reads.
type Isolation int

const (
	// ReadUncommitted reads every record below the high watermark,
	// records of open and aborted transactions included. Default.
	ReadUncommitted Isolation = iota
	// ReadCommitted reads only records below the last stable offset (the
	// first offset of the oldest open transaction, or the high watermark
	// when none is open) and never a record of an aborted transaction:
	// a transaction's records appear once it commits, all of them, and
	// never when it aborts. A consumer behind an open transaction waits at
	// its first offset until it ends. Latest() (in Assign, AssignUntil and
	// a group's WithStartOffset) is the last stable offset.
	ReadCommitted
)

func (i Isolation) String() string {
	switch i {
	case ReadUncommitted:
		return "read-uncommitted"
	case ReadCommitted:
		return "read-committed"
	}
	return fmt.Sprintf("Isolation(%d)", int(i))
}

// ParseIsolation reads "read-committed" and "read-uncommitted" (also with
// an underscore, as Kafka spells them).
func ParseIsolation(s string) (Isolation, error) {
	switch strings.ReplaceAll(strings.ToLower(s), "_", "-") {
	case "read-uncommitted":
		return ReadUncommitted, nil
	case "read-committed":
		return ReadCommitted, nil
	}
	return 0, fmt.Errorf("isolation %q: choose read-committed or read-uncommitted", s)
}

func (i Isolation) proto() sluicev1.IsolationLevel {
	if i == ReadCommitted {
		return sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED
	}
	return sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_UNCOMMITTED
}

// WithIsolation sets which records the consumer reads (default
// ReadUncommitted). Consumers of a transactional producer's output use
// ReadCommitted; a GroupConsumer takes it through WithConsumerOptions.
func WithIsolation(i Isolation) ConsumerOption { return func(c *consumerConfig) { c.isolation = i } }

// WithFetchMaxBytes bounds one fetch per partition (default 1 MiB; at least
// one batch is returned even when larger).
func WithFetchMaxBytes(n int32) ConsumerOption { return func(c *consumerConfig) { c.maxBytes = n } }

// WithFetchMaxWait sets how long a fetch waits at the leader for new
// records (default 500 ms).
func WithFetchMaxWait(d time.Duration) ConsumerOption {
	return func(c *consumerConfig) { c.maxWait = d }
}

// WithPrefetch sets how many fetched responses per partition may wait for
// Poll (default 2): the next fetch is in flight while the application
// processes the previous one.
func WithPrefetch(n int) ConsumerOption { return func(c *consumerConfig) { c.prefetch = n } }

// Consumer reads assigned partitions from explicit offsets. It does not
// commit offsets (consumer groups do). Poll is for one goroutine at a time.
type Consumer struct {
	c   *Client
	cfg consumerConfig

	mu     sync.Mutex
	parts  map[sinkKey]*fetcher
	closed bool
	ready  chan fetched
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type fetched struct {
	f     *fetcher
	recs  []*Record
	err   error
	ended bool // the partition reached its end (AssignUntil) with these records
}

// NewConsumer makes a consumer with no partitions; Assign adds them.
func (c *Client) NewConsumer(opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{maxBytes: 1 << 20, maxWait: 500 * time.Millisecond, prefetch: 2}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.maxBytes <= 0 || cfg.maxWait < 0 || cfg.prefetch < 1 {
		return nil, errors.New("sluice: fetch max bytes and prefetch must be positive, max wait not negative")
	}
	if cfg.isolation != ReadUncommitted && cfg.isolation != ReadCommitted {
		return nil, fmt.Errorf("sluice: isolation %d: choose ReadUncommitted or ReadCommitted", int(cfg.isolation))
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Consumer{c: c, cfg: cfg, parts: map[sinkKey]*fetcher{}, ready: make(chan fetched, 64), ctx: ctx, cancel: cancel}, nil
}

// Assign starts reading topic's partition from. The start offset is
// resolved at once, so an unknown topic or partition fails here.
func (cs *Consumer) Assign(ctx context.Context, topic string, partition int32, from Offset) error {
	return cs.assign(ctx, topic, partition, from, nil)
}

// AssignUntil is Assign with an end: it reads topic's partition from from
// up to, not including, the offset until resolves to now (Latest(): the
// high watermark, so what was written before the call; AtTime(t): the
// first record at or after t), then stops reading it. Records written
// later are not read. Once every assigned partition has reached its end
// and Poll has returned their records, Poll returns io.EOF: read a topic
// to its end, as kcat -e and rpk's -o :end do. A start beyond the end is
// read once, so that an offset out of range is still reported by Poll.
func (cs *Consumer) AssignUntil(ctx context.Context, topic string, partition int32, from, until Offset) error {
	return cs.assign(ctx, topic, partition, from, &until)
}

func (cs *Consumer) assign(ctx context.Context, topic string, partition int32, from Offset, until *Offset) error {
	if _, _, err := cs.c.leaderOf(ctx, topic, partition); err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
		return err
	}
	off, err := cs.c.resolveOffset(ctx, topic, partition, from, cs.cfg.isolation)
	if err != nil {
		return err
	}
	end := int64(-1)
	if until != nil {
		if end, err = cs.c.resolveOffset(ctx, topic, partition, *until, cs.cfg.isolation); err != nil {
			return err
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		return errors.New("sluice: consumer is closed")
	}
	k := sinkKey{topic, partition}
	if f := cs.parts[k]; f != nil {
		f.cancel()
	}
	fctx, cancel := context.WithCancel(cs.ctx)
	f := &fetcher{cs: cs, topic: topic, partition: partition, offset: off, end: end, fctx: fctx, cancel: cancel, slots: make(chan struct{}, cs.cfg.prefetch)}
	cs.parts[k] = f
	if end >= 0 && off == end {
		f.ended = true // nothing to read
		return nil
	}
	cs.wg.Add(1)
	go func() { defer cs.wg.Done(); f.run(fctx) }()
	return nil
}

// Unassign stops reading a partition.
func (cs *Consumer) Unassign(topic string, partition int32) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if f := cs.parts[sinkKey{topic, partition}]; f != nil {
		f.cancel()
		delete(cs.parts, sinkKey{topic, partition})
	}
}

// Poll returns the next records of any assigned partition, waiting until
// some arrive or ctx ends. Records of a partition come in offset order,
// each once. A partition whose position is out of range (below the log
// start after retention, or beyond the end) stops and Poll returns an
// error coded OutOfRange naming it; Assign it again to go on. When every
// assigned partition was assigned with an end (AssignUntil) and has
// reached it, Poll returns io.EOF.
func (cs *Consumer) Poll(ctx context.Context) ([]*Record, error) {
	for {
		if cs.allEnded() {
			return nil, io.EOF
		}
		select {
		case fr := <-cs.ready:
			<-fr.f.slots
			if fr.f.ctx().Err() != nil {
				continue // unassigned since
			}
			if fr.ended {
				cs.mu.Lock()
				fr.f.ended = true
				cs.mu.Unlock()
			}
			if fr.err != nil {
				return nil, fr.err
			}
			if len(fr.recs) == 0 {
				continue // the end, without records
			}
			return fr.recs, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// allEnded reports whether partitions are assigned and every one reached
// its end, its records returned.
func (cs *Consumer) allEnded() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, f := range cs.parts {
		if !f.ended {
			return false
		}
	}
	return len(cs.parts) > 0
}

// Close stops every fetch.
func (cs *Consumer) Close() error {
	cs.mu.Lock()
	cs.closed = true
	cs.mu.Unlock()
	cs.cancel()
	cs.wg.Wait()
	return nil
}

// fetcher reads one partition.
type fetcher struct {
	cs        *Consumer
	topic     string
	partition int32
	offset    int64
	end       int64 // stop before this offset (AssignUntil); -1: never
	ended     bool  // reached end and Poll returned its records; guarded by cs.mu
	cancel    context.CancelFunc
	slots     chan struct{} // responses not yet taken by Poll
	fctx      context.Context
}

func (f *fetcher) ctx() context.Context { return f.fctx }

func (f *fetcher) run(ctx context.Context) {
	attempt := 0
	for {
		select {
		case f.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		recs, err := f.fetchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && connect.CodeOf(err) != connect.CodeOutOfRange && retriable(err) {
			<-f.slots
			attempt++
			if clock.Sleep(ctx, retryWait(err, attempt)) != nil {
				return
			}
			continue
		}
		attempt = 0
		ended := false
		if err == nil && f.end >= 0 && f.offset >= f.end {
			// Past the end: records written after it are not this
			// assignment's.
			for len(recs) > 0 && recs[len(recs)-1].Offset >= f.end {
				recs = recs[:len(recs)-1]
			}
			ended = true
		}
		if err == nil && len(recs) == 0 && !ended {
			<-f.slots
			continue
		}
		select {
		case f.cs.ready <- fetched{f: f, recs: recs, err: err, ended: ended}:
		case <-ctx.Done():
			return
		}
		if err != nil || ended {
			return // out of range or a lasting error: reported once, then stop; or done
		}
	}
}

func (f *fetcher) fetchOnce(ctx context.Context) (_ []*Record, err error) {
	rc, epoch, err := f.cs.c.leaderOf(ctx, f.topic, f.partition)
	if err != nil {
		f.cs.c.observe(f.topic, f.partition, err)
		return nil, err
	}
	defer func() {
		// The control plane knows the topic (routing found it) but the
		// broker has not heard of it yet: retry.
		if connect.CodeOf(err) == connect.CodeNotFound {
			err = connect.NewError(connect.CodeUnavailable, err)
		}
	}()
	res, err := rc.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{
		Topic: f.topic, Partition: f.partition, Offset: f.offset, MaxBytes: f.cs.cfg.maxBytes,
		MaxWaitMs: f.cs.cfg.maxWait.Milliseconds(), RawBatches: true, CurrentLeaderEpoch: &epoch,
		IsolationLevel: f.cs.cfg.isolation.proto(),
	}))
	if err = normalize(ctx, err); err != nil {
		f.cs.c.observe(f.topic, f.partition, err)
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeOutOfRange {
			return nil, connect.NewError(connect.CodeOutOfRange, fmt.Errorf("topic %q partition %d: %s", f.topic, f.partition, ce.Message()))
		}
		return nil, err
	}
	recs, next, err := decodeBatches(f.topic, f.partition, res.Msg.GetBatches().GetData(), f.offset)
	if err != nil {
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("topic %q partition %d at offset %d: %w", f.topic, f.partition, f.offset, err))
	}
	// A read_committed fetch may skip batches (an aborted transaction's,
	// markers) that it does not return: next_offset is past them.
	next = max(next, res.Msg.GetNextOffset())
	if next > f.offset {
		f.offset = next
	}
	return recs, nil
}

// decodeBatches turns fetched batches into records at or after from and
// returns the offset after the last batch.
func decodeBatches(topic string, partition int32, data []byte, from int64) ([]*Record, int64, error) {
	var out []*Record
	next := from
	var it record.RecordIter
	for len(data) > 0 {
		b, rest, err := record.ReadBatch(data)
		if err != nil {
			return nil, 0, err
		}
		data = rest
		h := b.Header()
		next = max(next, h.LastOffset()+1)
		if h.Attributes.Control() {
			continue
		}
		if b, err = compress.DecompressBatch(nil, b, 0); err != nil {
			return nil, 0, err
		}
		if err := it.Reset(b); err != nil {
			return nil, 0, err
		}
		for it.Next() {
			r := it.Record()
			off := h.BaseOffset + int64(r.OffsetDelta)
			if off < from {
				continue
			}
			rec := &Record{
				Topic: topic, Partition: partition, Offset: off, LeaderEpoch: h.LeaderEpoch,
				Timestamp: time.UnixMilli(h.Timestamp(r.TimestampDelta)),
				Key:       clone(r.Key), Value: clone(r.Value),
			}
			for _, hd := range r.Headers {
				rec.Headers = append(rec.Headers, Header{Key: string(hd.Key), Value: clone(hd.Value)})
			}
			out = append(out, rec)
		}
		if err := it.Err(); err != nil {
			return nil, 0, err
		}
	}
	return out, next, nil
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// ResolveOffset turns an Offset into an exact one, asking the partition's
// leader. A time after the newest record resolves to the high watermark.
func (c *Client) ResolveOffset(ctx context.Context, topic string, partition int32, o Offset) (int64, error) {
	return c.resolveOffset(ctx, topic, partition, o, ReadUncommitted)
}

// resolveOffset is ResolveOffset for a consumer of isolation iso: with
// ReadCommitted, Latest() is the last stable offset.
func (c *Client) resolveOffset(ctx context.Context, topic string, partition int32, o Offset, iso Isolation) (int64, error) {
	if o.kind == 0 {
		if o.at < 0 {
			return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("offset %d: must not be negative", o.at))
		}
		return o.at, nil
	}
	req := &sluicev1.ListOffsetsRequest{Topic: topic, Partition: partition, IsolationLevel: iso.proto()}
	switch o.kind {
	case 1:
		req.Spec = sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST
	case 2:
		req.Spec = sluicev1.OffsetSpec_OFFSET_SPEC_LATEST
	case 3:
		req.Spec, req.TimestampMs = sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, o.t.UnixMilli()
	}
	res, err := c.listOffsets(ctx, req)
	if err != nil {
		return 0, err
	}
	if res.GetOffset() < 0 {
		// No record at or after the time: start at the end.
		if iso == ReadCommitted {
			return stableOffset(res), nil
		}
		return res.GetHighWatermark(), nil
	}
	return res.GetOffset(), nil // with ReadCommitted, Latest() answers the last stable offset
}

// stableOffset is a ListOffsets answer's last stable offset.
func stableOffset(res *sluicev1.ListOffsetsResponse) int64 { return res.GetLastStableOffset() }

// LastStableOffset returns a partition's last stable offset: the first
// offset of its oldest open transaction, or its high watermark when no
// transaction is open there. A ReadCommitted consumer reads up to it.
func (c *Client) LastStableOffset(ctx context.Context, topic string, partition int32) (int64, error) {
	res, err := c.listOffsets(ctx, &sluicev1.ListOffsetsRequest{Topic: topic, Partition: partition, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST,
		IsolationLevel: sluicev1.IsolationLevel_ISOLATION_LEVEL_READ_COMMITTED})
	if err != nil {
		return 0, err
	}
	return stableOffset(res), nil
}

// Watermarks returns a partition's log start offset (the oldest retained
// record) and high watermark (one past the newest committed record).
func (c *Client) Watermarks(ctx context.Context, topic string, partition int32) (start, hw int64, err error) {
	res, err := c.listOffsets(ctx, &sluicev1.ListOffsetsRequest{Topic: topic, Partition: partition, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST})
	if err != nil {
		return 0, 0, err
	}
	return res.GetLogStartOffset(), res.GetHighWatermark(), nil
}

// listOffsets asks a partition's leader for an offset, retrying while the
// partition moves or is briefly unavailable (20 attempts), or while the
// tenant is throttled (after each delay asked for, not counted), within ctx.
func (c *Client) listOffsets(ctx context.Context, req *sluicev1.ListOffsetsRequest) (*sluicev1.ListOffsetsResponse, error) {
	for attempt := 1; ; attempt++ {
		rc, _, err := c.leaderOf(ctx, req.GetTopic(), req.GetPartition())
		if err == nil {
			var res *connect.Response[sluicev1.ListOffsetsResponse]
			res, err = rc.ListOffsets(ctx, connect.NewRequest(req))
			if err = normalize(ctx, err); err == nil {
				return res.Msg, nil
			}
			if connect.CodeOf(err) == connect.CodeNotFound {
				// The control plane knows the topic (routing found it)
				// but this broker has not heard of it yet.
				err = connect.NewError(connect.CodeUnavailable, err)
			}
		}
		c.observe(req.GetTopic(), req.GetPartition(), err)
		if throttled(err) {
			attempt--
		}
		if !retriable(err) || attempt >= 20 {
			return nil, err
		}
		if serr := clock.Sleep(ctx, retryWait(err, max(attempt, 1))); serr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", serr, err)
		}
	}
}

// Partitions returns the number of partitions of topic.
func (c *Client) Partitions(ctx context.Context, topic string) (int32, error) {
	tm, err := c.topic(ctx, topic)
	if err != nil {
		return 0, err
	}
	return int32(len(tm.partitions)), nil
}
