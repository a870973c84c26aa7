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

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
)

// TestBrokerDeletesPartitionsOfTopicsDeletedWhileDown: a broker that was
// down while a topic was deleted never saw the topic leave its
// assignments, so its first view after start-up decides: the partition
// directories of a topic it does not name go (issue 12: they stayed on
// disk for good); those of a topic it names stay, also where this broker
// is no longer a replica, and so does everything that is not a partition
// directory. With tiered storage the deleted topic's objects go too.
func TestBrokerDeletesPartitionsOfTopicsDeletedWhileDown(t *testing.T) {
	t.Parallel()
	store, err := folder.New(t.TempDir())
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = t.TempDir()
	cfg.BrokerToken = "broker-token-0123456789"
	b, err := New(cfg, Deps{TierStore: store})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.tier.Close(); _ = b.dirLock.Release() })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.mu.Lock()
	b.runCtx = ctx
	b.mu.Unlock()

	const (
		tenant  = "01a2316c-bf12-71c1-aeed-6a97ad3d38fa"
		deleted = "01a2316c-bf77-7355-9a8f-a7deac7ee6b4"
		kept    = "01a2316c-c0ab-7a02-b332-4a56b485e5ac"
	)
	mk := func(parts ...string) string {
		dir := filepath.Join(append([]string{b.cfg.DataDir}, parts...)...)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "00000000000000000000.log"), []byte("data"), 0o644))
		return dir
	}
	gone := []string{mk(tenant, deleted+"-0"), mk(tenant, deleted+"-1")}
	object := func(topic string) string {
		key := "tenants/" + tenant + "/topics/" + topic + "/0/00000000000000000000-0-x.log"
		require.NoError(t, store.Put(ctx, key, strings.NewReader("cold"), 4))
		return key
	}
	goneObject, keptObject := object(deleted), object(kept)
	stay := []string{
		mk(tenant, kept+"-0"),         // its topic exists; the replica is on brokers 2 and 3 now
		mk(tenant, "not-a-partition"), // not a partition directory
		mk(".tier-cache"),             // not a tenant directory
	}

	b.applyMetadata(toClusterMeta(&sluicev1.WatchAssignmentsResponse{
		MetadataVersion: 7,
		Partitions: []*sluicev1.PartitionAssignment{{
			TenantId: tenant, TopicId: kept, TopicName: "orders", Partition: 1,
			Replicas: []int32{2, 1, 3}, Leader: 2, Isr: []int32{2, 3},
		}},
	}))
	for _, dir := range gone {
		testenv.Wait(t, 30*time.Second, "a deleted topic's partition folder to go", func() error {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				return fmt.Errorf("%s of a deleted topic is still on disk", dir)
			}
			return nil
		})
	}
	for _, dir := range stay {
		require.DirExists(t, dir)
	}
	testenv.Wait(t, 30*time.Second, "a deleted topic's objects to go", func() error {
		if _, err := store.Head(ctx, goneObject); !errors.Is(err, objstore.ErrNotFound) {
			return fmt.Errorf("the deleted topic's object %s is still in the object store (%v)", goneObject, err)
		}
		return nil
	})
	_, err = store.Head(ctx, keptObject)
	require.NoError(t, err, "an existing topic's objects stay")
}
