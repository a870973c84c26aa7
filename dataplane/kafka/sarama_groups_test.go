package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicemq/sluice/internal/testenv"
)

// saramaHandler is a sarama consumer-group member: it marks what it
// reads and counts its claims.
type saramaHandler struct {
	mu     *sync.Mutex
	seen   map[string]int
	claims map[int32]bool
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	h.mu.Lock()
	h.claims[claim.Partition()] = true
	h.mu.Unlock()
	for m := range claim.Messages() {
		h.mu.Lock()
		h.seen[string(m.Value)]++
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

// TestConsumerGroupSarama: two sarama consumer-group members (the
// classic protocol, sarama's range strategy, its own JoinGroup and
// SyncGroup versions) split a topic's four partitions and read every
// record; their commits leave the group's offsets at the end of each
// partition.
func TestConsumerGroupSarama(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adm := kadm.NewClient(client(t))
	topic := fmt.Sprintf("groups-sarama-%d", time.Now().UnixNano())
	groupID := topic + "-g"
	createTopic(t, adm, topic, 4)
	prod := client(t, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := range 400 {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "sluice-sarama-group"
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	cfg.Net.SASL.User, cfg.Net.SASL.Password = tenantName, tenant.APIKey
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}

	var mu sync.Mutex
	seen := map[string]int{}
	handlers := make([]*saramaHandler, 2)
	var wg sync.WaitGroup
	for i := range handlers {
		h := &saramaHandler{mu: &mu, seen: seen, claims: map[int32]bool{}}
		handlers[i] = h
		cg, err := sarama.NewConsumerGroup(bootstrap, groupID, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cg.Close() })
		wg.Go(func() {
			// Consume returns at each rebalance; a member consumes again
			// until the test ends.
			for ctx.Err() == nil {
				if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
					t.Errorf("member %d: %v", i, err)
					return
				}
			}
		})
	}
	testenv.Wait(t, time.Minute, "both members claimed two partitions and all records read", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(seen) < 400 {
			return fmt.Errorf("%d records read", len(seen))
		}
		for i, h := range handlers {
			if len(h.claims) == 0 {
				return fmt.Errorf("member %d has claimed nothing", i)
			}
		}
		return nil
	})
	testenv.Wait(t, time.Minute, "offsets committed at the end of each partition", func() error {
		offsets, err := adm.FetchOffsets(ctx, groupID)
		if err != nil {
			return err
		}
		total := int64(0)
		offsets.Each(func(o kadm.OffsetResponse) { total += o.At })
		if total != 400 {
			return fmt.Errorf("committed offsets sum to %d", total)
		}
		return nil
	})
	cancel()
	wg.Wait()
}
