package tenants

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/emptypb"
)

const (
	unaryProcedure  = "/sluice.test.v1.TestService/Unary"
	streamProcedure = "/sluice.test.v1.TestService/Stream"
	publicProcedure = "/sluice.test.v1.TestService/Public"
)

// authFunc adapts a function to Authenticator.
type authFunc func(ctx context.Context, procedure string, h http.Header) (Principal, error)

func (f authFunc) Authenticate(ctx context.Context, procedure string, h http.Header) (Principal, error) {
	return f(ctx, procedure, h)
}

// principalHeaders reports the handler's view of the caller in response headers.
func principalHeaders(ctx context.Context, h http.Header) error {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return connect.NewError(connect.CodeInternal, errors.New("handler ran without a principal"))
	}
	h.Set("X-Kind", p.Kind.String())
	h.Set("X-Tenant", p.TenantID)
	h.Set("X-Scopes", strings.Join(p.Scopes, ","))
	return nil
}

// newTestServer serves a unary, a public unary and a server-streaming procedure behind the auth
// interceptor, over HTTP/2 with TLS so that the Connect, gRPC and gRPC-Web protocols all work.
// A stream request with header "X-Wait: 1" sends one message and then waits for cancellation.
func newTestServer(t *testing.T, a Authenticator) *httptest.Server {
	t.Helper()
	opts := connect.WithInterceptors(NewAuthInterceptor(a))
	unary := func(ctx context.Context, _ *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
		resp := connect.NewResponse(&emptypb.Empty{})
		if err := principalHeaders(ctx, resp.Header()); err != nil {
			return nil, err
		}
		return resp, nil
	}
	mux := http.NewServeMux()
	mux.Handle(unaryProcedure, connect.NewUnaryHandler(unaryProcedure, unary, opts))
	mux.Handle(publicProcedure, connect.NewUnaryHandler(publicProcedure, unary, opts))
	mux.Handle(streamProcedure, connect.NewServerStreamHandler(streamProcedure,
		func(ctx context.Context, req *connect.Request[emptypb.Empty], stream *connect.ServerStream[emptypb.Empty]) error {
			if err := principalHeaders(ctx, stream.ResponseHeader()); err != nil {
				return err
			}
			if err := stream.Send(&emptypb.Empty{}); err != nil {
				return err
			}
			if req.Header().Get("X-Wait") != "" {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, opts))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{name: "connect"},
	{name: "grpc", opts: []connect.ClientOption{connect.WithGRPC()}},
	{name: "grpcweb", opts: []connect.ClientOption{connect.WithGRPCWeb()}},
}

func callUnary(t *testing.T, srv *httptest.Server, procedure, token string, opts ...connect.ClientOption) (*connect.Response[emptypb.Empty], error) {
	t.Helper()
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+procedure, opts...)
	req := connect.NewRequest(&emptypb.Empty{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	return client.CallUnary(t.Context(), req)
}

// callStream receives the whole stream and returns its response headers and final error.
func callStream(t *testing.T, srv *httptest.Server, token string, wait bool, opts ...connect.ClientOption) (http.Header, int, error) {
	t.Helper()
	client := connect.NewClient[emptypb.Empty, emptypb.Empty](srv.Client(), srv.URL+streamProcedure, opts...)
	req := connect.NewRequest(&emptypb.Empty{})
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	if wait {
		req.Header().Set("X-Wait", "1")
	}
	stream, err := client.CallServerStream(t.Context(), req)
	if err != nil {
		return nil, 0, err
	}
	defer stream.Close()
	n := 0
	for stream.Receive() {
		n++
	}
	return stream.ResponseHeader(), n, stream.Err()
}

func TestAuthInterceptorTokens(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	srv := newTestServer(t, NewTokenAuthenticator(e.verifier, publicProcedure))
	tok := e.mint(t)
	apiKey, err := GenerateAPIKey()
	require.NoError(t, err)

	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			t.Parallel()

			resp, err := callUnary(t, srv, unaryProcedure, tok, proto.opts...)
			require.NoError(t, err)
			require.Equal(t, "tenant", resp.Header().Get("X-Kind"))
			require.Equal(t, e.tenant.TenantID, resp.Header().Get("X-Tenant"))
			require.Equal(t, "produce,consume", resp.Header().Get("X-Scopes"))

			h, n, err := callStream(t, srv, tok, false, proto.opts...)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, "tenant", h.Get("X-Kind"))
			require.Equal(t, e.tenant.TenantID, h.Get("X-Tenant"))

			resp, err = callUnary(t, srv, publicProcedure, "", proto.opts...)
			require.NoError(t, err)
			require.Equal(t, "anonymous", resp.Header().Get("X-Kind"))
			require.Empty(t, resp.Header().Get("X-Tenant"))

			refusals := []struct {
				name   string
				token  string
				reason string
			}{
				{name: "missing token", token: "", reason: "missing credentials"},
				{name: "garbage token", token: "garbage", reason: "invalid token: malformed token"},
				{name: "tampered token", token: tok[:len(tok)-4] + "AAAA", reason: "invalid token: invalid signature"},
				{name: "api key", token: apiKey.Secret, reason: "api keys are not accepted here"},
			}
			for _, r := range refusals {
				_, err = callUnary(t, srv, unaryProcedure, r.token, proto.opts...)
				require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "unary, %s: %v", r.name, err)
				require.ErrorContains(t, err, r.reason)

				_, n, err = callStream(t, srv, r.token, false, proto.opts...)
				require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "stream, %s: %v", r.name, err)
				require.ErrorContains(t, err, r.reason)
				require.Zero(t, n, "the stream handler must not run")
			}
		})
	}
}

func TestAuthInterceptorErrorMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		wantCode connect.Code
		wantMsg  string
	}{
		{name: "missing credentials", err: ErrMissingCredentials, wantCode: connect.CodeUnauthenticated, wantMsg: "missing credentials"},
		{name: "invalid token", err: invalidToken("token expired"), wantCode: connect.CodeUnauthenticated, wantMsg: "invalid token: token expired"},
		{name: "unknown key", err: ErrUnknownKey, wantCode: connect.CodeUnauthenticated, wantMsg: "unknown key id"},
		{name: "malformed api key", err: ErrMalformedAPIKey, wantCode: connect.CodeUnauthenticated, wantMsg: "malformed api key"},
		{name: "permission denied", err: Principal{}.Require(ScopeAdmin), wantCode: connect.CodePermissionDenied, wantMsg: `permission denied: scope "admin" required`},
		{name: "connect error passes through", err: connect.NewError(connect.CodeUnavailable, errors.New("control plane starting")), wantCode: connect.CodeUnavailable, wantMsg: "control plane starting"},
		{name: "anything else is internal", err: errors.New("query api_keys: dial tcp 10.0.0.7:5432: connection refused"), wantCode: connect.CodeInternal, wantMsg: "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newTestServer(t, authFunc(func(context.Context, string, http.Header) (Principal, error) {
				return Principal{}, tt.err
			}))
			_, err := callUnary(t, srv, unaryProcedure, "x")
			var ce *connect.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.wantCode, ce.Code())
			require.Equal(t, tt.wantMsg, ce.Message())

			_, _, err = callStream(t, srv, "x", false)
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tt.wantCode, ce.Code())
			require.Equal(t, tt.wantMsg, ce.Message())
		})
	}

	// The cause of an internal error stays reachable on the server side, for logs.
	cause := errors.New("db down")
	mapped := authError(cause)
	require.ErrorIs(t, mapped, cause)
	require.Equal(t, "internal error", mapped.(*connect.Error).Message())
}

func TestAuthInterceptorStreamEndsAtTokenExpiry(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t, authFunc(func(context.Context, string, http.Header) (Principal, error) {
		return Principal{Kind: PrincipalTenant, TenantID: "t1", Scopes: []string{ScopeConsume},
			ExpiresAt: time.Now().Add(300 * time.Millisecond)}, nil
	}))
	for _, proto := range protocols {
		t.Run(proto.name, func(t *testing.T) {
			t.Parallel()
			_, n, err := callStream(t, srv, "x", true, proto.opts...)
			require.Equal(t, 1, n, "the stream ran until the token expired")
			require.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "%v", err)
			require.ErrorContains(t, err, "token expired")
		})
	}
}

func TestAuthInterceptorClientSidePassesThrough(t *testing.T) {
	t.Parallel()
	e := setupTokens(t)
	srv := newTestServer(t, NewTokenAuthenticator(e.verifier))
	var called atomic.Bool
	clientSide := NewAuthInterceptor(authFunc(func(context.Context, string, http.Header) (Principal, error) {
		called.Store(true)
		return Principal{}, errors.New("must not be called on the client side")
	}))
	tok := e.mint(t)
	_, err := callUnary(t, srv, unaryProcedure, tok, connect.WithInterceptors(clientSide))
	require.NoError(t, err)
	_, n, err := callStream(t, srv, tok, false, connect.WithInterceptors(clientSide))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, called.Load())
}

func TestAuthBearerToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		values  []string
		want    string
		wantErr error
	}{
		{name: "bearer", values: []string{"Bearer abc.def.ghi"}, want: "abc.def.ghi"},
		{name: "scheme case-insensitive", values: []string{"bearer abc"}, want: "abc"},
		{name: "missing", values: nil, wantErr: ErrMissingCredentials},
		{name: "basic", values: []string{"Basic dXNlcjpwYXNz"}, wantErr: ErrInvalidToken},
		{name: "no scheme", values: []string{"abc.def.ghi"}, wantErr: ErrInvalidToken},
		{name: "empty token", values: []string{"Bearer "}, wantErr: ErrInvalidToken},
		{name: "two headers", values: []string{"Bearer a", "Bearer b"}, wantErr: ErrInvalidToken},
		{name: "over 8 KiB", values: []string{"Bearer " + strings.Repeat("a", MaxTokenBytes+1)}, wantErr: ErrInvalidToken},
		{name: "dots over 8 KiB", values: []string{"Bearer " + strings.Repeat(".", 1<<20)}, wantErr: ErrInvalidToken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add("Authorization", v)
			}
			got, err := BearerToken(h)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
