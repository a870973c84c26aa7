package client_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/tenants"
)

// growTopic raises the topic's partition count to n through the control
// plane (TopicService.CreatePartitions).
func growTopic(t *testing.T, name string, n int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	tok, err := sluicev1connect.NewAuthServiceClient(hc, endpoint).CreateToken(ctx, connect.NewRequest(&sluicev1.CreateTokenRequest{ApiKey: apiKey}))
	require.NoError(t, err)
	topics := sluicev1connect.NewTopicServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(tok.Msg.GetToken())))
	res, err := topics.CreatePartitions(ctx, connect.NewRequest(&sluicev1.CreatePartitionsRequest{Name: name, PartitionCount: n}))
	require.NoError(t, err)
	require.EqualValues(t, n, res.Msg.GetTopic().GetPartitionCount())
}

func keyPartition(key []byte, n int32) int32 {
	h := fnv.New32a()
	h.Write(key)
	return int32(h.Sum32() % uint32(n))
}

// TestGrowthProducerReroutesKeyedRecords: after partitions are added, a
// producer notices the new count at its next metadata refresh (within the
// metadata max age) and sends every keyed record to hash(key) mod the new
// count; until then it keeps the old count (never a partition in between).
func TestGrowthProducerReroutesKeyedRecords(t *testing.T) {
	growKeys := fresh("grow-keys")
	createTopic(t, growKeys, 2, nil)
	const maxAge = time.Second
	c, err := client.New(t.Context(), endpoint, client.APIKey(apiKey), client.WithMetadataMaxAge(maxAge))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := t.Context()
	p, err := c.NewProducer(ctx, client.WithLinger(time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	produce := func(round int) []*client.Record {
		t.Helper()
		var rs []*client.Record
		for k := range 40 {
			rs = append(rs, &client.Record{Topic: growKeys, Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "%d", round)})
		}
		require.NoError(t, p.ProduceSync(ctx, rs...))
		return rs
	}
	for _, r := range produce(0) {
		require.Equal(t, keyPartition(r.Key, 2), r.Partition, "key %s", r.Key)
	}

	growTopic(t, growKeys, 5)
	grown := time.Now()
	// The producer partitions each record with the count it has when the
	// record is enqueued; the refresh lands between two records, possibly
	// inside a round. Records are enqueued in order, so within and across
	// rounds the old count is used up to some record and the new one from
	// then on, never the old one again.
	switched := false
	for round := 1; !switched; round++ {
		for _, r := range produce(round) {
			old, grownTo := keyPartition(r.Key, 2), keyPartition(r.Key, 5)
			switch {
			case old != grownTo && r.Partition == grownTo:
				switched = true
			case switched && r.Partition != grownTo:
				t.Fatalf("round %d key %s: partition %d after the producer had switched to 5 partitions (want %d)", round, r.Key, r.Partition, grownTo)
			case !switched && r.Partition != old:
				t.Fatalf("round %d key %s: partition %d, neither hash mod 2 (%d) nor hash mod 5 (%d)", round, r.Key, r.Partition, old, grownTo)
			}
		}
		require.Less(t, time.Since(grown), maxAge+20*time.Second, "the producer never used the new partition count")
	}
	took := time.Since(grown)
	t.Logf("keyed records went to the new partitions %s after the growth (metadata max age %s)", took.Round(time.Millisecond), maxAge)
	// From then on, the new count only.
	for _, r := range produce(-1) {
		require.Equal(t, keyPartition(r.Key, 5), r.Partition, "key %s", r.Key)
	}
}

// TestGrowthGroupConsumesNewPartitions: a group member subscribed to a
// topic gets the partitions added to it at a heartbeat soon after (a
// cooperative rebalance: it keeps the ones it has), and consumes them,
// although its client's cached metadata, trusted for 5 minutes, still has
// the old count: it asks the control plane for a partition it is given and
// does not know. A producer naming the new partitions (manual
// partitioner) with a stale cache does the same.
func TestGrowthGroupConsumesNewPartitions(t *testing.T) {
	growGroup := fresh("grow-group")
	createTopic(t, growGroup, 2, nil)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	gcl := newClient(t) // default metadata max age: 5 minutes
	var (
		mu       sync.Mutex
		got      = map[int32][]string{}
		assigned []client.TopicPartition
		revoked  []client.TopicPartition
	)
	gc, err := gcl.NewGroupConsumer(ctx, growGroup, []string{growGroup},
		client.WithOnAssigned(func(tps []client.TopicPartition) { mu.Lock(); assigned = append(assigned, tps...); mu.Unlock() }),
		client.WithOnRevoked(func(tps []client.TopicPartition) { mu.Lock(); revoked = append(revoked, tps...); mu.Unlock() }))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- gc.Run(ctx, func(_ context.Context, r *client.Record) error {
			mu.Lock()
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			mu.Unlock()
			return nil
		})
	}()
	defer func() {
		stop()
		<-done
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gc.Close(cctx)
	}()
	pcl := newClient(t)
	p, err := pcl.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	}()
	require.NoError(t, p.ProduceSync(ctx,
		&client.Record{Topic: growGroup, Partition: 0, Value: []byte("old-0")},
		&client.Record{Topic: growGroup, Partition: 1, Value: []byte("old-1")}))
	testenv.Wait(t, 30*time.Second, "the member consumes the first partitions", func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got[0]) == 0 || len(got[1]) == 0 {
			return fmt.Errorf("consumed %v", got)
		}
		return nil
	})

	growTopic(t, growGroup, 4)
	// The member's client still caches 2 partitions (fetched well under 5
	// minutes ago); a new client that knows of the added ones writes to
	// them.
	var fcl *client.Client
	testenv.Wait(t, 30*time.Second, "a client that sees 4 partitions", func() error {
		fcl = newClient(t)
		if n, err := fcl.Partitions(ctx, growGroup); err != nil || n != 4 {
			return fmt.Errorf("%d partitions, %v", n, err)
		}
		return nil
	})
	fresh, err := fcl.NewProducer(ctx, client.WithManualPartitioner())
	require.NoError(t, err)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fresh.Close(cctx)
	}()
	require.NoError(t, fresh.ProduceSync(ctx,
		&client.Record{Topic: growGroup, Partition: 2, Value: []byte("new-2")},
		&client.Record{Topic: growGroup, Partition: 3, Value: []byte("new-3")}))
	consumed := func(what string, n int) {
		t.Helper()
		testenv.Wait(t, 30*time.Second, what, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got[2]) < n || len(got[3]) < n {
				return fmt.Errorf("consumed %v; assigned %v; member %s", got, assigned, gc.Debug())
			}
			return nil
		})
	}
	consumed("the member consumes the added partitions", 1)
	// The first producer's client caches 2 partitions too.
	require.NoError(t, p.ProduceSync(ctx,
		&client.Record{Topic: growGroup, Partition: 2, Value: []byte("stale-2")},
		&client.Record{Topic: growGroup, Partition: 3, Value: []byte("stale-3")}))
	consumed("the records of the producer with the old metadata", 2)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"new-2", "stale-2"}, got[2])
	require.Equal(t, []string{"new-3", "stale-3"}, got[3])
	require.Empty(t, revoked, "nothing revoked: the member kept partitions 0 and 1")
	require.ElementsMatch(t, []client.TopicPartition{{Topic: growGroup, Partition: 0}, {Topic: growGroup, Partition: 1},
		{Topic: growGroup, Partition: 2}, {Topic: growGroup, Partition: 3}}, assigned)
}
