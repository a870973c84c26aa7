package tenants

import (
	"context"
	"strings"

	"connectrpc.com/connect"
)

// Bearer returns a client interceptor that sends "Authorization: Bearer
// token" on unary and streaming calls; an empty token sends nothing.
// Clients of every Sluice service (CLI, brokers, tests) use it.
func Bearer(token string) connect.Interceptor { return bearerCredentials(token) }

type bearerCredentials string

func (t bearerCredentials) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if t != "" && req.Spec().IsClient {
			req.Header().Set("Authorization", "Bearer "+string(t))
		}
		return next(ctx, req)
	}
}

func (t bearerCredentials) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if t != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(t))
		}
		return conn
	}
}

func (t bearerCredentials) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// infrastructurePrefixes are the services every Sluice server leaves open:
// gRPC health checks and reflection (which describes only the public
// schema).
var infrastructurePrefixes = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// IsInfrastructureProcedure reports whether procedure is a health or
// reflection call, which Authenticators answer as public.
func IsInfrastructureProcedure(procedure string) bool {
	for _, p := range infrastructurePrefixes {
		if strings.HasPrefix(procedure, p) {
			return true
		}
	}
	return false
}
