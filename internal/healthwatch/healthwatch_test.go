package healthwatch_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/healthwatch"
)

// TestHealthWatchEndsOnDrain: a Watch stream ends once the server drains
// and the stream has sent NOT_SERVING, whichever of the two comes first,
// and never before it sent NOT_SERVING.
func TestHealthWatchEndsOnDrain(t *testing.T) {
	t.Parallel()
	for _, drainFirst := range []bool{false, true} {
		t.Run(map[bool]string{false: "not-serving-first", true: "drain-first"}[drainFirst], func(t *testing.T) {
			t.Parallel()
			checker := grpchealth.NewStaticChecker("acme.v1.Thing")
			drain, startDrain := context.WithCancel(context.Background())
			defer startDrain()
			_, h := grpchealth.NewHandler(checker, connect.WithInterceptors(healthwatch.EndOnDrain(func() context.Context { return drain })))
			srv := httptest.NewServer(h)
			defer srv.Close()

			events := grpchealth.NewClient(srv.Client(), srv.URL).Watch(t.Context(), &grpchealth.CheckRequest{Service: "acme.v1.Thing"})
			ev := <-events
			require.NoError(t, ev.Err)
			require.Equal(t, grpchealth.StatusServing, ev.Response.Status)
			if drainFirst {
				// The stream stays open until it has said NOT_SERVING:
				// the event below is that, not the end of the stream.
				startDrain()
				checker.SetStatus("acme.v1.Thing", grpchealth.StatusNotServing)
			} else {
				checker.SetStatus("acme.v1.Thing", grpchealth.StatusNotServing)
				startDrain()
			}
			ev, ok := <-events
			require.True(t, ok, "the stream ended before it sent NOT_SERVING")
			require.NoError(t, ev.Err)
			require.Equal(t, grpchealth.StatusNotServing, ev.Response.Status)
			_, ok = <-events
			require.False(t, ok, "the stream ends after NOT_SERVING")
		})
	}
}

// TestHealthWatchWithoutDrainContext: with no draining context yet, a
// Watch stream is left alone.
func TestHealthWatchWithoutDrainContext(t *testing.T) {
	t.Parallel()
	checker := grpchealth.NewStaticChecker()
	_, h := grpchealth.NewHandler(checker, connect.WithInterceptors(healthwatch.EndOnDrain(func() context.Context { return nil })))
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	events := grpchealth.NewClient(srv.Client(), srv.URL).Watch(ctx, &grpchealth.CheckRequest{})
	ev := <-events
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusServing, ev.Response.Status)
	checker.SetStatus("", grpchealth.StatusNotServing)
	ev = <-events
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusNotServing, ev.Response.Status)
}
