package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tenants"
)

// quotaTenant signs up a tenant of its own on the package's cluster (so
// that its limits slow no other test), sets its limit overrides as the
// operator, and returns a client with its key.
func quotaTenant(t testing.TB, name string, o *sluicev1.LimitOverrides) (*client.Client, string) {
	t.Helper()
	name = fresh(name)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{Protocols: &p}}
	su, err := sluicev1connect.NewTenantServiceClient(hc, endpoint).Signup(t.Context(),
		connect.NewRequest(&sluicev1.SignupRequest{Email: name + "@example.com", TenantName: name}))
	require.NoError(t, err)
	op := sluicev1connect.NewOperatorServiceClient(hc, endpoint, connect.WithInterceptors(tenants.Bearer(operatorToken)))
	_, err = op.UpdateTenant(t.Context(), connect.NewRequest(&sluicev1.UpdateTenantRequest{TenantId: su.Msg.GetTenant().GetId(), Overrides: o}))
	require.NoError(t, err)
	key := su.Msg.GetApiKeySecret()
	c, err := client.New(t.Context(), endpoint, client.APIKey(key))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c, key
}

func recordsOf(topic string, from, n, size int) []*client.Record {
	out := make([]*client.Record, n)
	for i := range out {
		v := make([]byte, size)
		copy(v, fmt.Sprintf("record-%d", from+i))
		out[i] = &client.Record{Topic: topic, Value: v}
	}
	return out
}

// A producer over its tenant's produce quota on a real cluster (brokers
// enforcing the allotments the control plane divides) delivers every
// record, without an error, at about the quota: it waits out each
// refusal's delay and resends the batch, which idempotence writes once.
func TestThrottleClusterProducerDelivers(t *testing.T) {
	const limit = 64 << 10 // bytes/s, cluster-wide
	rate := int64(limit)
	c, key := quotaTenant(t, "throttled-producer", &sluicev1.LimitOverrides{ProduceBytesPerSec: &rate})
	topic := fresh("throttled")
	require.NoError(t, createTopicAs(key, topic, 1, nil))
	p, err := c.NewProducer(t.Context(), client.WithDeliveryTimeout(2*time.Minute))
	require.NoError(t, err)
	defer p.Close(t.Context())

	// Until the brokers have the tenant's allotment, they admit it: produce
	// until a refusal shows the quota is in force.
	const size, chunk = 2 << 10, 16 // 32 KiB per ProduceSync
	sent := 0
	testenv.Wait(t, 30*time.Second, "the produce quota to throttle", func() error {
		require.NoError(t, p.ProduceSync(t.Context(), recordsOf(topic, sent, chunk, size)...))
		sent += chunk
		if c.Stats().Throttle[client.KindProduce].Requests == 0 {
			return errors.New("not throttled yet")
		}
		return nil
	})

	// Over the quota now: 8 times the rate's second of burst takes its
	// time, and nothing fails.
	before := c.Stats().Throttle[client.KindProduce]
	const measured = 8 * limit / size
	start := time.Now()
	for i := 0; i < measured; i += chunk {
		require.NoError(t, p.ProduceSync(t.Context(), recordsOf(topic, sent, chunk, size)...))
		sent += chunk
	}
	elapsed := time.Since(start)
	after := c.Stats().Throttle[client.KindProduce]
	t.Logf("%d KiB over a %d KiB/s quota in %s: %.0f KiB/s; throttled %d times, %s", measured*size>>10, limit>>10, elapsed,
		float64(measured*size>>10)/elapsed.Seconds(), after.Requests-before.Requests, after.Time-before.Time)
	// At most one second of burst and the quota's error bound: well over
	// half the time the rate alone takes.
	require.Greater(t, elapsed, time.Duration(float64(measured*size-2*limit)/limit*0.5*float64(time.Second)))
	require.Greater(t, after.Requests, before.Requests)
	require.Greater(t, after.Time, before.Time)

	// Every record is in the log once, in order.
	recs := consumeAll(t, c, topic, sent)
	require.Len(t, recs, sent)
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset)
		require.Equal(t, fmt.Sprintf("record-%d", i), string(r.Value[:len(fmt.Sprintf("record-%d", i))]))
	}
}

// A tenant over its total storage limit is refused at once with
// ErrQuotaExceeded naming the limit, not retried: its records fail fast,
// certainly not written.
func TestThrottleClusterStorageLimit(t *testing.T) {
	limit := int64(16 << 10)
	c, key := quotaTenant(t, "full-tenant", &sluicev1.LimitOverrides{MaxTotalStorageBytes: &limit})
	topic := fresh("full")
	require.NoError(t, createTopicAs(key, topic, 1, nil))
	p, err := c.NewProducer(t.Context(), client.WithDeliveryTimeout(2*time.Minute))
	require.NoError(t, err)
	defer p.Close(t.Context())

	sent := 0
	var refusal error
	testenv.Wait(t, 60*time.Second, "produce to be refused over the storage limit", func() error {
		start := time.Now()
		err := p.ProduceSync(t.Context(), recordsOf(topic, sent, 8, 1<<10)...)
		if err == nil {
			sent += 8
			return errors.New("still admitted")
		}
		require.ErrorIs(t, err, client.ErrQuotaExceeded, "%v", err)
		require.Less(t, time.Since(start), 5*time.Second, "refused at once, not retried until the delivery timeout")
		refusal = err
		return nil
	})
	var qe *client.QuotaError
	require.ErrorAs(t, refusal, &qe)
	require.Equal(t, "max_total_storage_bytes", qe.Description)
	var de *client.DeliveryError
	require.ErrorAs(t, refusal, &de)
	require.False(t, de.Indefinite)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(refusal))
	require.GreaterOrEqual(t, sent*(1<<10), int(limit)/2, "refused once it held about its limit, not before")
}
