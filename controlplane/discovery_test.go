package controlplane_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/emptypb"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// v1alphaTransport sends reflection v1 requests to the v1alpha service
// (the messages are the same on the wire), so the v1 client can test it.
type v1alphaTransport struct{ next http.RoundTripper }

func (v v1alphaTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.URL.Path = strings.Replace(r.URL.Path, "/grpc.reflection.v1.", "/grpc.reflection.v1alpha.", 1)
	return v.next.RoundTrip(r)
}

// TestControlPlaneReflectionListsEveryService: reflection (v1 and v1alpha,
// no credentials) lists every service the control plane answers —
// RecordService for GetMetadata, and health and reflection — and describes
// each; health answers SERVING for each of its own services. GroupService,
// of which it serves nothing, is not listed.
func TestControlPlaneReflectionListsEveryService(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	want := []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		sluicev1connect.APIKeyServiceName,
		sluicev1connect.AlertServiceName,
		sluicev1connect.AuthServiceName,
		sluicev1connect.BillingServiceName,
		sluicev1connect.BrokerServiceName,
		sluicev1connect.OperatorServiceName,
		sluicev1connect.RecordServiceName,
		sluicev1connect.TenantServiceName,
		sluicev1connect.TopicServiceName,
	}
	for _, v1alpha := range []bool{false, true} {
		hc := &http.Client{Transport: c.hc.Transport}
		if v1alpha {
			hc.Transport = v1alphaTransport{hc.Transport}
		}
		stream := grpcreflect.NewClient(hc, c.endpoint, connect.WithGRPC()).NewStream(t.Context())
		names, err := stream.ListServices()
		require.NoError(t, err)
		var got []string
		for _, n := range names {
			got = append(got, string(n))
		}
		slices.Sort(got)
		require.Equal(t, want, got, "v1alpha=%v", v1alpha)
		for _, svc := range want {
			files, err := stream.FileContainingSymbol(protoreflect.FullName(svc))
			require.NoError(t, err, svc)
			require.NotEmpty(t, files, svc)
		}
		_, _ = stream.Close()
	}

	health := grpchealth.NewClient(c.hc, c.endpoint, connect.WithGRPC())
	for _, svc := range append([]string{""}, want[3:]...) {
		res, err := health.Check(t.Context(), &grpchealth.CheckRequest{Service: svc})
		require.NoError(t, err, svc)
		require.Equal(t, grpchealth.StatusServing, res.Status, svc)
	}
}

// TestControlPlanePointsBrokerCallsAtTheBrokers: a RecordService or
// GroupService call that only brokers serve answers Unimplemented with a
// message saying so and how to find them, the same for every caller (no
// token, a bad one, a tenant's), so it tells an anonymous caller nothing
// about any tenant. GetMetadata still needs a token. A procedure that is
// neither answers Unimplemented, without the pointer.
func TestControlPlanePointsBrokerCallsAtTheBrokers(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	a := c.signup(t, "olga")
	ctx := t.Context()
	for _, token := range []string{"", "not-a-token", a.token} {
		records := sluicev1connect.NewRecordServiceClient(c.hc, c.endpoint, connect.WithGRPC(), bearer(token))
		groups := sluicev1connect.NewGroupServiceClient(c.hc, c.endpoint, connect.WithGRPC(), bearer(token))
		calls := map[string]func() error{
			"RecordService.Produce": func() error {
				_, err := records.Produce(ctx, connect.NewRequest(&sluicev1.ProduceRequest{Topic: "orders"}))
				return err
			},
			"RecordService.Fetch": func() error {
				_, err := records.Fetch(ctx, connect.NewRequest(&sluicev1.FetchRequest{Topic: "orders"}))
				return err
			},
			"RecordService.ListOffsets": func() error {
				_, err := records.ListOffsets(ctx, connect.NewRequest(&sluicev1.ListOffsetsRequest{Topic: "orders"}))
				return err
			},
			"RecordService.InitProducerId": func() error {
				_, err := records.InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{}))
				return err
			},
			"GroupService.FindCoordinator": func() error {
				_, err := groups.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: "g"}))
				return err
			},
			"GroupService.CommitOffsets": func() error {
				_, err := groups.CommitOffsets(ctx, connect.NewRequest(&sluicev1.CommitOffsetsRequest{Group: "g"}))
				return err
			},
			"GroupService.ListGroups": func() error {
				_, err := groups.ListGroups(ctx, connect.NewRequest(&sluicev1.ListGroupsRequest{}))
				return err
			},
		}
		for name, call := range calls {
			err := call()
			method := name[strings.Index(name, ".")+1:]
			requireCode(t, connect.CodeUnimplemented, err,
				name+" is served by brokers, not the control plane: call RecordService.GetMetadata here for the broker addresses",
				"then call "+method+" on any broker")
			require.NotContains(t, err.Error(), a.tenantID)
		}

		_, err := records.GetMetadata(ctx, connect.NewRequest(&sluicev1.GetMetadataRequest{}))
		if token == a.token {
			require.NoError(t, err)
		} else {
			requireCode(t, connect.CodeUnauthenticated, err)
		}

		// Neither served here nor by brokers.
		for _, proc := range []string{
			"/sluice.v1.RecordService/Bogus", "/sluice.v1.GroupService/Bogus",
			"/sluice.v1.TopicService/Bogus", "/sluice.v1.NoSuchService/Produce", "/grpc.health.v1.Health/Bogus",
		} {
			bogus := connect.NewClient[emptypb.Empty, emptypb.Empty](c.hc, c.endpoint+proc, connect.WithGRPC(), bearer(token))
			_, err := bogus.CallUnary(ctx, connect.NewRequest(&emptypb.Empty{}))
			requireCode(t, connect.CodeUnimplemented, err)
			require.NotContains(t, err.Error(), "served by brokers", proc)
		}
	}
}

// TestControlPlaneHealthWatchEndsOnDrain: when the control plane shuts
// down, an open health Watch stream is told NOT_SERVING and ends, so the
// drain neither waits for it until its timeout nor ends in an error.
func TestControlPlaneHealthWatchEndsOnDrain(t *testing.T) {
	t.Parallel()
	c := start(t, "sqlite:"+t.TempDir()+"/cp.db")
	health := grpchealth.NewClient(c.streamHC, c.endpoint, connect.WithGRPC())
	events := health.Watch(t.Context(), &grpchealth.CheckRequest{})
	ev := <-events
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusServing, ev.Response.Status)
	c.stop() // fails the test if Run returns an error (the drain timed out)
	ev, ok := <-events
	require.True(t, ok, "the stream ended without NOT_SERVING")
	require.NoError(t, ev.Err)
	require.Equal(t, grpchealth.StatusNotServing, ev.Response.Status)
	_, ok = <-events
	require.False(t, ok, "the stream ends after NOT_SERVING")
}
