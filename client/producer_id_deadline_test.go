package client_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
)

// A producer id refused with a delay that ends after NewProducer's context
// does fails at once with the refusal (the quota, its delay), instead of
// waiting until the deadline to report it; a delay that fits is waited out.
func TestNewProducerThrottledPastDeadline(t *testing.T) {
	f := newQuotaScript(t, fresh("producer-id-deadline"), false)
	c := newClient(t)

	f.script("InitProducerId", rateRefusal(time.Minute))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.NewProducer(ctx)
	require.Error(t, err)
	require.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err))
	require.ErrorContains(t, err, "the delay asked for, 1m0s, ends after the context's deadline")
	require.Less(t, time.Since(start), 5*time.Second, "failed before the deadline")
	require.Len(t, f.callsOf("InitProducerId"), 1)

	f.script("InitProducerId", rateRefusal(50*time.Millisecond))
	p, err := c.NewProducer(ctx)
	require.NoError(t, err)
	require.True(t, p.Idempotent())
	require.NoError(t, p.Close(t.Context()))
	require.Len(t, f.callsOf("InitProducerId"), 3)
}
