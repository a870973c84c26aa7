package kafka_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/dataplane/kafka"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// TestFetchQuotaThrottles (KIP-219): a fetch that finds its tenant's
// fetch quota in debt partway through is answered with what it read and
// the throttle time, and the broker then reads nothing more from that
// connection until the throttle time has passed.
func TestFetchQuotaThrottles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const name = "kafka-fetchq"
	tn, err := cluster.SignUp(ctx, "fetchq@example.com", name, "")
	if err != nil {
		t.Fatal(err)
	}
	op := sluicev1connect.NewOperatorServiceClient(h2c.Client(), cluster.Endpoint, connect.WithInterceptors(tenants.Bearer(cluster.OperatorToken)))
	rate := int64(8 << 10)
	if _, err := op.UpdateTenant(ctx, connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: tn.ID,
		Overrides: &sluicev1.LimitOverrides{FetchBytesPerSec: &rate}})); err != nil {
		t.Fatal(err)
	}
	cl := clientAs(t, plain.Auth{User: name, Pass: tn.APIKey}.AsMechanism())
	adm := kadm.NewClient(cl)
	// Four partitions over three brokers: one broker leads two.
	createTopic(t, adm, "throttled", 4)
	value := bytes.Repeat([]byte("x"), 1000)
	var recs []*kgo.Record
	for p := range int32(4) {
		for range 200 {
			recs = append(recs, &kgo.Record{Topic: "throttled", Partition: p, Value: value})
		}
	}
	prod := clientAs(t, plain.Auth{User: name, Pass: tn.APIKey}.AsMechanism(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, "throttled")
	if err != nil {
		t.Fatal(err)
	}
	led := map[int32][]int32{}
	for _, p := range md.Topics["throttled"].Partitions.Sorted() {
		led[p.Leader] = append(led[p.Leader], p.Partition)
	}
	var leader int32 = -1
	for id, ps := range led {
		if len(ps) >= 2 {
			leader = id
		}
	}
	var addr string
	for _, b := range md.Brokers {
		if b.NodeID == leader {
			addr = fmt.Sprintf("%s:%d", b.Host, b.Port)
		}
	}
	rc := kafka.DialRaw(t, addr)
	if err := rc.Login(name, tn.APIKey); err != nil {
		t.Fatal(err)
	}
	// A partition's first read (a batch of ~10 KB, more than a second of
	// the quota) puts the tenant in debt, and the second is refused.
	fetch := kmsg.NewPtrFetchRequest()
	fetch.MaxWaitMillis, fetch.MaxBytes = 100, 4<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic, ft.TopicID = "throttled", md.Topics["throttled"].ID
	for _, p := range led[leader][:2] {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch = p, 1<<20, -1
		ft.Partitions = append(ft.Partitions, fp)
	}
	fetch.Topics = append(fetch.Topics, ft)
	var throttle time.Duration
	var answered time.Time
	testenv.Wait(t, 30*time.Second, "a fetch answered with a throttle time", func() error {
		res, err := rc.RoundTrip(12, fetch)
		answered = time.Now()
		if err != nil {
			return err
		}
		fr := res.(*kmsg.FetchResponse)
		if fr.ThrottleMillis <= 0 {
			return fmt.Errorf("throttle time %d ms", fr.ThrottleMillis)
		}
		read := 0
		for _, p := range fr.Topics[0].Partitions {
			read += len(p.RecordBatches)
		}
		if read == 0 {
			t.Fatal("a throttled fetch dropped what it read")
		}
		throttle = time.Duration(fr.ThrottleMillis) * time.Millisecond
		return nil
	})
	// Muted: the next request, sent at once, is answered about the
	// throttle time after the throttled answer (seconds; unmuted, a
	// round trip of milliseconds). Half of it at least: the mute starts
	// when the answer is written, and a loaded machine may take a while to
	// deliver it and send the next request.
	if _, err := rc.RoundTrip(3, kmsg.NewPtrApiVersionsRequest()); err != nil {
		t.Fatal(err)
	}
	d := time.Since(answered)
	if d < throttle/2 {
		t.Fatalf("the next request was answered %v after the throttled fetch's answer, within half its %v throttle", d, throttle)
	}
	t.Logf("throttled %v; the next request answered %v after the throttled answer", throttle, d)
}
