package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLogAppendTime: on a topic created with
// message.timestamp.type=LogAppendTime the leader stamps each batch with
// the time it appended it. Produce answers that time; every record reads
// back with it and Kafka's LogAppendTime type, whatever time its producer
// gave; ListOffsets by timestamp follows the append times. On a CreateTime
// topic Produce answers -1 and the producer's times stay.
func TestLogAppendTime(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := client(t)
	adm := kadm.NewClient(cl)
	past := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	stamped := fmt.Sprintf("append-time-%d", time.Now().UnixNano())
	createTopicWith(t, adm, stamped, 1, map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")})
	own := stamped + "-create"
	createTopic(t, adm, own, 1)

	cfgs, err := adm.DescribeTopicConfigs(ctx, stamped)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cfgs.On(stamped, nil); err != nil || !hasConfig(c.Configs, "message.timestamp.type", "LogAppendTime") {
		t.Fatalf("configs of %s: %+v %v", stamped, c.Configs, err)
	}

	// One raw produce each, for the answer's log_append_time_ms.
	produce := func(topic string) kmsg.ProduceResponseTopicPartition {
		t.Helper()
		req := produceRequest(topic, -1, 10000, kafkaBatchAt(t, []byte("raw"), past.UnixMilli()))
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		res, err := req.RequestWith(ctx, cl.Broker(int(md.Topics[topic].Partitions[0].Leader)))
		if err != nil {
			t.Fatal(err)
		}
		pr := res.Topics[0].Partitions[0]
		if pr.ErrorCode != 0 {
			t.Fatalf("produce to %s: error %d", topic, pr.ErrorCode)
		}
		return pr
	}
	before := time.Now().UnixMilli()
	pr := produce(stamped)
	after := time.Now().UnixMilli()
	if pr.LogAppendTime < before || pr.LogAppendTime > after {
		t.Fatalf("log append time %d, want within [%d, %d]", pr.LogAppendTime, before, after)
	}
	if pr := produce(own); pr.LogAppendTime != -1 {
		t.Fatalf("CreateTime topic: log append time %d, want -1", pr.LogAppendTime)
	}

	// Then franz-go's producer, with old timestamps on both topics.
	var recs []*kgo.Record
	for i := range 3 {
		recs = append(recs, &kgo.Record{Topic: stamped, Value: fmt.Appendf(nil, "v%d", i), Timestamp: past}, &kgo.Record{Topic: own, Value: fmt.Appendf(nil, "v%d", i), Timestamp: past})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	end := time.Now().UnixMilli()

	cons := client(t, kgo.ConsumeTopics(stamped, own), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []*kgo.Record
	for len(got) < 8 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll after %d records: %v", len(got), err)
		}
		got = append(got, fs.Records()...)
	}
	var last int64
	for _, r := range got {
		ts, typ := r.Timestamp.UnixMilli(), r.Attrs.TimestampType()
		switch {
		case r.Topic == own && (ts != past.UnixMilli() || typ != 0):
			t.Errorf("CreateTime record %s@%d: timestamp %d type %d, want the producer's %d, type 0", r.Value, r.Offset, ts, typ, past.UnixMilli())
		case r.Topic == stamped && typ != 1:
			t.Errorf("LogAppendTime record %s@%d: timestamp type %d, want 1", r.Value, r.Offset, typ)
		case r.Topic == stamped && r.Offset == 0 && ts != pr.LogAppendTime:
			t.Errorf("the raw record reads at %d, produce answered %d", ts, pr.LogAppendTime)
		case r.Topic == stamped && (ts < before || ts > end || ts < last):
			t.Errorf("LogAppendTime record %s@%d: timestamp %d, want within [%d, %d], at or after %d", r.Value, r.Offset, ts, before, end, last)
		}
		if r.Topic == stamped {
			last = ts
		}
	}
	lo, err := adm.ListOffsetsAfterMilli(ctx, before, stamped)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := lo.Lookup(stamped, 0); !ok || o.Err != nil || o.Offset != 0 || o.Timestamp != pr.LogAppendTime {
		t.Errorf("list offsets after %d: %+v, want offset 0 at %d (append times, not 2020's)", before, o, pr.LogAppendTime)
	}
}

func hasConfig(cs []kadm.Config, key, value string) bool {
	for _, c := range cs {
		if c.Key == key && c.Value != nil && *c.Value == value {
			return true
		}
	}
	return false
}
