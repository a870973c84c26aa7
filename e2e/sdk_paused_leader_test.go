package e2e

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestSDKPausedLeaderIsLeft SIGSTOPs the leader of a one-partition topic
// (RF 3, min ISR 2) while an idempotent producer with the SDK's default
// timeouts writes about 200 records/s. The paused broker's connections
// stay open and silent; the controller elects another leader when its
// lease (3 s) runs out. The producer must write again through the new
// leader while the old one is still paused, within 12 s of the stop,
// not when HTTP/2's health check drops its connection to the paused
// broker (15 s) or its requests time out (30 s): issue 29 item 7, where
// producers made no progress for the whole of a 20 s pause and up to
// 32 s of a longer one. After SIGCONT nothing acknowledged is lost and
// nothing is written twice or reordered.
func TestSDKPausedLeaderIsLeft(t *testing.T) {
	t.Parallel()
	started := time.Now()
	c := testcluster.Start(t, testcluster.Options{Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t)})
	tc := c.NewClient(t, "acme", "paused", 1, 2)
	cl, err := client.New(t.Context(), c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()
	p, err := cl.NewProducer(t.Context())
	require.NoError(t, err)
	require.True(t, p.Idempotent())

	run := &sdkRun{acked: map[int]int32{}, failed: map[int]error{}}
	var (
		mu       sync.Mutex
		sentAt   = map[int]time.Time{}
		ackedAt  = map[int]time.Time{}
		produced int
	)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for v := 0; ; v++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			sentAt[v], produced = time.Now(), v+1
			mu.Unlock()
			p.Produce(ctx, &client.Record{Topic: "paused", Value: []byte(strconv.Itoa(v))}, func(r *client.Record, err error) {
				run.mu.Lock()
				if err != nil {
					run.failed[v] = err
				} else {
					run.acked[v] = r.Partition
				}
				run.mu.Unlock()
				if err == nil {
					mu.Lock()
					ackedAt[v] = time.Now()
					mu.Unlock()
				}
			})
		}
	}()
	// ackedProducedAfter reports whether a record produced after at was
	// acknowledged: it queued behind the requests stuck on a paused
	// leader, so only a new leader can have written it.
	ackedProducedAfter := func(at time.Time) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		for v, a := range ackedAt {
			if sentAt[v].After(at) {
				return a, true
			}
		}
		return time.Time{}, false
	}

	// Past the controller's startup grace (a broker lease), so that it
	// acts on the pause at once.
	testenv.Wait(t, 30*time.Second, "acknowledgements before the pause, and the controller's grace over", func() error {
		if _, ok := ackedProducedAfter(started.Add(4 * time.Second)); !ok {
			return errors.New("none yet")
		}
		return nil
	})
	leader := tc.NewestMetadata(t.Context())[0].Leader
	paused := time.Now()
	c.Pause(leader)
	testenv.Wait(t, 12*time.Second, "a record produced after the pause acknowledged while the old leader is paused", func() error {
		if _, ok := ackedProducedAfter(paused); !ok {
			return errors.New("none yet")
		}
		return nil
	})
	at, _ := ackedProducedAfter(paused)
	t.Logf("the partition acknowledged again %s after its leader %d was paused", at.Sub(paused).Round(time.Millisecond), leader)
	c.Resume(leader)
	c.WaitLive(c.BrokerIDs()...)

	stop()
	<-done
	fctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	require.NoError(t, p.Close(fctx))
	v := judge(run, readBack(t, cl, "paused"))
	mu.Lock()
	t.Logf("%d produced, %d acknowledged, %d failed (first: %v); %+v", produced, len(run.acked), len(run.failed), firstErrors(run.failed), v)
	mu.Unlock()
	require.Equal(t, verdict{}, v, "nothing lost, written twice or reordered")
}
