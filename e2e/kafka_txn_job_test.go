package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl/plain"
)

// runKafkaTxnJob is runTxnJob as a Kafka client (cfg.Kafka set): a
// franz-go GroupTransactSession, a classic group member (static, its
// instance id the transactional id, so that a restarted incarnation takes
// its place without waiting for the killed one's session to expire) whose
// offsets commit in the producer's transaction. Per poll of at most 20
// records, one transaction writes every polled value transformed ("out-" +
// value, keyed by the value, with the txn headers) to Out and commits the
// poll's offsets; the session aborts and rewinds to the committed offsets
// when a transaction fails or the group rebalances. It runs until it is
// killed; it prints one line per committed transaction, and exits 3 when
// it is fenced (which only a newer incarnation may do).
func runKafkaTxnJob(cfg txnJobConfig) int {
	ctx := context.Background()
	var opts []kgo.Opt
	if cfg.BeforeKIP890p2 {
		vs := kversion.Stable()
		vs.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
		vs.SetMaxKeyVersion(kmsg.EndTxn.Int16(), 4)
		vs.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 4)
		opts = append(opts, kgo.MaxVersions(vs))
	}
	sess, err := kgo.NewGroupTransactSession(append(opts,
		kgo.SeedBrokers(cfg.Kafka...),
		kgo.SASL(plain.Auth{User: cfg.Tenant, Pass: cfg.APIKey}.AsMechanism()),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(10*time.Second),
		kgo.ConsumerGroup(cfg.Group), kgo.ConsumeTopics(cfg.In),
		kgo.InstanceID(cfg.TransactionalID),
		kgo.SessionTimeout(6*time.Second), kgo.RebalanceTimeout(10*time.Second),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RetryTimeout(time.Minute),
	)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafka txn job: session:", err)
		return 2
	}
	defer sess.Close()
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Incarnation)))
	for seq := 0; ; seq++ {
		fs := sess.PollRecords(ctx, 20)
		fs.EachError(func(topic string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "kafka txn job: fetch %s/%d: %v\n", topic, p, err)
		})
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		id := fmt.Sprintf("%d-%d", cfg.Incarnation, seq)
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "kafka txn job: begin:", err)
			return 3
		}
		n := strconv.Itoa(len(recs))
		for _, r := range recs {
			sess.Produce(ctx, &kgo.Record{Topic: cfg.Out, Key: r.Value, Value: append([]byte("out-"), r.Value...),
				Headers: []kgo.RecordHeader{{Key: txnHeaderID, Value: []byte(id)}, {Key: txnHeaderCount, Value: []byte(n)}}},
				func(_ *kgo.Record, err error) {
					if err != nil {
						fmt.Fprintf(os.Stderr, "kafka txn job: produce in %s: %v\n", id, err)
					}
				})
		}
		time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond) // pacing: the transaction stays open a little, so that kills land inside transactions too
		committed, err := sess.End(ctx, kgo.TryCommit)
		switch {
		case errors.Is(err, kerr.ProducerFenced):
			fmt.Fprintln(os.Stderr, "kafka txn job: fenced:", err)
			return 3
		case err != nil:
			fmt.Fprintf(os.Stderr, "kafka txn job: end %s: %v\n", id, err)
		case committed:
			fmt.Printf("COMMIT %s %d\n", id, len(recs))
		default:
			fmt.Fprintf(os.Stderr, "kafka txn job: %s aborted\n", id)
		}
	}
}
