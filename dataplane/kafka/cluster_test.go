package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
	"github.com/sluicemq/sluice/dataplane/broker"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/localcluster/brokernode"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// The package's tests share one in-process cluster whose brokers serve
// the Kafka protocol, and one tenant; e2e/ runs real Kafka clients
// against real processes.
var (
	cluster   *localcluster.Cluster
	tenant    localcluster.Tenant
	bootstrap []string
)

const tenantName = "kafka-tenant"

func TestMain(m *testing.M) {
	// The tests share the cluster and mostly wait on it: alone and idle,
	// six at a time ran the package in 37 s instead of 59 s (two,
	// GOMAXPROCS) for about the same CPU.
	testenv.DefaultParallel(6)
	ctx, cancel := context.WithCancel(context.Background())
	dir, err := os.MkdirTemp("", "sluice-kafka-test-")
	if err != nil {
		panic(err)
	}
	code := 1
	if err := start(ctx, dir); err != nil {
		fmt.Fprintln(os.Stderr, "start cluster:", err)
	} else {
		code = m.Run()
	}
	cancel()
	if cluster != nil {
		_ = cluster.Close()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func start(ctx context.Context, dir string) error {
	c, err := localcluster.New(ctx, localcluster.Options{
		DataDir: dir, KafkaAddr: "127.0.0.1:0",
		ControlPlane: func(cfg *controlplane.Config) {
			cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 1000, Every: time.Millisecond}
		},
		NewBroker: brokernode.New(brokernode.Options{Config: func(bc *broker.Config) {}}),
	})
	if err != nil {
		return err
	}
	cluster = c
	if err := c.StartBrokers(ctx); err != nil {
		return err
	}
	if err := c.WaitBrokers(ctx, 30*time.Second); err != nil {
		return err
	}
	if tenant, err = c.SignUp(ctx, "kafka@example.com", tenantName, "pro"); err != nil {
		return err
	}
	for _, b := range c.Brokers() {
		bootstrap = append(bootstrap, b.KafkaAddr)
	}
	return nil
}

// client is a franz-go client of the test tenant with SASL PLAIN and
// its main key.
func client(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return clientAs(t, plain.Auth{User: tenantName, Pass: tenant.APIKey}.AsMechanism(), opts...)
}

// clientAs is a franz-go client authenticated with mech only (franz-go
// uses the first of several SASL options the broker has).
func clientAs(t *testing.T, mech sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.SeedBrokers(bootstrap...),
		kgo.SASL(mech),
		kgo.RetryTimeout(20 * time.Second),
	}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates a topic through the Kafka listener and waits until
// every partition has a leader the client sees.
func createTopic(t *testing.T, adm *kadm.Client, name string, partitions int32) {
	t.Helper()
	createTopicWith(t, adm, name, partitions, nil)
}

// createTopicWith is createTopic with the topic configs configs.
func createTopicWith(t *testing.T, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateTopic(ctx, partitions, 3, configs, name)
	if err != nil || res.Err != nil {
		t.Fatalf("create topic %s: %v %v", name, err, res.Err)
	}
	for {
		md, err := adm.Metadata(ctx, name)
		if err == nil {
			if td, ok := md.Topics[name]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Leader >= 0 && p.Err == nil
				}
				if ready {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topic %s has no leaders: %v", name, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestProduceConsumeRoundTrip(t *testing.T) {
	t.Parallel()
	for codecName, codec := range map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()} {
		t.Run(codecName, func(t *testing.T) {
			t.Parallel()
			roundTrip(t, codec, fmt.Sprintf("roundtrip-%s-%d", codecName, time.Now().UnixNano()))
		})
	}
}

// roundTrip produces 2,000 records compressed with codec to a new topic
// named name, reads them back and looks offsets up by time.
func roundTrip(t *testing.T, codec kgo.CompressionCodec, name string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	createTopic(t, kadm.NewClient(client(t)), name, 3)
	prod := client(t, kgo.ProducerBatchCompression(codec), kgo.DefaultProduceTopic(name))
	const n = 2000
	base := time.Now().Truncate(time.Millisecond)
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{
			Key: fmt.Appendf(nil, "key-%d", i%50), Value: fmt.Appendf(nil, "value-%d", i),
			Headers:   []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}},
			Timestamp: base.Add(time.Duration(i) * time.Millisecond),
		})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons := client(t, kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string]*kgo.Record{}
	for len(got) < n {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll after %d records: %v", len(got), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if _, dup := got[string(r.Value)]; dup {
				t.Errorf("record %s read twice", r.Value)
			}
			got[string(r.Value)] = r
		})
	}
	for i, want := range recs {
		r := got[string(want.Value)]
		if r == nil {
			t.Fatalf("record %d not read", i)
		}
		if string(r.Key) != string(want.Key) || len(r.Headers) != 1 || string(r.Headers[0].Value) != fmt.Sprint(i) || !r.Timestamp.Equal(want.Timestamp) {
			t.Fatalf("record %d read as key %q headers %v timestamp %v; want key %q timestamp %v", i, r.Key, r.Headers, r.Timestamp, want.Key, want.Timestamp)
		}
	}
	// ListOffsets by timestamp: the first record at or after it, and
	// the record with the largest timestamp (KIP-734), each with its
	// timestamp. Timestamps grow with offsets in every partition here.
	adm := kadm.NewClient(cons)
	at := recs[n/2].Timestamp
	after, newest := map[int32]*kgo.Record{}, map[int32]*kgo.Record{}
	for _, r := range got {
		if a := after[r.Partition]; !r.Timestamp.Before(at) && (a == nil || r.Offset < a.Offset) {
			after[r.Partition] = r
		}
		if m := newest[r.Partition]; m == nil || r.Offset > m.Offset {
			newest[r.Partition] = r
		}
	}
	for _, list := range []struct {
		name string
		want map[int32]*kgo.Record
		call func() (kadm.ListedOffsets, error)
	}{
		{"after " + at.String(), after, func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), name) }},
		{"max timestamp", newest, func() (kadm.ListedOffsets, error) { return adm.ListMaxTimestampOffsets(ctx, name) }},
	} {
		lo, err := list.call()
		if err != nil {
			t.Fatal(err)
		}
		lo.Each(func(o kadm.ListedOffset) {
			want := list.want[o.Partition]
			switch {
			case o.Err != nil:
				t.Errorf("list offsets %s, partition %d: %v", list.name, o.Partition, o.Err)
			case want == nil:
				t.Errorf("list offsets %s, partition %d: no record read there", list.name, o.Partition)
			case o.Offset != want.Offset || o.Timestamp != want.Timestamp.UnixMilli():
				t.Errorf("list offsets %s, partition %d: offset %d timestamp %d, want %d and %d", list.name, o.Partition, o.Offset, o.Timestamp, want.Offset, want.Timestamp.UnixMilli())
			}
		})
	}
	ends, err := adm.ListEndOffsets(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != n {
		t.Errorf("end offsets sum to %d, want %d", total, n)
	}
}

func TestAuthRefusals(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bad, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.SASL(plain.Auth{User: tenantName, Pass: "slk_0123456789abcdef_wrong"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	_, err = kadm.NewClient(bad).ListTopics(ctx)
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
	wrongUser, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.SASL(plain.Auth{User: "someone-else", Pass: tenant.APIKey}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer wrongUser.Close()
	if _, err = kadm.NewClient(wrongUser).ListTopics(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("another tenant's name: %v, want SASL_AUTHENTICATION_FAILED", err)
	}
}

func TestOAuthBearerAndTenantScoping(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cl := clientAs(t, oauth.Auth{Token: tenant.Token}.AsMechanism())
	name := fmt.Sprintf("scoped-%d", time.Now().UnixNano())
	createTopic(t, kadm.NewClient(cl), name, 1)

	// Another tenant sees none of it.
	otherName := fmt.Sprintf("other-%d", time.Now().UnixNano())
	other, err := cluster.SignUp(ctx, "other@example.com", otherName, "pro")
	if err != nil {
		t.Fatal(err)
	}
	ocl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.SASL(plain.Auth{User: otherName, Pass: other.APIKey}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer ocl.Close()
	topics, err := kadm.NewClient(ocl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has(name) {
		t.Fatalf("another tenant lists topic %s", name)
	}
	md, err := kadm.NewClient(ocl).Metadata(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if td := md.Topics[name]; !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("another tenant's metadata of %s: %v, want UNKNOWN_TOPIC_OR_PARTITION", name, td.Err)
	}
	r := ocl.ProduceSync(ctx, &kgo.Record{Topic: name, Value: []byte("x")})
	if err := r.FirstErr(); err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC") {
		t.Fatalf("produce to another tenant's topic: %v", err)
	}
}

// TestScopes: a consume-only key reads but cannot produce; a
// produce-only key produces but cannot read.
func TestScopes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("scopes-%d", time.Now().UnixNano())
	createTopic(t, kadm.NewClient(client(t)), name, 1)
	keys := sluicev1connect.NewAPIKeyServiceClient(h2c.Client(), cluster.Endpoint, connect.WithInterceptors(tenants.Bearer(tenant.Token)))
	key := func(scope string) string {
		k, err := keys.CreateAPIKey(ctx, connect.NewRequest(&sluicev1.CreateAPIKeyRequest{Name: scope + "-only", Scopes: []string{scope}}))
		if err != nil {
			t.Fatal(err)
		}
		return k.Msg.GetSecret()
	}
	as := func(secret string, opts ...kgo.Opt) *kgo.Client {
		return clientAs(t, plain.Auth{User: tenantName, Pass: secret}.AsMechanism(), append([]kgo.Opt{kgo.DisableIdempotentWrite()}, opts...)...)
	}
	producer := as(key("produce"), kgo.RecordRetries(0))
	if err := producer.ProduceSync(ctx, &kgo.Record{Topic: name, Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatalf("produce with a produce key: %v", err)
	}
	consumer := as(key("consume"), kgo.RecordRetries(0), kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err := consumer.ProduceSync(ctx, &kgo.Record{Topic: name, Value: []byte("no")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce with a consume key: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	fs := consumer.PollFetches(ctx)
	if err := fs.Err0(); err != nil || fs.NumRecords() != 1 {
		t.Fatalf("fetch with a consume key: %v, %d records", err, fs.NumRecords())
	}
	_, err := kadm.NewClient(producer).ListEndOffsets(ctx, name)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		var se *kadm.ShardErrors
		if !errors.As(err, &se) {
			lo, _ := kadm.NewClient(producer).ListEndOffsets(ctx, name)
			if lo.Error() == nil || !errors.Is(lo.Error(), kerr.TopicAuthorizationFailed) {
				t.Fatalf("list offsets with a produce key: %v / %v, want TOPIC_AUTHORIZATION_FAILED", err, lo.Error())
			}
		}
	}
}

// TestAdminAndClusterAPIs: topic configs are described and altered,
// topics grown and deleted through kadm; DescribeCluster names the three
// brokers; OffsetForLeaderEpoch answers the log end for the current
// epoch; unknown configs are refused.
func TestAdminAndClusterAPIs(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := client(t)
	adm := kadm.NewClient(cl)
	name := fmt.Sprintf("admin-%d", time.Now().UnixNano())
	createTopic(t, adm, name, 2)

	// A topic past the plan's partitions (pro: 3,000 in all) is a policy
	// violation, not a throttle: waiting does not lift it.
	big, _ := adm.CreateTopic(ctx, 5000, 3, nil, name+"-big")
	if !errors.Is(big.Err, kerr.PolicyViolation) || !strings.Contains(big.ErrMessage, "partitions limit reached") {
		t.Fatalf("a topic over the partitions limit: %v (%s), want POLICY_VIOLATION", big.Err, big.ErrMessage)
	}

	rc, err := adm.DescribeTopicConfigs(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On(name, nil)
	if err != nil || cfg.Err != nil {
		t.Fatalf("describe configs: %v %v", err, cfg.Err)
	}
	values := map[string]string{}
	for _, c := range cfg.Configs {
		values[c.Key] = c.MaybeValue()
	}
	if values["cleanup.policy"] != "delete" || values["min.insync.replicas"] == "" {
		t.Fatalf("configs: %v", values)
	}
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kadm.StringPtr("3600000")}}, name)
	if err != nil || ar[0].Err != nil {
		t.Fatalf("alter retention.ms: %v %v", err, ar)
	}
	rc, _ = adm.DescribeTopicConfigs(ctx, name)
	cfg, _ = rc.On(name, nil)
	for _, c := range cfg.Configs {
		if c.Key == "retention.ms" && c.MaybeValue() != "3600000" {
			t.Fatalf("retention.ms after the alter: %s", c.MaybeValue())
		}
	}
	ar, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "segment.bytes", Value: kadm.StringPtr("1")}}, name)
	if err != nil || !errors.Is(ar[0].Err, kerr.InvalidConfig) {
		t.Fatalf("an unknown config: %v %v, want INVALID_CONFIG", err, ar)
	}

	if _, err := adm.CreatePartitions(ctx, 2, name); err != nil {
		t.Fatal(err)
	}
	testenv.Wait(t, 30*time.Second, "4 partitions", func() error {
		md, err := adm.Metadata(ctx, name)
		if err != nil {
			return err
		}
		if n := len(md.Topics[name].Partitions); n != 4 {
			return fmt.Errorf("%d partitions", n)
		}
		return nil
	})

	dc := kmsg.NewPtrDescribeClusterRequest()
	dres, err := dc.RequestWith(ctx, cl)
	if err != nil || dres.ErrorCode != 0 || len(dres.Brokers) != 3 {
		t.Fatalf("describe cluster: %v %+v", err, dres)
	}

	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: name, Partition: 0, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	md, err := adm.Metadata(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	p0 := md.Topics[name].Partitions[0]
	oe := kmsg.NewPtrOffsetForLeaderEpochRequest()
	oe.ReplicaID = -1
	rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
	rt.Topic = name
	rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, p0.LeaderEpoch, p0.LeaderEpoch
	rt.Partitions = append(rt.Partitions, rp)
	oe.Topics = append(oe.Topics, rt)
	ores, err := oe.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	got := ores.Topics[0].Partitions[0]
	ends, _ := adm.ListEndOffsets(ctx, name)
	end, _ := ends.Lookup(name, 0)
	if got.ErrorCode != 0 || got.LeaderEpoch != p0.LeaderEpoch || got.EndOffset != end.Offset {
		t.Fatalf("offset for leader epoch %d: %+v, want the log end %d", p0.LeaderEpoch, got, end.Offset)
	}

	dr, err := adm.DeleteTopics(ctx, name)
	if err != nil || dr[name].Err != nil {
		t.Fatalf("delete: %v %v", err, dr)
	}
}
