package controlplane_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/testenv"
)

func fastMetering(cfg *controlplane.Config) { cfg.MeteringInterval = 100 * time.Millisecond }

// TestControlPlaneMetering: the control plane meters a tenant's
// partition-seconds and hot storage byte-seconds (from the brokers' quota
// reports), and two replicas metering the same store count each interval
// once: the partition-seconds never pass partitions × the time elapsed.
func TestControlPlaneMetering(t *testing.T) {
	t.Parallel()
	dbURL := testenv.PostgresURL(t)
	// Both replicas on one fake clock: the meters count the time the test
	// lets pass, not the time a loaded machine takes.
	clk := clock.NewFake(time.Now())
	began := clk.Now()
	c := startAt(t, dbURL, clk, nil, fastMetering)
	c2 := startAt(t, dbURL, clk, nil, fastMetering) // a second replica on the same database
	e1 := c.register(t, 1)
	alice := c.signup(t, "alice")
	_, err := c.topics(alice.token).CreateTopic(context.Background(), connect.NewRequest(&sluicev1.CreateTopicRequest{Name: "orders", PartitionCount: 3, ReplicationFactor: 1}))
	require.NoError(t, err)

	// The broker keeps reporting 1000 hot bytes of alice's, every 200 ms
	// of the meters' time.
	var tot map[sluicev1.UsageDimension]int64
	for step := 0; ; step++ {
		require.Less(t, step, 300, "partition-seconds and hot storage byte-seconds within 60 s: totals %v", tot)
		_, _ = c.exchange(1, e1, &sluicev1.TenantQuotaReport{TenantId: alice.tenantID, HotStorageBytes: 1000})
		clk.Advance(200 * time.Millisecond)
		tot = usageTotals(t, c, alice.token)
		if tot[sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS] >= 3 && tot[sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS] >= 1000 {
			break
		}
	}
	// Counted once: 3 partitions for at most the time since the replicas
	// started, plus the second the meters' whole-second intervals may start
	// before it (a second replica counting the same intervals would double
	// it).
	clk.Advance(200 * time.Millisecond) // the rounds under way are done
	tot = usageTotals(t, c, alice.token)
	elapsed := clk.Now().Sub(began).Seconds() + 1
	require.LessOrEqual(t, float64(tot[sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS]), 3*elapsed)
	require.LessOrEqual(t, float64(tot[sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS]), 1000*elapsed)
	require.Zero(t, tot[sluicev1.UsageDimension_USAGE_DIMENSION_COLD_STORAGE_BYTE_SECONDS])
	// Each interval is advanced by whichever replica wins its
	// compare-and-set, so either may have advanced them all.
	const advanced = `sluice_controlplane_meter_runs_total{meter="partitions",result="advanced"}`
	a1, _ := c.sample(t, advanced)
	a2, _ := c2.sample(t, advanced)
	require.Positive(t, a1+a2, "%s on neither replica", advanced)
	const ran = `sluice_controlplane_meter_last_success_timestamp_seconds{meter="hot_storage"}`
	r1, _ := c.sample(t, ran)
	r2, _ := c2.sample(t, ran)
	require.Positive(t, max(r1, r2), "%s on neither replica", ran)
}
