package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
)

// TestTieredStorage: with small segments and a small local retention,
// leaders copy closed segments to the object store, every replica's local
// log keeps only the hot tail (and nothing that is not copied), and a
// consumer reading from offset 0 gets every record back, in order,
// byte-identical, through the object store.
func TestTieredStorage(t *testing.T) {
	objects := t.TempDir()
	store, err := folder.New(objects)
	require.NoError(t, err)
	localBytes := int64(2 << 20)
	c := startTestCluster(t, testClusterOpts{
		tier: store,
		broker: func(bc *Config) {
			bc.SegmentBytes = 1 << 20
			bc.TierCopyInterval = 100 * time.Millisecond
			bc.RetentionCheckInterval = 100 * time.Millisecond
		},
		topicConfig: &sluicev1.TopicConfig{LocalRetentionBytes: &localBytes},
	})
	ctx := context.Background()

	// 8 MB into partition 0, 200 records of ~1 KiB per produce.
	const batches, perBatch = 40, 200
	future := time.Now().Add(time.Hour).UnixMilli()
	var want []string
	for i := range batches {
		recs := make([]*sluicev1.Record, perBatch)
		for j := range recs {
			v := fmt.Sprintf("record-%05d-%0990d", i*perBatch+j, i*perBatch+j)
			recs[j] = &sluicev1.Record{Value: []byte(v)}
			if i == 0 && j == 7 {
				recs[j].TimestampMs = future // the largest, soon only in the object store
			}
			want = append(want, v)
		}
		_, err := c.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{
			Topic: "orders", Partition: 0, Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}},
		}))
		require.NoError(t, err)
	}

	// Every replica deletes what is copied, down to its local retention.
	var topicID string
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		for _, b := range c.brokers {
			tm, _ := b.metadata().Topic(c.tenantID, "orders")
			topicID = tm.ID
			p := b.partition(tm.ID, 0)
			if p == nil {
				return fmt.Errorf("broker %d has no replica", b.cfg.ID)
			}
			if start := p.Log().LogStartOffset(); start == 0 {
				return fmt.Errorf("broker %d still holds offset 0 locally", b.cfg.ID)
			}
			if through := p.Status().CopiedThrough; p.Log().LogStartOffset() > through+1 {
				return fmt.Errorf("broker %d deleted up to %d, copied only through %d", b.cfg.ID, p.Log().LogStartOffset(), through)
			}
			var local int64
			for _, si := range p.Log().ClosedSegments() {
				local += si.Size
			}
			if local > 4*localBytes {
				return fmt.Errorf("broker %d keeps %d bytes of closed segments locally", b.cfg.ID, local)
			}
		}
		return nil
	})

	// The object store holds consecutive segments from offset 0.
	var keys int
	for info, err := range store.List(ctx, "tenants/"+c.tenantID+"/topics/"+topicID+"/0/") {
		require.NoError(t, err)
		require.Positive(t, info.Size)
		keys++
	}
	require.GreaterOrEqual(t, keys, 2*5, "a .log and a .index per segment")

	// Earliest is offset 0 even though no broker holds it locally.
	lo, err := c.records.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}))
	require.NoError(t, err)
	require.Equal(t, int64(0), lo.Msg.GetOffset())
	require.Equal(t, int64(0), lo.Msg.GetLogStartOffset())

	// Read everything back from offset 0.
	var got []string
	next := int64(0)
	for next < int64(len(want)) {
		res, err := c.records.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders", Partition: 0, Offset: next, MaxBytes: 1 << 20}))
		require.NoError(t, err, "fetch at %d", next)
		require.NotEmpty(t, res.Msg.GetRecords(), "fetch at %d", next)
		for _, r := range res.Msg.GetRecords() {
			require.Equal(t, int64(len(got)), r.GetOffset())
			got = append(got, string(r.GetValue()))
		}
		next = res.Msg.GetNextOffset()
	}
	require.Equal(t, want, got)

	leader := c.leaderOf(t, 0)
	require.Positive(t, counterValue(t, leader, "sluice_tier_uploaded_segments_total"))
	require.Positive(t, counterValue(t, leader, "sluice_tier_remote_read_bytes_total"))
	require.Positive(t, counterValue(t, leader, "sluice_objstore_operations_total"))

	// A timestamp lookup finds the first record in the object store.
	ts, err := c.records.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, TimestampMs: 1}))
	require.NoError(t, err)
	require.Equal(t, int64(0), ts.Msg.GetOffset())
	// And the largest timestamp, in a segment only the object store holds.
	mt, err := c.records.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders", Partition: 0, Spec: sluicev1.OffsetSpec_OFFSET_SPEC_MAX_TIMESTAMP}))
	require.NoError(t, err)
	require.Equal(t, [2]int64{7, future}, [2]int64{mt.Msg.GetOffset(), mt.Msg.GetTimestampMs()})

	// Objects no finished copy accounts for (a deposed leader's late
	// upload) are deleted by the leader's next sweep once 10 minutes old;
	// younger ones are left alone (a copy may still be writing them).
	prefix := "tenants/" + c.tenantID + "/topics/" + topicID + "/0/"
	oldOrphan, newOrphan := prefix+"99999999999999999998-9-orphan.log", prefix+"99999999999999999999-9-orphan.log"
	for _, k := range []string{oldOrphan, newOrphan} {
		require.NoError(t, store.Put(ctx, k, strings.NewReader("x"), 1))
	}
	hourAgo := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(objects, "objects", oldOrphan), hourAgo, hourAgo))
	before := keys
	leader.tier.Forget(topicID, 0) // it reloads and sweeps at its next copy
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		if _, err := store.Head(ctx, oldOrphan); !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("old orphan still there (%v)", err)
		}
		return nil
	})
	_, err = store.Head(ctx, newOrphan)
	require.NoError(t, err, "a young orphan is kept")
	after := 0
	for _, err := range store.List(ctx, prefix) {
		require.NoError(t, err)
		after++
	}
	require.GreaterOrEqual(t, after, before+1, "no finished copy was deleted (%d objects before, %d after)", before, after)
	require.Positive(t, counterValue(t, leader, "sluice_tier_orphaned_objects_deleted_total"))

	// Deleting the topic deletes its objects too.
	_, err = c.topics.DeleteTopic(ctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: "orders"}))
	require.NoError(t, err)
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		for info, err := range store.List(ctx, "tenants/"+c.tenantID+"/topics/"+topicID+"/") {
			if err != nil {
				return err
			}
			return fmt.Errorf("%s is still there", info.Key)
		}
		return nil
	})
}

// leaderOf is the broker leading a partition of "orders".
func (c *lagCluster) leaderOf(t *testing.T, partition int32) *Broker {
	t.Helper()
	tm, ok := c.brokers[0].metadata().Topic(c.tenantID, "orders")
	require.True(t, ok)
	id := tm.Partitions[partition].Leader
	for _, b := range c.brokers {
		if b.cfg.ID == id {
			return b
		}
	}
	t.Fatalf("no broker %d", id)
	return nil
}

// counterValue sums a counter (or gauge) over all its series on a broker.
func counterValue(t *testing.T, b *Broker, name string) float64 {
	t.Helper()
	return gatheredSum(t, b.Registry(), name, "", "")
}

// gatheredSum sums a counter or gauge over its series, only those whose
// label has value when label is set.
func gatheredSum(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || (lp.GetName() == label && lp.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}
