package client

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/compress"
	"github.com/sluicemq/sluice/record"
)

// ProducerOption configures a Producer.
type ProducerOption func(*producerConfig)

type producerConfig struct {
	acks            Acks
	idempotence     *bool
	linger          time.Duration
	maxBatchBytes   int
	codec           record.Codec
	maxInFlight     int
	deliveryTimeout time.Duration
	requestTimeout  time.Duration
	bufferBytes     int
	block           bool
	manual          bool
	partitioner     func(r *Record, partitions int32) int32
	txnTimeout      time.Duration // transactional producers only
}

// WithAcks sets when a produce counts as written (default AcksAll).
func WithAcks(a Acks) ProducerOption { return func(c *producerConfig) { c.acks = a } }

// WithIdempotence turns the idempotent producer on or off. It is on by
// default with AcksAll: retries never write a record twice and never
// reorder a partition. It needs AcksAll; with other acks it is off unless
// asked for, and asking for it is an error.
func WithIdempotence(on bool) ProducerOption {
	return func(c *producerConfig) { c.idempotence = &on }
}

// WithLinger makes a partition's batch wait up to d after its first record
// for more records before it is sent (default 0: no wait).
//
// Batching does not need a linger: a partition's records are sent as soon
// as one of its request slots (WithMaxInFlight) is free, and the records
// that arrive while every slot is busy gather into one batch, up to the
// max batch size (WithMaxBatchBytes), which goes out when the next slot
// frees. So an idle producer sends a record at once, and a loaded one sends
// fewer, larger requests as the load grows; with 0 it never degrades to a
// request per record. A linger d > 0 holds a batch that could be sent for
// up to d, so that more records join it: fewer requests at light load, for
// up to d more latency. A full batch never waits, and neither do Flush
// and ProduceSync.
func WithLinger(d time.Duration) ProducerOption { return func(c *producerConfig) { c.linger = d } }

// WithMaxBatchBytes bounds a batch of several records (default 256 KiB),
// lowered to the topic's max.message.bytes when that is smaller: a batch
// that reaches it is sealed and waits for a request slot, and the next
// records start another. A record larger than it is not refused: it goes
// in a batch of its own, up to the topic's max.message.bytes (which the
// producer learns from the metadata), and only a record over that fails
// with ErrRecordTooLarge.
func WithMaxBatchBytes(n int) ProducerOption { return func(c *producerConfig) { c.maxBatchBytes = n } }

// WithCompression compresses batches: "none" (default), "gzip",
// "snappy", "lz4" or "zstd", the codecs of Kafka's batch format (snappy as
// one raw block, which every Kafka client reads).
func WithCompression(codec string) ProducerOption {
	return func(c *producerConfig) {
		var err error
		if c.codec, err = compress.ParseCodec(codec); err != nil {
			c.codec = 255 // refused by NewProducer
		}
	}
}

// WithMaxInFlight bounds the requests in flight per partition, 1 to 5
// (default 5). Records produced while every slot is busy gather into the
// partition's next batch (see WithLinger). Order within a partition is
// kept across retries with idempotence at any value; without it only at 1.
// It also bounds the ProduceMany requests in flight to each broker, which
// carry the batches of all the partitions the broker leads: batches
// handed in while those are all in flight gather into the next one.
func WithMaxInFlight(n int) ProducerOption { return func(c *producerConfig) { c.maxInFlight = n } }

// WithDeliveryTimeout bounds the time from Produce to the record's
// callback, retries included (default 2 minutes). A record not
// acknowledged by then fails with ErrDeliveryTimeout.
func WithDeliveryTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.deliveryTimeout = d }
}

// WithRequestTimeout bounds one produce request (default 30 s).
func WithRequestTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.requestTimeout = d }
}

// WithBufferBytes bounds the bytes of records produced but not yet
// acknowledged (default 32 MiB).
func WithBufferBytes(n int) ProducerOption { return func(c *producerConfig) { c.bufferBytes = n } }

// WithBlockOnFullBuffer says whether Produce waits for room in a full
// buffer (default true; it waits until its context ends) or fails at once
// with ErrBufferFull.
func WithBlockOnFullBuffer(block bool) ProducerOption {
	return func(c *producerConfig) { c.block = block }
}

// WithManualPartitioner sends each record to its Record.Partition.
func WithManualPartitioner() ProducerOption { return func(c *producerConfig) { c.manual = true } }

// WithPartitioner chooses partitions with f, which must return a value in
// [0, partitions).
func WithPartitioner(f func(r *Record, partitions int32) int32) ProducerOption {
	return func(c *producerConfig) { c.partitioner = f }
}

// Producer sends records to partition leaders in batches. Produce is safe
// for concurrent use. Records of one partition are written, and their
// callbacks run, in the order Produce was called.
type Producer struct {
	c   *Client
	cfg producerConfig

	pid   int64 // -1 without idempotence; guarded by mu once transactional
	epoch int16

	// txnID is set for a TransactionalProducer's producer: batches carry
	// the transactional attribute and requests the id, and only the
	// coordinator changes the epoch (resetTxn).
	txnID string

	mu      sync.Mutex
	sinks   map[sinkKey]*sink
	leaders map[sluicev1connect.RecordServiceClient]*leaderConn // by broker client, see leaderConn
	sticky  map[string]*stickyPart
	closed  bool
	buffer  int // bytes of unfinished records
	pending int // unfinished records
	changed chan struct{}

	stop      chan struct{}
	aborted   chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type sinkKey struct {
	topic     string
	partition int32
}

// stickyPart is where a topic's records without keys go: partition, until
// it seals another batch (sealed is its sink's count when it was chosen).
type stickyPart struct {
	partition int32
	sealed    int64
}

// NewProducer makes a producer. With idempotence (the default) it first
// obtains a producer id from the cluster, retrying while no broker answers
// (a broker restarting, a reset connection) or the tenant is throttled,
// until ctx ends: then it fails with ctx's error.
func (c *Client) NewProducer(ctx context.Context, opts ...ProducerOption) (*Producer, error) {
	cfg := producerDefaults(opts)
	if cfg.txnTimeout != 0 {
		return nil, errors.New("sluice: WithTransactionTimeout applies to transactional producers only (NewTransactionalProducer)")
	}
	p, err := c.newProducer(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.idempotence == nil || *cfg.idempotence {
		if cfg.acks == AcksAll {
			pid, epoch, err := c.initProducerID(ctx)
			if err != nil {
				return nil, err
			}
			p.pid, p.epoch = pid, epoch
		}
	}
	return p, nil
}

func producerDefaults(opts []ProducerOption) producerConfig {
	cfg := producerConfig{
		acks: AcksAll, maxBatchBytes: 256 << 10, maxInFlight: 5,
		deliveryTimeout: 2 * time.Minute, requestTimeout: 30 * time.Second, bufferBytes: 32 << 20, block: true,
	}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// newProducer checks cfg and makes a producer without a producer id.
func (c *Client) newProducer(cfg producerConfig) (*Producer, error) {
	switch {
	case cfg.acks != AcksAll && cfg.acks != AcksLeader && cfg.acks != AcksNone:
		return nil, fmt.Errorf("sluice: acks %d: choose AcksAll, AcksLeader or AcksNone", cfg.acks)
	case cfg.idempotence != nil && *cfg.idempotence && cfg.acks != AcksAll:
		return nil, fmt.Errorf("sluice: idempotence needs acks=all (acks is %s)", cfg.acks)
	case cfg.codec > record.CodecZstd:
		return nil, errors.New("sluice: compression: choose none, gzip, snappy, lz4 or zstd")
	case cfg.maxInFlight < 1 || cfg.maxInFlight > 5:
		return nil, fmt.Errorf("sluice: max in flight %d: choose 1 to 5", cfg.maxInFlight)
	case cfg.maxBatchBytes < 1024:
		return nil, fmt.Errorf("sluice: max batch bytes %d: at least 1024", cfg.maxBatchBytes)
	case cfg.bufferBytes < cfg.maxBatchBytes:
		return nil, fmt.Errorf("sluice: buffer bytes %d must be at least the max batch bytes %d", cfg.bufferBytes, cfg.maxBatchBytes)
	case cfg.deliveryTimeout <= 0 || cfg.requestTimeout <= 0 || cfg.linger < 0:
		return nil, errors.New("sluice: delivery and request timeouts must be positive and linger not negative")
	}
	return &Producer{
		c: c, cfg: cfg, pid: -1, sinks: map[sinkKey]*sink{}, leaders: map[sluicev1connect.RecordServiceClient]*leaderConn{}, sticky: map[string]*stickyPart{},
		changed: make(chan struct{}), stop: make(chan struct{}), aborted: make(chan struct{}),
	}, nil
}

// Idempotent reports whether the producer writes each record once despite
// retries.
func (p *Producer) Idempotent() bool { return p.pid >= 0 }

// initProducerID asks any broker for a new producer id and its epoch,
// retrying while the cluster is unavailable (a broker that resets the
// connection included: the next one is asked, and after a round where
// every broker failed, the brokers are learnt again from the control
// plane) or the tenant is throttled (after the delay asked for), as long
// as ctx lasts. A rate refusal whose delay ends after ctx's deadline fails
// at once, with the refusal.
func (c *Client) initProducerID(ctx context.Context) (int64, int16, error) {
	for attempt := 1; ; attempt++ {
		var lastErr error
		for _, b := range c.brokerList() {
			res, err := b.record.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
			// A dying broker's reset arrives as Canceled: with ctx live,
			// that is the network's failure, retriable, not the caller's.
			if err = normalize(ctx, err); err == nil {
				return res.Msg.GetProducerId(), int16(res.Msg.GetProducerEpoch()), nil
			}
			if !retriable(err) || ctx.Err() != nil {
				return 0, 0, fmt.Errorf("sluice: init producer id: %w", err)
			}
			lastErr = err
			if throttled(err) {
				break // over the tenant's rate: wait the delay, not ask the next broker
			}
		}
		if !throttled(lastErr) {
			// No broker is known, or none answered: they may have moved
			// (a broker restarted at another address) or been replaced.
			if _, err := c.refreshMetadata(ctx, nil, true); err != nil && lastErr == nil {
				lastErr = err
			}
		}
		if lastErr == nil {
			lastErr = connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
		}
		if d, ok := throttleOf(lastErr); ok {
			if dl, has := ctx.Deadline(); has && time.Until(dl) < d {
				// Waiting out the refusal cannot end before ctx does: say
				// so now, with the quota's error, not at the deadline.
				return 0, 0, fmt.Errorf("sluice: init producer id: %w (the delay asked for, %s, ends after the context's deadline)", lastErr, d.Round(time.Millisecond))
			}
		}
		if err := clock.Sleep(ctx, retryWait(lastErr, attempt)); err != nil {
			return 0, 0, fmt.Errorf("sluice: init producer id: %w (last error: %v)", err, lastErr)
		}
	}
}

// Produce buffers r for sending and calls cb (which may be nil) exactly
// once with its fate: nil with r.Partition and r.Offset set, or a
// *DeliveryError whose Indefinite field says whether the record may have
// been written. Every failure is a *DeliveryError, also a refusal before
// the record was buffered (an unknown topic, a record too large, a full
// buffer, ctx ending while Produce waited): those are never written. cb
// runs on a producer goroutine, or on the caller's before Produce returns
// for such a refusal, and must not block for long.
//
// Produce blocks only while the buffer is full (see WithBlockOnFullBuffer)
// or while the topic's metadata is fetched for the first time, or again
// from the control plane when the record names a partition the cached
// metadata does not have (WithManualPartitioner: it may have been added
// since); ctx bounds that wait, not the delivery. Later metadata refreshes
// run in the background and never block Produce.
//
// A topic's partition count is read from the cached metadata: after
// partitions are added, records with keys go to hash(key) mod the new
// count (and records without keys spread over the new partitions too) once
// the cache is refreshed, within the client's metadata max age
// (WithMetadataMaxAge) at the latest.
func (p *Producer) Produce(ctx context.Context, r *Record, cb func(*Record, error)) {
	if cb == nil {
		cb = func(*Record, error) {}
	}
	if err := p.enqueue(ctx, r, cb); err != nil {
		cb(r, &DeliveryError{Err: err})
	}
}

// ProduceSync produces records and waits for all of them. It returns nil
// when every record was written (their offsets set), or the first error (a
// *DeliveryError, as Produce's callback gets it).
func (p *Producer) ProduceSync(ctx context.Context, rs ...*Record) error {
	return p.produceSync(ctx, p.Produce, rs)
}

// produceSync produces rs with produce (p's Produce, or a transactional
// producer's over p), sends what p buffered at once, and waits for every
// record: nil, or the first error a callback got.
func (p *Producer) produceSync(ctx context.Context, produce func(context.Context, *Record, func(*Record, error)), rs []*Record) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	wg.Add(len(rs))
	for _, r := range rs {
		produce(ctx, r, func(_ *Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			wg.Done()
		})
	}
	for _, s := range p.sinkList() {
		s.flushNow()
	}
	wg.Wait()
	return firstErr
}

func (p *Producer) enqueue(ctx context.Context, r *Record, cb func(*Record, error)) error {
	if r == nil {
		return errors.New("sluice: nil record")
	}
	size := r.size()
	tm := p.c.cachedTopic(r.Topic)
	if tm == nil {
		var err error
		if tm, err = p.c.topic(ctx, r.Topic); err != nil {
			return err
		}
	}
	if size+record.HeaderSize > p.recordLimit(tm) {
		if tm.maxMessageBytes > 0 {
			// The topic's limit may have been raised since the metadata
			// was fetched: the next records find out.
			p.c.refreshTopic(r.Topic)
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: about %d bytes in its batch; topic %q takes batches up to its max.message.bytes, %d",
				ErrRecordTooLarge, size+record.HeaderSize, r.Topic, tm.maxMessageBytes))
		}
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("%w: about %d bytes in its batch, over the max batch size %d",
			ErrRecordTooLarge, size+record.HeaderSize, p.cfg.maxBatchBytes))
	}
	n := int32(len(tm.partitions))
	var part int32
	sticky := false
	switch {
	case p.cfg.manual:
		part = r.Partition
		if part >= n { // added since the cache was filled?
			var err error
			if tm, err = p.c.topicWith(ctx, r.Topic, part); err != nil {
				return err
			}
			n = int32(len(tm.partitions))
		}
	case p.cfg.partitioner != nil:
		part = p.cfg.partitioner(r, n)
	case r.Key != nil:
		h := fnv.New32a()
		h.Write(r.Key)
		part = int32(h.Sum32() % uint32(n))
	default:
		part, sticky = p.stickyPartition(tm, -1), true
	}
	if part < 0 || part >= n {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("partition: topic %q has partitions 0..%d; got %d", r.Topic, n-1, part))
	}
	r.Partition = part
	if r.Timestamp.IsZero() {
		r.Timestamp = time.Now()
	}
	if err := p.reserve(ctx, size); err != nil {
		return err
	}
	s, err := p.sink(r.Topic, part)
	if err != nil {
		p.release(size)
		return err
	}
	pd := &pending{rec: r, cb: cb, size: size, at: time.Now()}
	res, _ := s.add(pd, p.batchLimit(tm), sticky)
	if res == addNewBatch {
		// The sticky partition's batch is full: the record goes to
		// another partition, and stays for the batch it joins there, also
		// when that is a new one (the open batch was full too).
		part = p.stickyPartition(tm, part)
		r.Partition = part
		if s, err = p.sink(r.Topic, part); err != nil {
			p.release(size)
			return err
		}
		var sealed int64
		res, sealed = s.add(pd, p.batchLimit(tm), false)
		p.stickyJoined(tm.name, part, sealed)
	}
	if res == addClosed {
		p.release(size)
		return ErrProducerClosed
	}
	return nil
}

// recordLimit is the largest record, with its batch header, the producer
// sends to tm's topic: the topic's max.message.bytes, in a batch of its own
// when it is over the max batch size; the max batch size when the server
// did not say.
func (p *Producer) recordLimit(tm *topicMeta) int {
	if tm.maxMessageBytes > 0 {
		return int(tm.maxMessageBytes)
	}
	return p.cfg.maxBatchBytes
}

// batchLimit bounds a batch of several records to tm's topic: the max
// batch size, or the topic's max.message.bytes when that is smaller.
func (p *Producer) batchLimit(tm *topicMeta) int {
	if tm.maxMessageBytes > 0 {
		return min(p.cfg.maxBatchBytes, int(tm.maxMessageBytes))
	}
	return p.cfg.maxBatchBytes
}

// stickyPartition keeps records without keys on one available partition
// until the batch they go into there is sealed (sent, or full), then moves
// to another (Kafka's KIP-480, franz-go's sticky partitioner): each batch
// holds whatever natural batching gathers on one partition, and over many
// batches the records still spread over the partitions. full, when not -1,
// is a partition whose open batch has no room for the next record: the
// partitioner leaves it if it is still the sticky one.
func (p *Producer) stickyPartition(tm *topicMeta, full int32) int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.sticky[tm.name]
	if sp != nil && sp.partition != full && int(sp.partition) < len(tm.partitions) && tm.partitions[sp.partition].leader >= 0 &&
		p.sealedLocked(tm.name, sp.partition) == sp.sealed {
		return sp.partition
	}
	var avail []int32
	for i, pm := range tm.partitions {
		if pm.leader >= 0 && (sp == nil || int32(i) != sp.partition || len(tm.partitions) == 1) {
			avail = append(avail, int32(i))
		}
	}
	next := rand.Int32N(int32(len(tm.partitions)))
	if len(avail) > 0 {
		next = avail[rand.IntN(len(avail))]
	}
	p.sticky[tm.name] = &stickyPart{partition: next, sealed: p.sealedLocked(tm.name, next)}
	return next
}

// stickyJoined notes that a record without a key joined partition's batch
// after sealed others: the sticky partitioner stays there for that batch.
func (p *Producer) stickyJoined(topic string, partition int32, sealed int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.sticky[topic]; sp != nil && sp.partition == partition && sealed > sp.sealed {
		sp.sealed = sealed
	}
}

// sealedLocked is how many batches partition of topic sealed so far.
func (p *Producer) sealedLocked(topic string, partition int32) int64 {
	if s := p.sinks[sinkKey{topic, partition}]; s != nil {
		return s.sealed.Load()
	}
	return 0
}

// reserve takes room for size bytes in the buffer.
func (p *Producer) reserve(ctx context.Context, size int) error {
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return ErrProducerClosed
		}
		if p.buffer+size <= p.cfg.bufferBytes || p.buffer == 0 {
			p.buffer += size
			p.pending++
			p.mu.Unlock()
			return nil
		}
		if !p.cfg.block {
			buffered := p.buffer // read under the lock: records finishing change it
			p.mu.Unlock()
			return fmt.Errorf("%w: %d bytes buffered, limit %d", ErrBufferFull, buffered, p.cfg.bufferBytes)
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for buffer space: %w", ErrBufferFull, ctx.Err())
		}
		p.mu.Lock()
	}
}

// release returns a finished record's room.
func (p *Producer) release(size int) {
	p.freeRoom(size)
	p.finished()
}

// freeRoom returns a record's buffer room (before its callback runs, so a
// callback may produce again).
func (p *Producer) freeRoom(size int) {
	p.mu.Lock()
	p.buffer -= size
	p.broadcastLocked()
	p.mu.Unlock()
}

// finished counts a record whose callback ran (Flush waits for these).
func (p *Producer) finished() {
	p.mu.Lock()
	p.pending--
	p.broadcastLocked()
	p.mu.Unlock()
}

func (p *Producer) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Producer) sink(topic string, partition int32) (*sink, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrProducerClosed
	}
	k := sinkKey{topic, partition}
	s := p.sinks[k]
	if s == nil {
		s = newSink(p, topic, partition)
		p.sinks[k] = s
		p.wg.Add(1)
		go func() { defer p.wg.Done(); s.run() }()
	}
	return s, nil
}

func (p *Producer) sinkList() []*sink {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*sink, 0, len(p.sinks))
	for _, s := range p.sinks {
		out = append(out, s)
	}
	return out
}

// Flush sends every buffered record without waiting for a linger (each as
// soon as its partition has a free request slot) and waits until each has
// its outcome (its callback ran), or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	for {
		for _, s := range p.sinkList() {
			s.flushNow()
		}
		p.mu.Lock()
		n, ch := p.pending, p.changed
		p.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sluice: flush: %d records still pending: %w", n, ctx.Err())
		}
	}
}

// wakeWaiters wakes Flush and waitIdle to look again.
func (p *Producer) wakeWaiters() {
	p.mu.Lock()
	p.broadcastLocked()
	p.mu.Unlock()
}

// waitIdle waits until every record has its outcome and no request is in
// flight (a sink may settle records before their requests return: a
// poisoned one fails them at once), or ctx ends.
func (p *Producer) waitIdle(ctx context.Context) error {
	for {
		p.mu.Lock()
		n, ch := p.pending, p.changed
		p.mu.Unlock()
		busy := n > 0
		for _, s := range p.sinkList() {
			s.mu.Lock()
			if s.inflight > 0 || len(s.queue) > 0 || len(s.cur) > 0 {
				busy = true
			}
			s.mu.Unlock()
			if busy {
				break
			}
		}
		if !busy {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("sluice: %d records still pending: %w", n, ctx.Err())
		}
	}
}

// poisonAll makes every partition fail its records with cause until
// resetTxn (an aborting transaction's buffered records).
func (p *Producer) poisonAll(cause error) {
	for _, s := range p.sinkList() {
		s.mu.Lock()
		s.poisonLocked(cause)
		s.mu.Unlock()
	}
}

// resetTxn gives every partition the producer id and epoch of the next
// transaction, sequences from 0. The producer must be idle (waitIdle).
func (p *Producer) resetTxn(pid int64, epoch int16) {
	p.mu.Lock()
	p.pid, p.epoch = pid, epoch
	p.mu.Unlock()
	for _, s := range p.sinkList() {
		s.mu.Lock()
		s.resetTxnLocked(pid, epoch)
		s.mu.Unlock()
	}
}

// Close flushes, then stops the producer. Records still pending when ctx
// ends fail with ErrProducerClosed (Indefinite when they were sent). Close
// returns after every callback ran.
func (p *Producer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		err := p.Flush(ctx)
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		if err != nil {
			close(p.aborted)
		}
		close(p.stop)
		p.wg.Wait()
		p.closeErr = err
	})
	return p.closeErr
}
