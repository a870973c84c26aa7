package broker

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/localcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestBrokerHeartbeatNotHeldByASlowOne: a heartbeat the control plane
// holds (here until its caller gives up; under load, queued behind a busy
// store's writes) does not hold back the ones after it: each has one
// interval, its deadline ends the held call, and the broker sends the
// next. Before, a heartbeat had no deadline of its own, and one held call
// stopped every later heartbeat until the lease ran out.
func TestBrokerHeartbeatNotHeldByASlowOne(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{
		controlPlane: func(cfg *controlplane.Config) { cfg.BrokerLease = 3 * time.Second },
	})
	var held, released atomic.Bool
	h := c.cluster.AddFault(localcluster.Fault{Broker: localcluster.ControlPlane, Procedure: "HeartbeatBroker",
		Hook: func(ctx context.Context, call localcluster.Call) error {
			if call.Request.(*sluicev1.HeartbeatBrokerRequest).GetBrokerId() != 1 || !held.CompareAndSwap(false, true) {
				return nil
			}
			<-ctx.Done() // held until the broker gives up on it
			released.Store(true)
			return ctx.Err()
		}})
	testenv.Wait(t, 30*time.Second, "a heartbeat of broker 1 after the held one ended", func() error {
		if !released.Load() {
			return fmt.Errorf("the held heartbeat has not ended (held: %v)", held.Load())
		}
		n := 0
		for _, call := range h.Calls() {
			if call.Request.(*sluicev1.HeartbeatBrokerRequest).GetBrokerId() == 1 {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d heartbeats of broker 1", n)
		}
		return nil
	})
	require.True(t, released.Load())
}
