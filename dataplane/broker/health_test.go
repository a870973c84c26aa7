package broker

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicemq/sluice/controlplane"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/h2c"
	"github.com/sluicemq/sluice/tenants"
)

// TestBrokerHealthFollowsReadiness: a broker's gRPC health answers
// NOT_SERVING, and /readyz 503 with the reason, until the broker is
// registered, holds the revocation list and has applied its first
// assignments (before that it answers Unavailable for every topic); then
// SERVING, for the whole broker and for each client service, and a Watch
// stream sees the change. ReplicaService (broker to broker only) is not a
// health service. When the broker drains, the Watch stream is told
// NOT_SERVING and ends, so it does not hold the shutdown. All of it needs
// no credentials.
func TestBrokerHealthFollowsReadiness(t *testing.T) {
	t.Parallel()
	const brokerToken = "broker-secret-for-tests-0123456789"
	dir := t.TempDir()
	cpCtx, stopCP := context.WithCancel(context.Background())
	defer stopCP()
	// The control plane's port is bound but not served yet: the broker's
	// calls to it wait in the listen backlog until it is. (So this test
	// wires its control plane and broker itself: internal/localcluster
	// serves the control plane as soon as it starts.)
	cpLn := listenLoopback(t)
	cfg := controlplane.DefaultConfig()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(dir, "cp.db")
	cfg.BrokerToken = brokerToken
	cfg.ListenAddr = cpLn.Addr().String()
	cp, err := controlplane.New(cpCtx, cfg, controlplane.Deps{})
	require.NoError(t, err)
	cpDone := make(chan error, 1)
	cpDone <- nil // until it runs
	t.Cleanup(func() {
		stopCP()
		<-cpDone
		cp.Close()
	})

	bc := DefaultConfig()
	bc.ID = 1
	bc.DataDir = filepath.Join(dir, "broker-1")
	bc.ControlPlane = "http://" + cpLn.Addr().String()
	bc.BrokerToken = brokerToken
	bc.ShutdownTimeout = 5 * time.Minute // a Watch that held the drain would show
	bln := listenLoopback(t)
	bc.ListenAddr, bc.AdvertisedAddr = bln.Addr().String(), bln.Addr().String()
	b, err := New(bc, Deps{})
	require.NoError(t, err)
	bCtx, stopBroker := context.WithCancel(context.Background())
	var runErr error
	bDone := make(chan struct{})
	go func() { runErr = b.Run(bCtx, bln, nil); close(bDone) }()
	t.Cleanup(func() { stopBroker(); <-bDone })

	base := "http://" + bln.Addr().String()
	hc := h2c.Client()
	health := grpchealth.NewClient(hc, base, connect.WithGRPC())
	status := func(service string) grpchealth.Status {
		t.Helper()
		res, err := health.Check(t.Context(), &grpchealth.CheckRequest{Service: service})
		require.NoError(t, err, "health of %q", service)
		return res.Status
	}
	readyz := func() (int, string) {
		t.Helper()
		res, err := hc.Get(base + "/readyz")
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}

	// Not registered: not serving.
	for _, svc := range []string{"", sluicev1connect.RecordServiceName, sluicev1connect.GroupServiceName} {
		require.Equal(t, grpchealth.StatusNotServing, status(svc), "service %q", svc)
	}
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "not registered")
	for _, svc := range []string{sluicev1connect.ReplicaServiceName, "sluice.v1.NoSuchService"} {
		_, err := health.Check(t.Context(), &grpchealth.CheckRequest{Service: svc})
		require.Equal(t, connect.CodeNotFound, connect.CodeOf(err), "health of %s: %v", svc, err)
	}
	watchCtx, stopWatch := context.WithCancel(t.Context())
	defer stopWatch()
	events := health.Watch(watchCtx, &grpchealth.CheckRequest{})
	next := func() grpchealth.WatchEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the Watch stream ended")
			return ev
		case <-time.After(time.Minute):
			t.Fatal("no Watch event within a minute")
		}
		return grpchealth.WatchEvent{}
	}
	ev := next()
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusNotServing, ev.Response.Status)

	// The control plane comes up: the broker registers, loads the
	// revocation list and gets its (empty) first assignments.
	<-cpDone
	go func() { cpDone <- cp.Run(cpCtx, cpLn, nil) }()
	ev = next()
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusServing, ev.Response.Status)
	require.Empty(t, b.notReady())
	for _, svc := range []string{"", sluicev1connect.RecordServiceName, sluicev1connect.GroupServiceName} {
		require.Equal(t, grpchealth.StatusServing, status(svc), "service %q", svc)
	}
	code, body = readyz()
	require.Equal(t, http.StatusOK, code, body)

	// Draining: the Watch is told, then ends; Run returns well before the
	// drain timeout.
	stopBroker()
	ev = next()
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusNotServing, ev.Response.Status)
	select {
	case ev, ok := <-events:
		require.False(t, ok, "the Watch stream ends after NOT_SERVING, got %+v", ev)
	case <-time.After(time.Minute):
		t.Fatal("the Watch stream did not end when the broker drained")
	}
	select {
	case <-bDone:
		require.NoError(t, runErr)
	case <-time.After(time.Minute):
		t.Fatal("Run did not return: an open Watch held the drain")
	}
}

// v1alphaTransport sends reflection v1 requests to the v1alpha service
// (the messages are the same on the wire), so the v1 client can test it.
type v1alphaTransport struct{ next http.RoundTripper }

func (v v1alphaTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Path = strings.Replace(r.URL.Path, "/grpc.reflection.v1.", "/grpc.reflection.v1alpha.", 1)
	return v.next.RoundTrip(r)
}

// listServices lists the services base advertises through reflection, v1
// or v1alpha, with no credentials.
func listServices(t *testing.T, base string, v1alpha bool) []string {
	t.Helper()
	hc := h2c.Client()
	if v1alpha {
		hc.Transport = v1alphaTransport{hc.Transport}
	}
	stream := grpcreflect.NewClient(hc, base, connect.WithGRPC()).NewStream(t.Context())
	defer stream.Close()
	names, err := stream.ListServices()
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		out = append(out, string(n))
	}
	slices.Sort(out)
	return out
}

// TestBrokerReflectionListsClientServices: a broker's reflection (v1 and
// v1alpha, no credentials needed) lists exactly the services it serves to
// clients, and health and reflection; not the broker-to-broker
// ReplicaService, whose calls stay refused to anything but the broker
// credential. The services it lists are described.
func TestBrokerReflectionListsClientServices(t *testing.T) {
	t.Parallel()
	c := startLagCluster(t)
	base := "http://" + c.brokers[0].cfg.Advertised()
	want := []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		sluicev1connect.GroupServiceName,
		sluicev1connect.RecordServiceName,
		sluicev1connect.TransactionServiceName,
	}
	for _, v1alpha := range []bool{false, true} {
		require.Equal(t, want, listServices(t, base, v1alpha), "v1alpha=%v", v1alpha)
	}
	stream := grpcreflect.NewClient(h2c.Client(), base, connect.WithGRPC()).NewStream(t.Context())
	defer stream.Close()
	for _, svc := range want {
		files, err := stream.FileContainingSymbol(protoreflect.FullName(svc))
		require.NoError(t, err, svc)
		require.NotEmpty(t, files, svc)
	}

	// Unlisted is not unprotected: a tenant's token cannot call
	// ReplicaService, nor can a caller without one.
	for _, token := range []string{"", c.token} {
		replicas := sluicev1connect.NewReplicaServiceClient(h2c.Client(), base, connect.WithGRPC(), connect.WithInterceptors(tenants.Bearer(token)))
		_, err := replicas.FetchReplica(t.Context(), connect.NewRequest(&sluicev1.FetchReplicaRequest{}))
		require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "token %v: %v", token != "", err)
	}
	var ce *connect.Error
	_, err := sluicev1connect.NewRecordServiceClient(h2c.Client(), base, connect.WithGRPC()).
		GetMetadata(t.Context(), connect.NewRequest(&sluicev1.GetMetadataRequest{}))
	require.True(t, errors.As(err, &ce) && ce.Code() == connect.CodeUnauthenticated, "no token: %v", err)
}
