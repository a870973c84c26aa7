package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	franzplain "github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// kafkaRecord is a record a Kafka client produced, as the test expects to
// read it back: at Partition and Offset once the producer said where it
// went (-1 before).
type kafkaRecord struct {
	Key, Value, Header string // the header is "i" = Header
	TimeMs             int64  // the timestamp, in Kafka's milliseconds
	Partition          int32
	Offset             int64
}

// kafkaRecords makes n records, record i with key "key-<i%50>", value
// "<prefix>-value-<i>", header i=<i> and timestamp base+i ms.
func kafkaRecords(prefix string, n int, base time.Time) []kafkaRecord {
	recs := make([]kafkaRecord, n)
	for i := range recs {
		recs[i] = kafkaRecord{
			Key: fmt.Sprintf("key-%d", i%50), Value: fmt.Sprintf("%s-value-%d", prefix, i), Header: strconv.Itoa(i),
			TimeMs: base.UnixMilli() + int64(i), Partition: -1, Offset: -1,
		}
	}
	return recs
}

// TestKafkaGoClients: Kafka clients that share no code with Sluice (or
// with franz-go, which dataplane/kafka's own tests use) produce to and
// read from a three-broker cluster's Kafka listeners, over TLS with SASL
// PLAIN (the tenant's name and an API key), on topics the Sluice test
// helper created (RF 3, min ISR 2), without consumer groups (readers are
// assigned partitions; TestKafkaGroupMembersKilled has the groups):
//
//   - IBM/sarama: an idempotent SyncProducer (acks all, one request in
//     flight) writes 10,000 keyed records with a header each, zstd; its
//     Consumer reads every partition from the oldest offset and gets
//     each record at the partition and offset the producer was told, with
//     its key, value, header and timestamp; ClusterAdmin.ListTopics lists
//     the topic; a wrong password is a SASL authentication failure.
//   - segmentio/kafka-go: a Writer (hash balancer, acks all, lz4) writes
//     10,000 such records, a Reader per partition (no GroupID) reads them
//     back the same way; Client.ListOffsets and Conn.ReadOffsets agree
//     with what was written.
//   - kafkajs 2.2.4 under node (npm ci from e2e/testdata/kafkajs's
//     lock file; the CA from c.CAFile): an idempotent producer writes
//     1,000 records with a header, uncompressed (kafkajs has no lz4 or
//     zstd codec of its own), admin.fetchTopicOffsets sums their end
//     offsets to 1,000, a kafkajs consumer group reads all 1,000, and
//     sarama reads them back; kafkajs's transactional producer commits
//     two records with a group's offset (sendOffsets) and aborts one,
//     and sarama's read_committed consumer reads the two, the group's
//     offset the committed one. Skipped when node or npm is missing.
//
// The clients log at debug level into buffers, and the brokers at debug
// level too; a failing subtest prints its client's log and every broker's
// Kafka listener lines.
//
// It runs on TestKafkaListener's cluster (one cluster start for both).
func kafkaGoClients(t *testing.T, c *testcluster.Cluster) {
	bootstrap := c.KafkaBootstrap()
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(c.CA.CertPEM()))
	tlsCfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}

	// sarama logs through package globals: set once, before any subtest
	// starts a sarama client.
	saramaLog := &syncBuffer{}
	sarama.Logger = log.New(saramaLog, "[sarama] ", log.Ltime|log.Lmicroseconds)
	t.Cleanup(func() {
		// Registered after Start, so it runs before the cluster's
		// cleanup (last in, first out), whose log tails follow it.
		if t.Failed() {
			logKafkaListener(t, c)
		}
	})

	t.Run("sarama", func(t *testing.T) {
		defer dumpOnFailure(t, "sarama", saramaLog)
		const tenant, topic, n = "sarama", "sarama-records", 10000
		tc := c.NewClient(t, tenant, topic, 3, 2)
		cfg := saramaConfig(tlsCfg, tenant, tc.APIKey)

		pcfg := saramaConfig(tlsCfg, tenant, tc.APIKey)
		pcfg.Producer.Idempotent = true
		pcfg.Net.MaxOpenRequests = 1
		pcfg.Producer.RequiredAcks = sarama.WaitForAll
		pcfg.Producer.Return.Successes = true
		pcfg.Producer.Compression = sarama.CompressionZSTD
		pcfg.Producer.Flush.Frequency = 5 * time.Millisecond
		pcfg.Producer.Flush.Messages = 1000
		prod, err := sarama.NewSyncProducer(bootstrap, pcfg)
		require.NoError(t, err)
		recs := kafkaRecords("sarama", n, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
		msgs := make([]*sarama.ProducerMessage, n)
		for i, r := range recs {
			msgs[i] = &sarama.ProducerMessage{
				Topic: topic, Key: sarama.StringEncoder(r.Key), Value: sarama.StringEncoder(r.Value),
				Headers:   []sarama.RecordHeader{{Key: []byte("i"), Value: []byte(r.Header)}},
				Timestamp: time.UnixMilli(r.TimeMs),
			}
		}
		start := time.Now()
		err = prod.SendMessages(msgs)
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) {
			t.Fatalf("%d of %d records not produced; first: %v", len(perrs), n, perrs[0].Err)
		}
		require.NoError(t, err)
		require.NoError(t, prod.Close())
		t.Logf("sarama produced %d records in %v", n, time.Since(start).Round(time.Millisecond))
		for i, m := range msgs {
			recs[i].Partition, recs[i].Offset = m.Partition, m.Offset
		}
		byPartition := checkProducedDense(t, recs)

		client, err := sarama.NewClient(bootstrap, cfg)
		require.NoError(t, err)
		defer client.Close()
		got := saramaConsume(t, client, topic, []int32{0, 1, 2})
		for p, want := range byPartition {
			require.Len(t, got[p], len(want), "partition %d", p)
			for i, w := range want {
				m := got[p][i]
				require.Equal(t, w, kafkaRecord{
					Key: string(m.Key), Value: string(m.Value), Header: saramaHeader(m.Headers, "i"),
					TimeMs: m.Timestamp.UnixMilli(), Partition: m.Partition, Offset: m.Offset,
				}, "partition %d record %d (headers %d)", p, i, len(m.Headers))
			}
		}

		adm, err := sarama.NewClusterAdmin(bootstrap, cfg)
		require.NoError(t, err)
		defer adm.Close()
		topics, err := adm.ListTopics()
		require.NoError(t, err)
		require.Contains(t, topics, topic)
		require.EqualValues(t, 3, topics[topic].NumPartitions)
		require.EqualValues(t, 3, topics[topic].ReplicationFactor)

		// OAUTHBEARER: the tenant's token instead of a key.
		ocfg := saramaConfig(tlsCfg, tenant, "")
		ocfg.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		ocfg.Net.SASL.TokenProvider = staticToken(tc.Token())
		oadm, err := sarama.NewClusterAdmin(bootstrap, ocfg)
		require.NoError(t, err)
		defer oadm.Close()
		topics, err = oadm.ListTopics()
		require.NoError(t, err)
		require.Contains(t, topics, topic, "listed with OAUTHBEARER")

		bad := saramaConfig(tlsCfg, tenant, tc.APIKey[:len(tc.APIKey)-1]+flip(tc.APIKey[len(tc.APIKey)-1]))
		bad.Metadata.Retry.Max = 0
		_, err = sarama.NewClient(bootstrap, bad)
		require.ErrorIs(t, err, sarama.ErrSASLAuthenticationFailed)
	})

	t.Run("kafka-go", func(t *testing.T) {
		kgLog := &syncBuffer{}
		defer dumpOnFailure(t, "kafka-go", kgLog)
		logger := kafkago.LoggerFunc(func(f string, args ...any) { fmt.Fprintf(kgLog, time.Now().Format("15:04:05.000000 ")+f+"\n", args...) })
		errLogger := kafkago.LoggerFunc(func(f string, args ...any) {
			fmt.Fprintf(kgLog, time.Now().Format("15:04:05.000000 ")+"ERROR "+f+"\n", args...)
		})
		const tenant, topic, n = "kafkago", "kafkago-records", 10000
		tc := c.NewClient(t, tenant, topic, 3, 2)
		mech := plain.Mechanism{Username: tenant, Password: tc.APIKey}
		transport := &kafkago.Transport{TLS: tlsCfg.Clone(), SASL: mech, ClientID: "sluice-e2e-kafka-go", DialTimeout: 10 * time.Second}
		defer transport.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()

		recs := kafkaRecords("kafkago", n, time.Now().Add(-time.Hour).Truncate(time.Millisecond))
		var mu sync.Mutex
		var completionErrs []error
		w := &kafkago.Writer{
			Addr: kafkago.TCP(bootstrap...), Topic: topic, Balancer: &kafkago.Hash{},
			RequiredAcks: kafkago.RequireAll, Compression: kafkago.Lz4,
			BatchSize: 1000, BatchTimeout: 5 * time.Millisecond, WriteTimeout: 30 * time.Second,
			Transport: transport, Logger: logger, ErrorLogger: errLogger,
			Completion: func(ms []kafkago.Message, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					completionErrs = append(completionErrs, err)
					return
				}
				for _, m := range ms {
					i := m.WriterData.(int)
					recs[i].Partition, recs[i].Offset = int32(m.Partition), m.Offset
				}
			},
		}
		msgs := make([]kafkago.Message, n)
		for i, r := range recs {
			msgs[i] = kafkago.Message{
				Key: []byte(r.Key), Value: []byte(r.Value), Time: time.UnixMilli(r.TimeMs),
				Headers: []kafkago.Header{{Key: "i", Value: []byte(r.Header)}}, WriterData: i,
			}
		}
		start := time.Now()
		require.NoError(t, w.WriteMessages(ctx, msgs...))
		require.NoError(t, w.Close())
		t.Logf("kafka-go wrote %d records in %v", n, time.Since(start).Round(time.Millisecond))
		mu.Lock()
		require.Empty(t, completionErrs)
		mu.Unlock()
		byPartition := checkProducedDense(t, recs)

		// The end offsets, by Client.ListOffsets (the protocol package)
		// and by a Conn to partition 0's leader (the older API the Reader
		// uses).
		kc := &kafkago.Client{Addr: kafkago.TCP(bootstrap...), Transport: transport, Timeout: 30 * time.Second}
		lo, err := kc.ListOffsets(ctx, &kafkago.ListOffsetsRequest{Topics: map[string][]kafkago.OffsetRequest{topic: {
			kafkago.FirstOffsetOf(0), kafkago.LastOffsetOf(0), kafkago.FirstOffsetOf(1), kafkago.LastOffsetOf(1),
			kafkago.FirstOffsetOf(2), kafkago.LastOffsetOf(2),
		}}})
		require.NoError(t, err)
		require.Len(t, lo.Topics[topic], 3)
		for _, po := range lo.Topics[topic] {
			require.NoError(t, po.Error, "partition %d", po.Partition)
			require.Zero(t, po.FirstOffset, "partition %d", po.Partition)
			require.EqualValues(t, len(byPartition[int32(po.Partition)]), po.LastOffset, "partition %d", po.Partition)
		}
		dialer := &kafkago.Dialer{Timeout: 10 * time.Second, TLS: tlsCfg.Clone(), SASLMechanism: mech, ClientID: "sluice-e2e-kafka-go"}
		conn, err := dialer.DialLeader(ctx, "tcp", bootstrap[0], topic, 0)
		require.NoError(t, err)
		first, last, err := conn.ReadOffsets()
		require.NoError(t, conn.Close())
		require.NoError(t, err)
		require.Zero(t, first)
		require.EqualValues(t, len(byPartition[0]), last)

		for p, want := range byPartition {
			r := kafkago.NewReader(kafkago.ReaderConfig{
				Brokers: bootstrap, Topic: topic, Partition: int(p), Dialer: dialer,
				MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 500 * time.Millisecond,
				Logger: logger, ErrorLogger: errLogger,
			})
			for i, w := range want {
				m, err := r.ReadMessage(ctx)
				require.NoError(t, err, "partition %d after %d of %d records", p, i, len(want))
				var h string
				if len(m.Headers) == 1 && m.Headers[0].Key == "i" {
					h = string(m.Headers[0].Value)
				}
				require.Equal(t, w, kafkaRecord{
					Key: string(m.Key), Value: string(m.Value), Header: h,
					TimeMs: m.Time.UnixMilli(), Partition: int32(m.Partition), Offset: m.Offset,
				}, "partition %d record %d (headers %v)", p, i, m.Headers)
			}
			require.NoError(t, r.Close())
		}
	})

	t.Run("kafkajs", func(t *testing.T) {
		node, nerr := exec.LookPath("node")
		npm, perr := exec.LookPath("npm")
		if nerr != nil || perr != nil {
			t.Skipf("kafkajs needs node and npm: %v %v", nerr, perr)
		}
		jsLog := &syncBuffer{}
		defer dumpOnFailure(t, "kafkajs", jsLog)
		defer dumpOnFailure(t, "sarama (reading kafkajs's records back; shared with the sarama subtest)", saramaLog)
		const tenant, topic, n = "kafkajs", "kafkajs-records", 1000
		tc := c.NewClient(t, tenant, topic, 3, 2)
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
		defer cancel()

		// npm ci in a copy: installs exactly the lock file's kafkajs from
		// the npm registry, nothing into the repository.
		dir := t.TempDir()
		for _, f := range []string{"package.json", "package-lock.json", "produce.js"} {
			b, err := os.ReadFile(filepath.Join("testdata", "kafkajs", f))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
		start := time.Now()
		install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		install.Dir = dir
		install.Env = append(os.Environ(), "npm_config_update_notifier=false")
		out, err := install.CombinedOutput()
		require.NoError(t, err, "npm ci:\n%s", out)
		t.Logf("npm ci took %v", time.Since(start).Round(time.Millisecond))

		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		txnTopic := topic + "-txn"
		admCl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap...), kgo.DialTLSConfig(tlsCfg.Clone()),
			kgo.SASL(franzplain.Auth{User: tenant, Pass: tc.APIKey}.AsMechanism()))
		require.NoError(t, err)
		defer admCl.Close()
		adm := kadm.NewClient(admCl)
		created, err := adm.CreateTopic(ctx, 1, 3, nil, txnTopic)
		require.NoError(t, err)
		require.NoError(t, created.Err)
		waitKafkaLeaders(t, ctx, adm, txnTopic, 1)
		run := exec.CommandContext(ctx, node, "produce.js", strings.Join(bootstrap, ","), c.CAFile, topic, strconv.Itoa(n), strconv.FormatInt(base.UnixMilli(), 10), txnTopic)
		run.Dir = dir
		// The producer logs in with PLAIN, the admin client with
		// OAUTHBEARER and the tenant's JWT.
		run.Env = append(os.Environ(), "SLUICE_KAFKA_USER="+tenant, "SLUICE_KAFKA_PASSWORD="+tc.APIKey, "SLUICE_KAFKA_TOKEN="+tc.Token())
		var stdout bytes.Buffer
		run.Stdout, run.Stderr = &stdout, jsLog
		start = time.Now()
		require.NoError(t, run.Run(), "node produce.js: %s", stdout.String())
		t.Logf("kafkajs produced %d records in %v", n, time.Since(start).Round(time.Millisecond))
		var res struct {
			Produced  int
			Sum       int
			GroupRead int `json:"groupRead"`
			Offsets   []struct {
				Partition  int32
				High, Low  string
				OffsetText string `json:"offset"`
			}
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "%s", stdout.String())
		require.Equal(t, n, res.Produced)
		require.Equal(t, n, res.Sum, "end offsets %+v", res.Offsets)
		require.Len(t, res.Offsets, 3)
		require.Equal(t, n, res.GroupRead, "records kafkajs's consumer group read")

		// kafkajs's transactions: read_committed sees the committed
		// transaction's two records only; the offset it committed is the
		// group's.
		rc := saramaConfig(tlsCfg, tenant, tc.APIKey)
		rc.Consumer.IsolationLevel = sarama.ReadCommitted
		rcClient, err := sarama.NewClient(bootstrap, rc)
		require.NoError(t, err)
		defer rcClient.Close()
		rcConsumer, err := sarama.NewConsumerFromClient(rcClient)
		require.NoError(t, err)
		defer rcConsumer.Close()
		pc, err := rcConsumer.ConsumePartition(txnTopic, 0, sarama.OffsetOldest)
		require.NoError(t, err)
		defer pc.Close()
		var txnValues []string
		for len(txnValues) < 2 {
			select {
			case m := <-pc.Messages():
				txnValues = append(txnValues, string(m.Value))
			case cerr := <-pc.Errors():
				t.Fatalf("read_committed consume of %s: %v", txnTopic, cerr)
			case <-ctx.Done():
				t.Fatalf("read_committed consume of %s: %v after %v", txnTopic, ctx.Err(), txnValues)
			}
		}
		select {
		case m := <-pc.Messages():
			t.Fatalf("read_committed read %q too", m.Value)
		case <-time.After(time.Second): // window: nothing more
		}
		require.Equal(t, []string{"committed-1", "committed-2"}, txnValues)
		adminCl, err := sarama.NewClusterAdminFromClient(rcClient)
		require.NoError(t, err)
		offs, err := adminCl.ListConsumerGroupOffsets(topic+"-txn-g", map[string][]int32{topic: {0}})
		require.NoError(t, err)
		require.EqualValues(t, 1, offs.Blocks[topic][0].Offset, "the offset kafkajs committed in its transaction")

		// What kafkajs wrote, read back by sarama: every record once, with
		// its key, header and timestamp, a key's records in the order sent.
		client, err := sarama.NewClient(bootstrap, saramaConfig(tlsCfg, tenant, tc.APIKey))
		require.NoError(t, err)
		defer client.Close()
		got := saramaConsume(t, client, topic, []int32{0, 1, 2})
		want := kafkaRecords("kafkajs", n, base)
		seen := make([]bool, n)
		keyPartition := map[string]int32{}
		lastOfKey := map[string]int{}
		total := 0
		for p, ms := range got {
			total += len(ms)
			for _, m := range ms {
				i, err := strconv.Atoi(strings.TrimPrefix(string(m.Value), "kafkajs-value-"))
				require.NoError(t, err, "value %q", m.Value)
				require.True(t, i >= 0 && i < n && !seen[i], "value %q read twice or unexpected", m.Value)
				seen[i] = true
				w := want[i]
				require.Equal(t, kafkaRecord{Key: w.Key, Value: w.Value, Header: w.Header, TimeMs: w.TimeMs},
					kafkaRecord{Key: string(m.Key), Value: string(m.Value), Header: saramaHeader(m.Headers, "i"), TimeMs: m.Timestamp.UnixMilli()},
					"partition %d offset %d", p, m.Offset)
				if kp, ok := keyPartition[w.Key]; ok {
					require.Equal(t, kp, p, "key %s on two partitions", w.Key)
					require.Greater(t, i, lastOfKey[w.Key], "key %s out of order", w.Key)
				}
				keyPartition[w.Key], lastOfKey[w.Key] = p, i
			}
		}
		require.Equal(t, n, total)
	})
}

// saramaConfig is a sarama client's configuration for tenant with an API
// key: SASL PLAIN (SaslHandshake v1 and SaslAuthenticate) over TLS.
func saramaConfig(tlsCfg *tls.Config, tenant, apiKey string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "sluice-e2e-sarama"
	cfg.Net.TLS.Enable = true
	cfg.Net.TLS.Config = tlsCfg.Clone()
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	cfg.Net.SASL.User, cfg.Net.SASL.Password = tenant, apiKey
	cfg.Consumer.Return.Errors = true
	return cfg
}

// saramaConsume reads every record of the partitions of topic with
// sarama's Consumer, from the oldest offset to the newest the client
// lists when it starts, without a consumer group.
func saramaConsume(t *testing.T, client sarama.Client, topic string, partitions []int32) map[int32][]*sarama.ConsumerMessage {
	t.Helper()
	consumer, err := sarama.NewConsumerFromClient(client)
	require.NoError(t, err)
	defer consumer.Close()
	out := map[int32][]*sarama.ConsumerMessage{}
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		require.NoError(t, err, "partition %d", p)
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		require.NoError(t, err, "partition %d", p)
		require.Zero(t, oldest, "partition %d", p)
		if end == 0 {
			out[p] = nil
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		require.NoError(t, err, "partition %d", p)
		timeout := time.NewTimer(2 * time.Minute)
		for int64(len(out[p])) < end {
			select {
			case m := <-pc.Messages():
				out[p] = append(out[p], m)
			case cerr := <-pc.Errors():
				t.Fatalf("consume partition %d after %d of %d records: %v", p, len(out[p]), end, cerr)
			case <-timeout.C:
				t.Fatalf("consume partition %d: %d of %d records in 2 minutes", p, len(out[p]), end)
			}
		}
		timeout.Stop()
		require.NoError(t, pc.Close())
	}
	return out
}

// saramaHeader is the value of the one header a record should have, key;
// "" when the record has another header or more than one.
func saramaHeader(hs []*sarama.RecordHeader, key string) string {
	if len(hs) != 1 || string(hs[0].Key) != key {
		return ""
	}
	return string(hs[0].Value)
}

// checkProducedDense checks that the producer was told every record's
// partition and offset, that each partition's offsets run from 0 with
// neither gaps nor repeats (no duplicates, no losses as far as the
// producer knows), that a key's records went to one partition in the
// order they were sent; it returns the records by partition, in offset
// order.
func checkProducedDense(t *testing.T, recs []kafkaRecord) map[int32][]kafkaRecord {
	t.Helper()
	byPartition := map[int32][]kafkaRecord{}
	keyPartition := map[string]int32{}
	for i, r := range recs {
		require.True(t, r.Partition >= 0 && r.Offset >= 0, "record %d: no partition or offset (%d, %d)", i, r.Partition, r.Offset)
		if kp, ok := keyPartition[r.Key]; ok {
			require.Equal(t, kp, r.Partition, "record %d: key %s on two partitions", i, r.Key)
		}
		keyPartition[r.Key] = r.Partition
		byPartition[r.Partition] = append(byPartition[r.Partition], r)
	}
	for p, rs := range byPartition {
		slices.SortFunc(rs, func(a, b kafkaRecord) int { return int(a.Offset - b.Offset) })
		for i, r := range rs {
			require.EqualValues(t, i, r.Offset, "partition %d: offsets %d..%d", p, rs[0].Offset, rs[len(rs)-1].Offset)
		}
		// In offset order, a key's records keep the order sent.
		last := map[string]int{}
		for _, r := range rs {
			i, _ := strconv.Atoi(r.Header)
			if l, ok := last[r.Key]; ok {
				require.Greater(t, i, l, "partition %d: key %s out of order", p, r.Key)
			}
			last[r.Key] = i
		}
	}
	require.Len(t, byPartition, 3, "50 keys over 3 partitions")
	return byPartition
}

// flip changes an API key's last character.
func flip(b byte) string {
	if b == 'a' {
		return "b"
	}
	return "a"
}

// dumpOnFailure prints the tail of a client's debug log when its subtest
// failed.
func dumpOnFailure(t *testing.T, name string, buf *syncBuffer) {
	if !t.Failed() {
		return
	}
	s := buf.String()
	const limit = 40000
	if len(s) > limit {
		s = "...\n" + s[len(s)-limit:]
	}
	t.Logf("--- %s debug log (tail):\n%s", name, s)
}

// logKafkaListener prints the last lines every broker logged about its
// Kafka listener (its attribute listener=kafka: SASL failures, and at
// debug level why it closed a connection, e.g. an API version it does not
// serve).
func logKafkaListener(t *testing.T, c *testcluster.Cluster) {
	for _, id := range c.BrokerIDs() {
		f, err := os.Open(c.Broker(id).LogPath)
		if err != nil {
			t.Logf("broker %d log: %v", id, err)
			continue
		}
		var lines []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.Contains(l, "listener=kafka") || strings.Contains(l, "Kafka") {
				lines = append(lines, l)
			}
		}
		f.Close()
		if len(lines) > 150 {
			lines = lines[len(lines)-150:]
		}
		t.Logf("--- broker %d (Kafka listener %s), its last Kafka lines:\n%s", id, c.Broker(id).KafkaAddr, strings.Join(lines, "\n"))
	}
}

// staticToken is a sarama token provider of one token.
type staticToken string

func (s staticToken) Token() (*sarama.AccessToken, error) {
	return &sarama.AccessToken{Token: string(s)}, nil
}
