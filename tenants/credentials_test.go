package tenants

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestCredentialsBearer(t *testing.T) {
	t.Parallel()
	var got []string
	mux := http.NewServeMux()
	mux.Handle("/t.S/U", connect.NewUnaryHandler("/t.S/U", func(_ context.Context, r *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		got = append(got, r.Header().Get("Authorization"))
		return connect.NewResponse(&emptypb.Empty{}), nil
	}))
	mux.Handle("/t.S/S", connect.NewServerStreamHandler("/t.S/S", func(_ context.Context, r *connect.Request[emptypb.Empty], _ *connect.ServerStream[emptypb.Empty]) error {
		got = append(got, r.Header().Get("Authorization"))
		return nil
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tok := range []string{"abc", ""} {
		u := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+"/t.S/U", connect.WithInterceptors(Bearer(tok)))
		_, err := u.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		require.NoError(t, err)
		s := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+"/t.S/S", connect.WithInterceptors(Bearer(tok)))
		st, err := s.CallServerStream(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		require.NoError(t, err)
		for st.Receive() {
		}
		require.NoError(t, st.Err())
	}
	require.Equal(t, []string{"Bearer abc", "Bearer abc", "", ""}, got)
}

func TestCredentialsInfrastructureProcedure(t *testing.T) {
	t.Parallel()
	require.True(t, IsInfrastructureProcedure("/grpc.health.v1.Health/Check"))
	require.True(t, IsInfrastructureProcedure("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"))
	require.False(t, IsInfrastructureProcedure("/grpc.health.v1.HealthX/Check"))
	require.False(t, IsInfrastructureProcedure("/sluice.v1.TopicService/ListTopics"))
}
