// Package healthwatch ends gRPC health Watch streams
// (grpc.health.v1.Health/Watch, served by connectrpc.com/grpchealth) when
// a server begins to drain, once each stream has sent NOT_SERVING. A
// client-side health checker keeps its Watch open for good, and an open
// stream holds a graceful HTTP shutdown until its timeout.
package healthwatch

import (
	"context"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// EndOnDrain returns an interceptor for a grpchealth handler: a Watch
// stream ends (its handler's context is cancelled, and it returns OK) as
// soon as the context draining returns is done and the last status the
// stream sent is NOT_SERVING. The server's checker must answer NOT_SERVING
// once draining has begun and notify its watchers then (as
// grpchealth.StaticChecker.SetStatus does), so that each stream sends it
// before it ends. draining may return nil (not serving yet): streams are
// then left alone. Unary Check calls pass untouched.
func EndOnDrain(draining func() context.Context) connect.Interceptor {
	return endOnDrain{draining}
}

type endOnDrain struct{ draining func() context.Context }

func (endOnDrain) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (endOnDrain) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e endOnDrain) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		drain := e.draining()
		if drain == nil || conn.Spec().IsClient {
			return next(ctx, conn)
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := &watchConn{StreamingHandlerConn: conn, drain: drain, cancel: cancel}
		stop := context.AfterFunc(drain, w.draining)
		defer stop()
		return next(ctx, w)
	}
}

// watchConn is a Watch stream that ends (cancel) once draining has begun
// and the last status it sent is NOT_SERVING.
type watchConn struct {
	connect.StreamingHandlerConn
	drain  context.Context
	cancel func()

	mu         sync.Mutex
	notServing bool // the last status sent
}

func (w *watchConn) Send(msg any) error {
	err := w.StreamingHandlerConn.Send(msg)
	w.mu.Lock()
	w.notServing = isNotServing(msg)
	end := w.notServing && w.drain.Err() != nil
	w.mu.Unlock()
	if end || err != nil {
		w.cancel()
	}
	return err
}

func (w *watchConn) draining() {
	w.mu.Lock()
	end := w.notServing
	w.mu.Unlock()
	if end {
		w.cancel()
	}
}

// isNotServing reads the status of a grpc.health.v1.HealthCheckResponse
// (grpchealth keeps its generated type internal).
func isNotServing(msg any) bool {
	m, ok := msg.(proto.Message)
	if !ok {
		return false
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName("status")
	return fd != nil && fd.Kind() == protoreflect.EnumKind && r.Get(fd).Enum() == protoreflect.EnumNumber(grpchealth.StatusNotServing)
}
