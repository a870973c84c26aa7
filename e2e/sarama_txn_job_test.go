package e2e

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// runSaramaTxnJob is runTxnJob as a sarama client (cfg.Sarama): sarama's
// transactional producer and a consumer group member (static, its
// instance id the transactional id, as runKafkaTxnJob's) reading In
// read_committed, with auto-commit off: offsets commit only in the
// producer's transactions (AddOffsetsToTxn, then TxnOffsetCommit at the
// commit). sarama speaks before KIP-890 part 2 (its EndTxn is v3).
//
// Per batch of one partition's claim (up to 20 records available at
// once), one transaction writes every value transformed ("out-" + value,
// keyed by the value, with the txn headers) to Out and adds the batch's
// next offset of In; sarama's producer is one per process, so the claims'
// transactions take turns. What sarama leaves to the application, it does
// as its exactly-once example does: a transaction that fails is aborted
// (when sarama says it can be), and the records it held are read again
// from the committed offsets: the claim returns, which ends sarama's
// session, and the job builds its producer and its group member anew (the
// new producer's init bumps the epoch and settles whatever the failed
// transaction left, commit or abort, before the member reads the
// committed offsets). It runs until it is killed; it prints one line per
// committed transaction, and exits 3 when it is fenced (which only a newer
// incarnation may do).
func runSaramaTxnJob(cfg txnJobConfig) int {
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Ltime|log.Lmicroseconds)
	scfg := sarama.NewConfig()
	scfg.Version = sarama.V3_6_0_0
	scfg.ClientID = "sluice-e2e-txn-job"
	scfg.Net.SASL.Enable = true
	scfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	scfg.Net.SASL.User, scfg.Net.SASL.Password = cfg.Tenant, cfg.APIKey
	scfg.Net.MaxOpenRequests = 1
	scfg.Metadata.Retry.Max, scfg.Metadata.Retry.Backoff = 100, 100*time.Millisecond
	scfg.Producer.Idempotent = true
	scfg.Producer.RequiredAcks = sarama.WaitForAll
	scfg.Producer.Return.Successes = true
	scfg.Producer.Retry.Max, scfg.Producer.Retry.Backoff = 100, 100*time.Millisecond
	scfg.Producer.Transaction.ID = cfg.TransactionalID
	scfg.Producer.Transaction.Timeout = 10 * time.Second
	scfg.Producer.Transaction.Retry.Max, scfg.Producer.Transaction.Retry.Backoff = 200, 100*time.Millisecond
	scfg.Consumer.IsolationLevel = sarama.ReadCommitted
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	scfg.Consumer.Offsets.AutoCommit.Enable = false
	scfg.Consumer.Group.InstanceId = cfg.TransactionalID
	scfg.Consumer.Group.Session.Timeout = 6 * time.Second
	scfg.Consumer.Group.Heartbeat.Interval = time.Second
	scfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second

	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.Incarnation)))
	ctx := context.Background()
	for build := 0; ; build++ {
		if build > 0 {
			time.Sleep(200 * time.Millisecond) // backoff: the last producer or member failed
		}
		prod, err := sarama.NewSyncProducer(cfg.Kafka, scfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sarama txn job: producer:", err)
			if saramaFenced(err) {
				return 3
			}
			continue
		}
		cg, err := sarama.NewConsumerGroup(cfg.Kafka, cfg.Group, scfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sarama txn job: consumer group:", err)
			_ = prod.Close()
			continue
		}
		h := &saramaTxnHandler{cfg: cfg, prod: prod, rng: rng, build: build}
		for h.failed() == nil {
			if err := cg.Consume(ctx, []string{cfg.In}, h); err != nil && h.failed() == nil {
				fmt.Fprintln(os.Stderr, "sarama txn job: consume:", err)
				time.Sleep(100 * time.Millisecond) // backoff: the session failed
			}
		}
		fmt.Fprintln(os.Stderr, "sarama txn job: building the producer and the member anew after:", h.failed())
		if saramaFenced(h.failed()) {
			return 3
		}
		_ = cg.Close()
		_ = prod.Close()
	}
}

// saramaFenced reports whether err says a newer producer with the same
// transactional id took over.
func saramaFenced(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced)
}

// saramaTxnHandler is the job's sarama.ConsumerGroupHandler for one
// producer: its claims' transactions take turns (mu), and after one fails
// (err) none begins.
type saramaTxnHandler struct {
	cfg   txnJobConfig
	prod  sarama.SyncProducer
	build int

	mu  sync.Mutex
	rng *rand.Rand
	seq int
	err error
}

func (h *saramaTxnHandler) failed() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (*saramaTxnHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*saramaTxnHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaTxnHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		var batch []*sarama.ConsumerMessage
		select {
		case <-s.Context().Done():
			return nil
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			batch = append(batch, m)
		}
	more:
		for len(batch) < 20 {
			select {
			case m, ok := <-claim.Messages():
				if !ok {
					break more
				}
				batch = append(batch, m)
			default:
				break more
			}
		}
		if err := h.transact(batch); err != nil {
			// Returning ends the session (and every claim of it); Consume
			// returns, and the job builds anew.
			return err
		}
	}
}

// transact writes batch's values to Out and commits the offset after it,
// in one transaction.
func (h *saramaTxnHandler) transact(batch []*sarama.ConsumerMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return h.err
	}
	id := fmt.Sprintf("%d-s%d-%d", h.cfg.Incarnation, h.build, h.seq)
	h.seq++
	pacing := time.Duration(h.rng.IntN(30)) * time.Millisecond
	fail := func(what string, err error) error {
		fmt.Fprintf(os.Stderr, "sarama txn job: %s %s: %v (status %v)\n", what, id, err, h.prod.TxnStatus())
		if h.prod.TxnStatus()&sarama.ProducerTxnFlagAbortableError != 0 {
			if aerr := h.prod.AbortTxn(); aerr != nil {
				fmt.Fprintf(os.Stderr, "sarama txn job: abort %s: %v\n", id, aerr)
			} else {
				fmt.Fprintf(os.Stderr, "sarama txn job: %s aborted\n", id)
			}
		}
		h.err = fmt.Errorf("%s %s: %w", what, id, err)
		return h.err
	}
	if err := h.prod.BeginTxn(); err != nil {
		return fail("begin", err)
	}
	n := []byte(strconv.Itoa(len(batch)))
	msgs := make([]*sarama.ProducerMessage, len(batch))
	for i, m := range batch {
		msgs[i] = &sarama.ProducerMessage{Topic: h.cfg.Out, Key: sarama.ByteEncoder(m.Value), Value: sarama.ByteEncoder(append([]byte("out-"), m.Value...)),
			Headers: []sarama.RecordHeader{{Key: []byte(txnHeaderID), Value: []byte(id)}, {Key: []byte(txnHeaderCount), Value: n}}}
	}
	if err := h.prod.SendMessages(msgs); err != nil {
		return fail("produce in", err)
	}
	last := batch[len(batch)-1]
	if err := h.prod.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{
		last.Topic: {{Partition: last.Partition, Offset: last.Offset + 1}},
	}, h.cfg.Group); err != nil {
		return fail("add offsets to", err)
	}
	time.Sleep(pacing) // pacing: the transaction stays open a little, so that kills land inside transactions too
	if err := h.prod.CommitTxn(); err != nil {
		return fail("commit", err)
	}
	fmt.Printf("COMMIT %s %d\n", id, len(batch))
	return nil
}
