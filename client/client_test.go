package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

func newClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(t.Context(), endpoint, client.APIKey(apiKey))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// consumeAll reads every partition of topic from the start until n records
// arrived.
func consumeAll(t *testing.T, c *client.Client, topic string, n int) []*client.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	parts, err := c.Partitions(ctx, topic)
	require.NoError(t, err)
	cs, err := c.NewConsumer(client.WithFetchMaxWait(100 * time.Millisecond))
	require.NoError(t, err)
	defer cs.Close()
	for p := range parts {
		require.NoError(t, cs.Assign(ctx, topic, p, client.Earliest()))
	}
	var out []*client.Record
	for len(out) < n {
		recs, err := cs.Poll(ctx)
		require.NoError(t, err, "after %d of %d records", len(out), n)
		out = append(out, recs...)
	}
	return out
}

func TestProduceConsumeRoundTrip(t *testing.T) {
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			topic := fresh("roundtrip-" + codec)
			createTopic(t, topic, 3, nil)
			c := newClient(t)
			p, err := c.NewProducer(t.Context(), client.WithCompression(codec), client.WithLinger(2*time.Millisecond))
			require.NoError(t, err)
			require.True(t, p.Idempotent(), "idempotence is on by default")

			n := 3000
			if codec != "none" {
				n = 600 // still dozens of batches: a codec's round trip, not a load test
			}
			var mu sync.Mutex
			lastOffset := map[int32]int64{}
			keyPart := map[string]int32{}
			var failures []error
			for i := range n {
				r := &client.Record{Topic: topic, Value: fmt.Appendf(nil, "value-%d", i), Headers: []client.Header{{Key: "i", Value: fmt.Append(nil, i)}}}
				if i%2 == 0 {
					r.Key = fmt.Appendf(nil, "key-%d", i%10)
				}
				p.Produce(t.Context(), r, func(r *client.Record, err error) {
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						failures = append(failures, err)
						return
					}
					if last, ok := lastOffset[r.Partition]; ok && r.Offset <= last {
						failures = append(failures, fmt.Errorf("partition %d: callback for offset %d after %d", r.Partition, r.Offset, last))
					}
					lastOffset[r.Partition] = r.Offset
					if r.Key != nil {
						if kp, ok := keyPart[string(r.Key)]; ok && kp != r.Partition {
							failures = append(failures, fmt.Errorf("key %s went to partitions %d and %d", r.Key, kp, r.Partition))
						}
						keyPart[string(r.Key)] = r.Partition
					}
				})
			}
			require.NoError(t, p.Close(t.Context()))
			require.Empty(t, failures)

			got := consumeAll(t, c, topic, n)
			require.Len(t, got, n)
			seen := map[string]bool{}
			next := map[int32]int64{}
			for _, r := range got {
				require.False(t, seen[string(r.Value)], "duplicate %s", r.Value)
				seen[string(r.Value)] = true
				require.Equal(t, next[r.Partition], r.Offset, "partition %d offsets are dense and in order", r.Partition)
				next[r.Partition] = r.Offset + 1
				require.Len(t, r.Headers, 1)
				require.Equal(t, "value-"+string(r.Headers[0].Value), string(r.Value))
				require.WithinDuration(t, time.Now(), r.Timestamp, time.Minute)
			}
		})
	}
}

// TestLogAppendTime: on a topic with message.timestamp.type=LogAppendTime
// a produced record comes back with its leader's append time, not the
// time it was given, and is consumed with that same time.
func TestLogAppendTime(t *testing.T) {
	topic := fresh("append-time")
	appendTime := "LogAppendTime"
	createTopic(t, topic, 1, &sluicev1.TopicConfig{MessageTimestampType: &appendTime})
	c := newClient(t)
	p, err := c.NewProducer(t.Context())
	require.NoError(t, err)
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	before := time.Now().Truncate(time.Millisecond)
	recs := []*client.Record{{Topic: topic, Value: []byte("a"), Timestamp: past}, {Topic: topic, Value: []byte("b"), Timestamp: past}}
	require.NoError(t, p.ProduceSync(t.Context(), recs...))
	require.NoError(t, p.Close(t.Context()))
	for _, r := range recs {
		require.False(t, r.Timestamp.Before(before), "%s stamped %v, produced from %v", r.Value, r.Timestamp, before)
		require.False(t, r.Timestamp.After(time.Now()), "%s stamped %v", r.Value, r.Timestamp)
	}
	got := consumeAll(t, c, topic, 2)
	require.Len(t, got, 2)
	for i, r := range got {
		require.Equal(t, recs[i].Value, r.Value)
		require.True(t, recs[i].Timestamp.Equal(r.Timestamp), "%s consumed at %v, produce answered %v", r.Value, r.Timestamp, recs[i].Timestamp)
	}
}

func TestProduceSyncAndAcks(t *testing.T) {
	acksName := fresh("acks")
	createTopic(t, acksName, 1, nil)
	c := newClient(t)
	for _, acks := range []client.Acks{client.AcksAll, client.AcksLeader, client.AcksNone} {
		p, err := c.NewProducer(t.Context(), client.WithAcks(acks))
		require.NoError(t, err)
		require.Equal(t, acks == client.AcksAll, p.Idempotent(), "idempotence follows acks=all unless set")
		r1 := &client.Record{Topic: acksName, Value: []byte("a")}
		r2 := &client.Record{Topic: acksName, Value: []byte("b")}
		require.NoError(t, p.ProduceSync(t.Context(), r1, r2))
		if acks == client.AcksNone {
			require.Equal(t, int64(-1), r1.Offset, "acks=0 learns no offset")
		} else {
			require.Equal(t, r1.Offset+1, r2.Offset)
		}
		require.NoError(t, p.Close(t.Context()))
	}
	got := consumeAll(t, c, acksName, 6)
	require.Len(t, got, 6)
}

func TestProducerBadInput(t *testing.T) {
	smallName := fresh("small")
	createTopic(t, smallName, 1, &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(2048))})
	c := newClient(t)
	ctx := t.Context()

	_, err := c.NewProducer(ctx, client.WithAcks(client.AcksLeader), client.WithIdempotence(true))
	require.ErrorContains(t, err, "idempotence needs acks=all")
	_, err = c.NewProducer(ctx, client.WithAcks(client.Acks(7)))
	require.ErrorContains(t, err, "acks 7")
	_, err = c.NewProducer(ctx, client.WithCompression("brotli"))
	require.ErrorContains(t, err, "compression: choose none, gzip, snappy, lz4 or zstd")
	_, err = c.NewProducer(ctx, client.WithMaxInFlight(6))
	require.ErrorContains(t, err, "max in flight")
	_, err = client.ParseAcks("2")
	require.Error(t, err)

	p, err := c.NewProducer(ctx, client.WithDeliveryTimeout(5*time.Second))
	require.NoError(t, err)
	defer p.Close(ctx)

	err = p.ProduceSync(ctx, &client.Record{Topic: "", Value: []byte("x")})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "empty topic: %v", err)

	err = p.ProduceSync(ctx, &client.Record{Topic: "no-such-topic", Value: []byte("x")})
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "unknown topic: %v", err)
	require.ErrorContains(t, err, `topic "no-such-topic" not found`)

	err = p.ProduceSync(ctx, &client.Record{Topic: smallName, Value: make([]byte, 1<<20)})
	require.ErrorIs(t, err, client.ErrRecordTooLarge)

	// Over the topic's max.message.bytes (which the producer knows from the
	// metadata): refused, for certain, naming the limit.
	err = p.ProduceSync(ctx, &client.Record{Topic: smallName, Value: bytes.Repeat([]byte("x"), 4096)})
	require.ErrorIs(t, err, client.ErrRecordTooLarge)
	var de *client.DeliveryError
	require.ErrorAs(t, err, &de)
	require.False(t, de.Indefinite, "a refused record was certainly not written")
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.ErrorContains(t, err, "max.message.bytes")

	// The partition goes on after the refusal (the producer renumbers the
	// batches behind the refused one).
	ok := &client.Record{Topic: smallName, Value: []byte("fits")}
	require.NoError(t, p.ProduceSync(ctx, ok))
	got := consumeAll(t, c, smallName, 1)
	require.Equal(t, "fits", string(got[0].Value))

	// Many small records batch beyond max.message.bytes: the broker refuses
	// the batch with a BatchTooLarge detail and the producer splits it
	// (keeping its sequences), until every record is written once.
	var many []*client.Record
	for i := range 60 {
		many = append(many, &client.Record{Topic: smallName, Value: bytes.Repeat([]byte{byte('a' + i%26)}, 100)})
	}
	require.NoError(t, p.ProduceSync(ctx, many...))
	for i, r := range many {
		require.Equal(t, int64(1+i), r.Offset, "in order, once each (after \"fits\" at 0)")
	}

	err = p.ProduceSync(ctx, &client.Record{Topic: smallName, Partition: 3, Value: []byte("x")})
	require.NoError(t, err, "Partition is ignored without the manual partitioner")
	mp, err := c.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	err = mp.ProduceSync(ctx, &client.Record{Topic: smallName, Partition: 3, Value: []byte("x")})
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "partition out of range: %v", err)
	require.NoError(t, mp.Close(ctx))
}

func TestBufferFull(t *testing.T) {
	bufferName := fresh("buffer")
	createTopic(t, bufferName, 1, nil)
	c := newClient(t)
	p, err := c.NewProducer(t.Context(), client.WithBufferBytes(4096), client.WithMaxBatchBytes(4096),
		client.WithBlockOnFullBuffer(false), client.WithLinger(time.Hour))
	require.NoError(t, err)
	var full error
	for i := 0; i < 100 && full == nil; i++ {
		p.Produce(t.Context(), &client.Record{Topic: bufferName, Value: make([]byte, 500)}, func(_ *client.Record, err error) {
			if errors.Is(err, client.ErrBufferFull) {
				full = err
			}
		})
	}
	require.ErrorIs(t, full, client.ErrBufferFull)
	require.NoError(t, p.Close(t.Context()), "Close flushes what was buffered despite the long linger")
}

func TestNewErrors(t *testing.T) {
	_, err := client.New(t.Context(), "localhost:1", client.APIKey(apiKey))
	require.ErrorContains(t, err, "must be an http:// or https:// URL")
	_, err = client.New(t.Context(), endpoint, client.Credentials{})
	require.ErrorContains(t, err, "credentials are empty")
	_, err = client.New(t.Context(), endpoint, client.APIKey("slk_not-a-key"))
	require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
}

func TestConsumerOffsets(t *testing.T) {
	offsetsName := fresh("offsets")
	createTopic(t, offsetsName, 1, nil)
	c := newClient(t)
	p, err := c.NewProducer(t.Context())
	require.NoError(t, err)
	var recs []*client.Record
	for i := range 10 {
		recs = append(recs, &client.Record{Topic: offsetsName, Value: fmt.Append(nil, i)})
	}
	require.NoError(t, p.ProduceSync(t.Context(), recs...))
	require.NoError(t, p.Close(t.Context()))

	start, hw, err := c.Watermarks(t.Context(), offsetsName, 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), start)
	require.Equal(t, int64(10), hw)
	off, err := c.ResolveOffset(t.Context(), offsetsName, 0, client.Latest())
	require.NoError(t, err)
	require.Equal(t, int64(10), off)
	off, err = c.ResolveOffset(t.Context(), offsetsName, 0, client.AtTime(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, int64(10), off, "a time after the last record resolves to the end")

	cs, err := c.NewConsumer()
	require.NoError(t, err)
	defer cs.Close()
	require.NoError(t, cs.Assign(t.Context(), offsetsName, 0, client.At(7)))
	got, err := cs.Poll(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(7), got[0].Offset, "starts inside a batch at the asked offset")
	require.Equal(t, "7", string(got[0].Value))

	require.NoError(t, cs.Assign(t.Context(), offsetsName, 0, client.At(50)))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = cs.Poll(ctx)
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(err), "%v", err)

	err = cs.Assign(t.Context(), offsetsName, 1, client.Earliest())
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err), "%v", err)
	err = cs.Assign(t.Context(), "nope", 0, client.Earliest())
	require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "%v", err)
}

func ptr[T any](v T) *T { return &v }

// TestRetention: brokers delete segments past the topic's retention.ms (the
// active segment rolls after a tenth of it, at least 1 s), and reading
// below the new log start is out of range.
func TestRetention(t *testing.T) {
	shortName := fresh("short")
	createTopic(t, shortName, 1, &sluicev1.TopicConfig{RetentionMs: ptr(int64(3000))})
	c := newClient(t)
	p, err := c.NewProducer(t.Context())
	require.NoError(t, err)
	defer p.Close(t.Context())
	require.NoError(t, p.ProduceSync(t.Context(), &client.Record{Topic: shortName, Value: []byte("old")}))
	time.Sleep(1200 * time.Millisecond) // clock: the two records' timestamps 1.2 s apart, so that retention (3 s) expires one before the other
	fresh := &client.Record{Topic: shortName, Value: []byte("fresh")}
	require.NoError(t, p.ProduceSync(t.Context(), fresh))
	require.Equal(t, int64(1), fresh.Offset)

	deadline := time.Now().Add(15 * time.Second)
	for {
		start, hw, err := c.Watermarks(t.Context(), shortName, 0)
		require.NoError(t, err)
		require.Equal(t, int64(2), hw)
		if start == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the old record was not deleted (log start %d)", start)
		time.Sleep(100 * time.Millisecond) // poll: until retention deleted the old record
	}
	cs, err := c.NewConsumer()
	require.NoError(t, err)
	defer cs.Close()
	require.NoError(t, cs.Assign(t.Context(), shortName, 0, client.Earliest()))
	got, err := cs.Poll(t.Context())
	require.NoError(t, err)
	require.Equal(t, "fresh", string(got[0].Value))
	require.NoError(t, cs.Assign(t.Context(), shortName, 0, client.At(0)))
	_, err = cs.Poll(t.Context())
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(err), "%v", err)
}

// TestProducerRecordUpToTopicLimit: a record above the producer's max batch
// size (256 KiB by default) but within the topic's max.message.bytes goes
// in a batch of its own and is written (it was refused as "larger than the
// maximum batch size"); records around it still batch; one over the topic's
// limit is refused, saying so.
func TestProducerRecordUpToTopicLimit(t *testing.T) {
	bigrecName := fresh("bigrec")
	bigrecSmall := fresh("bigrec-small")
	createTopic(t, bigrecName, 1, nil) // max.message.bytes: the default, 1 MiB
	createTopic(t, bigrecSmall, 1, &sluicev1.TopicConfig{MaxMessageBytes: ptr(int32(100 << 10))})
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	defer p.Close(ctx)

	big := bytes.Repeat([]byte("b"), 1000<<10)
	recs := []*client.Record{
		{Topic: bigrecName, Value: []byte("before")},
		{Topic: bigrecName, Value: big},
		{Topic: bigrecName, Value: bytes.Repeat([]byte("m"), 300<<10)},
		{Topic: bigrecName, Value: []byte("after")},
	}
	require.NoError(t, p.ProduceSync(ctx, recs...))
	got := consumeAll(t, c, bigrecName, len(recs))
	require.Len(t, got, len(recs))
	for i, r := range got {
		require.Equal(t, int64(i), r.Offset)
		require.True(t, bytes.Equal(recs[i].Value, r.Value), "record %d comes back whole (%d bytes)", i, len(r.Value))
	}

	err = p.ProduceSync(ctx, &client.Record{Topic: bigrecName, Value: make([]byte, 1<<20)})
	require.ErrorIs(t, err, client.ErrRecordTooLarge)
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	require.ErrorContains(t, err, fmt.Sprintf("topic %q takes batches up to its max.message.bytes, 1048576", bigrecName))
	var de *client.DeliveryError
	require.ErrorAs(t, err, &de)
	require.False(t, de.Indefinite)

	// Below the max batch size, the topic's limit bounds the batches and
	// the records: 100 KiB.
	err = p.ProduceSync(ctx, &client.Record{Topic: bigrecSmall, Value: make([]byte, 101<<10)})
	require.ErrorContains(t, err, fmt.Sprintf("topic %q takes batches up to its max.message.bytes, 102400", bigrecSmall))
	var many []*client.Record
	for range 30 {
		many = append(many, &client.Record{Topic: bigrecSmall, Value: bytes.Repeat([]byte("s"), 10<<10)})
	}
	require.NoError(t, p.ProduceSync(ctx, many...))
	require.Len(t, consumeAll(t, c, bigrecSmall, len(many)), len(many))
}

// TestConsumerAssignUntil: partitions assigned with an end are read up to
// it, records written later are not, and Poll then says io.EOF; also for
// an empty partition (which would otherwise wait forever) and a start at
// a time after the last record. A start beyond the end still reports
// OutOfRange.
func TestConsumerAssignUntil(t *testing.T) {
	untilName := fresh("until")
	createTopic(t, untilName, 2, nil)
	c := newClient(t)
	ctx := t.Context()
	p, err := c.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	defer p.Close(ctx)
	var recs []*client.Record
	for i := range 25 {
		recs = append(recs, &client.Record{Topic: untilName, Partition: 0, Value: fmt.Append(nil, i)})
	}
	require.NoError(t, p.ProduceSync(ctx, recs...)) // partition 1 stays empty

	read := func(from client.Offset) ([]*client.Record, error) {
		cs, err := c.NewConsumer(client.WithFetchMaxBytes(64))
		require.NoError(t, err)
		defer cs.Close()
		for part := range int32(2) {
			require.NoError(t, cs.AssignUntil(ctx, untilName, part, from, client.Latest()))
		}
		// Written after the ends were resolved: not read.
		require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: untilName, Partition: 0, Value: []byte("later")}))
		require.NoError(t, p.ProduceSync(ctx, &client.Record{Topic: untilName, Partition: 1, Value: []byte("later")}))
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		var out []*client.Record
		for {
			rs, err := cs.Poll(pctx)
			if err != nil {
				return out, err
			}
			out = append(out, rs...)
		}
	}
	got, err := read(client.Earliest())
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, 25)
	for i, r := range got {
		require.Equal(t, int64(i), r.Offset)
	}
	// The ends move with what was written: the two "later" records are
	// read this time, nothing after.
	got, err = read(client.Earliest())
	require.ErrorIs(t, err, io.EOF)
	require.Len(t, got, 27)

	// A start after the last record: nothing to read, and no wait.
	got, err = read(client.AtTime(time.Now().Add(time.Hour)))
	require.ErrorIs(t, err, io.EOF)
	require.Empty(t, got)

	cs, err := c.NewConsumer()
	require.NoError(t, err)
	defer cs.Close()
	require.NoError(t, cs.AssignUntil(ctx, untilName, 0, client.At(500), client.Latest()))
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = cs.Poll(pctx)
	require.Equal(t, connect.CodeOutOfRange, connect.CodeOf(err), "%v", err)
}
