package kafka_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/internal/testenv"
)

// TestTransactionsSarama: sarama's transactional producer (its own
// versions, all before KIP-890 part 2: AddPartitionsToTxn, EndTxn keeping
// the epoch, AddOffsetsToTxn and TxnOffsetCommit for a group's offsets):
// a read_committed consumer reads the committed transactions once and the
// aborted one never, and the offsets committed in the transactions are
// the group's only once their transaction commits. The group has a live
// member meanwhile (a franz-go consumer of another topic): sarama commits
// as no member (generation -1, no member id), which the group does not
// fence, as in Kafka.
func TestTransactionsSarama(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t))
	topic := fmt.Sprintf("txn-sarama-%d", time.Now().UnixNano())
	source, group := topic+"-source", topic+"-g"
	createTopic(t, adm, topic, 2)
	createTopic(t, adm, source, 1)

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "sluice-sarama-txn"
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	cfg.Net.SASL.User, cfg.Net.SASL.Password = tenantName, tenant.APIKey
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = topic + "-producer"
	cfg.Producer.Transaction.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.Transaction.Retry.Max = 200 // while the coordinator is found or moves
	p, err := sarama.NewSyncProducer(bootstrap, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.True(t, p.IsTransactional())

	// Three transactions; each also commits the group's offset of the
	// source topic's partition 0 at its last key + 1.
	txn := func(from, n int, commit bool) {
		t.Helper()
		require.NoError(t, p.BeginTxn())
		for i := from; i < from+n; i++ {
			_, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: int32(i % 2), Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.StringEncoder("v")})
			require.NoError(t, err)
		}
		require.NoError(t, p.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{
			source: {{Partition: 0, Offset: int64(from + n)}},
		}, group))
		if commit {
			require.NoError(t, p.CommitTxn())
		} else {
			require.NoError(t, p.AbortTxn())
		}
	}
	committedOffset := func() int64 {
		offs, err := adm.FetchOffsets(ctx, group)
		require.NoError(t, err)
		o, ok := offs.Lookup(source, 0)
		if !ok {
			return -1
		}
		return o.At
	}
	// The source partition needs records for the offsets to be valid.
	seed := client(t, kgo.DefaultProduceTopic(source))
	for i := range 30 {
		require.NoError(t, seed.ProduceSync(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i))}).FirstErr())
	}

	// A live member of the group, in its stable generation.
	other := topic + "-other"
	createTopic(t, adm, other, 1)
	member := client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(other))
	go member.PollFetches(ctx)
	testenv.Wait(t, time.Minute, "the group's member in a stable generation", func() error {
		gs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		if g := gs[group]; g.State != "Stable" || len(g.Members) != 1 {
			return fmt.Errorf("group %s, %d members", g.State, len(g.Members))
		}
		return nil
	})

	txn(0, 10, true)
	require.EqualValues(t, 10, committedOffset())
	txn(10, 5, false)
	require.EqualValues(t, 10, committedOffset(), "an aborted transaction's offsets are dropped")
	txn(20, 10, true)
	require.EqualValues(t, 30, committedOffset())

	seen := map[string]int{}
	for _, r := range readAll(t, topic, kgo.ReadCommitted(), 20) {
		seen[string(r.Key)]++
	}
	require.Len(t, seen, 20)
	for k, c := range seen {
		n, _ := strconv.Atoi(k)
		require.False(t, n >= 10 && n < 20, "aborted record %s read with read_committed", k)
		require.Equal(t, 1, c, "record %s read %d times", k, c)
	}
	ds, err := adm.DescribeTransactions(ctx, topic+"-producer")
	require.NoError(t, err)
	require.NoError(t, ds[topic+"-producer"].Err)
	require.EqualValues(t, 0, ds[topic+"-producer"].ProducerEpoch, "sarama's ends keep the epoch")
}
