package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/store"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// TestLagAlertsFromBrokerSamples: the control plane samples the brokers'
// group lag, forecasts, and raises lag-growing and retention-expiry-risk
// for a group that stopped consuming, with the expiry forecast where the
// records really expire; once the group catches up, both resolve.
func TestLagAlertsFromBrokerSamples(t *testing.T) {
	retention := int64(120_000) // 2 minutes
	c := startTestCluster(t, testClusterOpts{
		broker: func(bc *Config) { bc.GroupLagMetricsInterval = 200 * time.Millisecond },
		controlPlane: func(cfg *controlplane.Config) {
			cfg.LagSampleInterval = 250 * time.Millisecond
			// A trend needs 10 samples within the window (forecast.Config
			// MinSamples, over MinSpan = min(window/4, 10 × 250 ms)): a
			// window of 30 s still holds them when a loaded machine makes a
			// sample every 3 s instead of every 250 ms; on an idle one the
			// alert still fires after 10 samples over 2.5 s.
			cfg.LagWindow = 30 * time.Second
			cfg.LagAlertPolicy = alerts.Policy{GrowingFor: time.Second, RiskFor: time.Second, ResolveAfter: time.Second, RiskThreshold: 5 * time.Minute}
		},
		topicConfig: &sluicev1.TopicConfig{RetentionMs: &retention},
	})
	ctx := context.Background()
	written := time.Now().Add(-60 * time.Second).Truncate(time.Millisecond)
	c.produce(t, 0, 10, written)
	c.commit(t, "slow", map[int32]int64{0: 0}) // consumed nothing: the oldest unconsumed record is a minute old
	st := c.cp.Store()

	firing := func() (map[store.AlertKind]store.Alert, error) {
		list, err := st.ListAlerts(ctx, c.tenantID, store.AlertQuery{States: []store.AlertState{store.AlertFiring}})
		if err != nil {
			return nil, err
		}
		out := map[store.AlertKind]store.Alert{}
		for _, al := range list {
			out[al.Kind] = al
		}
		return out, nil
	}
	var risk store.Alert
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		got, err := firing()
		if err != nil {
			return err
		}
		var ok bool
		if risk, ok = got[store.AlertRetentionExpiryRisk]; !ok {
			return fmt.Errorf("retention-expiry-risk not firing: %v", got)
		}
		if _, ok := got[store.AlertLagGrowing]; !ok {
			return fmt.Errorf("lag-growing not firing: %v", got)
		}
		return nil
	})
	require.Equal(t, "slow", risk.Group)
	require.Equal(t, "orders", risk.TopicName)
	require.EqualValues(t, 0, risk.Partition)
	var d alerts.Details
	require.NoError(t, json.Unmarshal(risk.Details, &d))
	// The records expire at written + retention: the forecast is within
	// 20% of the time left (the bound), here well within.
	actual := written.Add(time.Duration(retention) * time.Millisecond)
	left := actual.Sub(risk.FiredAt)
	require.InDelta(t, 0, d.ExpiresAt.Sub(actual).Seconds(), 0.2*left.Seconds(), "forecast expiry %s, actual %s", d.ExpiresAt, actual)
	require.InDelta(t, 1.0, d.GrowthRate, 0.2, "a stopped consumer's lag age grows a second per second")
	require.EqualValues(t, 10, d.Lag)
	require.Contains(t, d.Advice, "Add consumers")

	// The control plane exports the forecast.
	require.Positive(t, cpGauge(t, c.cp, "sluice_time_to_data_loss_seconds", c.tenantID))
	require.InDelta(t, time.Since(written).Seconds(), cpGauge(t, c.cp, "sluice_consumer_lag_seconds", c.tenantID), 5)

	// The group catches up: both resolve.
	c.commit(t, "slow", map[int32]int64{0: 10})
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		got, err := firing()
		if err != nil {
			return err
		}
		if len(got) > 0 {
			return fmt.Errorf("still firing: %v", got)
		}
		return nil
	})
	resolved, err := st.ListAlerts(ctx, c.tenantID, store.AlertQuery{States: []store.AlertState{store.AlertResolved}})
	require.NoError(t, err)
	kinds := map[store.AlertKind]bool{}
	for _, al := range resolved {
		kinds[al.Kind] = true
		require.False(t, al.ResolvedAt.IsZero())
	}
	require.True(t, kinds[store.AlertRetentionExpiryRisk] && kinds[store.AlertLagGrowing], "both resolved: %v", kinds)

	// Another tenant sees none of it.
	other, err := st.ListAlerts(ctx, "00000000-0000-0000-0000-0000000000ff", store.AlertQuery{})
	require.NoError(t, err)
	require.Empty(t, other)
}

// cpGauge sums a control-plane gauge over the tenant's series.
func cpGauge(t *testing.T, cp *controlplane.Server, name, tenantID string) float64 {
	t.Helper()
	return gatheredSum(t, cp.Registry(), name, "tenant", tenantID)
}

// TestLagAlertsSizeBasedRetention: on a topic limited by retention.bytes,
// the forecast follows the unconsumed bytes: a group that reads nothing
// while the partition fills gets retention-expiry-risk long before the
// time-based retention would matter.
func TestLagAlertsSizeBasedRetention(t *testing.T) {
	retentionBytes := int64(4 << 20)
	c := startTestCluster(t, testClusterOpts{
		broker: func(bc *Config) { bc.GroupLagMetricsInterval = 200 * time.Millisecond },
		controlPlane: func(cfg *controlplane.Config) {
			cfg.LagSampleInterval = 250 * time.Millisecond
			// A trend needs 10 samples within the window (forecast.Config
			// MinSamples, over MinSpan = min(window/4, 10 × 250 ms)): a
			// window of 30 s still holds them when a loaded machine makes a
			// sample every 3 s instead of every 250 ms; on an idle one the
			// alert still fires after 10 samples over 2.5 s.
			cfg.LagWindow = 30 * time.Second
			cfg.LagAlertPolicy = alerts.Policy{GrowingFor: time.Hour, RiskFor: time.Second, ResolveAfter: time.Second, RiskThreshold: 5 * time.Minute}
		},
		topicConfig: &sluicev1.TopicConfig{RetentionBytes: &retentionBytes},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	big := make([]byte, 1000)
	produce := func() {
		recs := make([]*sluicev1.Record, 100)
		for i := range recs {
			recs[i] = &sluicev1.Record{Value: big}
		}
		_, err := c.records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{
			Topic: "orders", Partition: 0, Acks: sluicev1.Acks_ACKS_ALL,
			Payload: &sluicev1.ProduceRequest_Records{Records: &sluicev1.RecordList{Records: recs}},
		}))
		if ctx.Err() != nil {
			return // the test is over: a produce in flight ends canceled
		}
		require.NoError(t, err)
	}
	produce()
	c.commit(t, "reader", map[int32]int64{0: 0})
	done := make(chan struct{})
	go func() { // ~200 KB/s
		defer close(done)
		for ctx.Err() == nil {
			produce()
			time.Sleep(500 * time.Millisecond) // pacing: ~200 KB/s
		}
	}()
	defer func() { cancel(); <-done }()

	st := c.cp.Store()
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		list, err := st.ListAlerts(ctx, c.tenantID, store.AlertQuery{States: []store.AlertState{store.AlertFiring}})
		if err != nil {
			return err
		}
		for _, al := range list {
			if al.Kind == store.AlertRetentionExpiryRisk {
				var d alerts.Details
				if err := json.Unmarshal(al.Details, &d); err != nil {
					return err
				}
				// 4 MiB at ~200 KB/s: well under the 5-minute threshold,
				// while retention.ms (the plan's, days) is far away.
				if d.TimeToLoss <= 0 || d.TimeToLoss > 2*time.Minute {
					return fmt.Errorf("time to loss %s", d.TimeToLoss)
				}
				return nil
			}
		}
		return fmt.Errorf("no retention-expiry-risk firing: %v", list)
	})
}
