// Package rpcmetrics counts Connect RPCs for Prometheus: requests and
// latency by procedure and code. The procedure label is bounded by the
// services a process mounts; unknown procedures are counted under "other"
// so a scanner cannot blow up cardinality.
//
// Requests that Connect refuses before any interceptor runs (a body over
// the read limit, an undecodable message) are not counted here.
package rpcmetrics

import (
	"context"
	"errors"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
)

// Interceptor records RPC metrics. Safe for concurrent use.
type Interceptor struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	services []string
}

// New registers the metrics with reg under the given namespace and
// subsystem ("sluice", "controlplane") and returns the interceptor. Only
// procedures of the listed services ("sluice.v1.TopicService", ...) get
// their own label value.
func New(reg prometheus.Registerer, namespace, subsystem string, services []string) *Interceptor {
	i := &Interceptor{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name: "rpc_requests_total",
			Help: "RPCs handled, by procedure and Connect code (\"ok\" on success).",
		}, []string{"procedure", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: subsystem,
			Name:    "rpc_duration_seconds",
			Help:    "RPC handling time by procedure and Connect code.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"procedure", "code"}),
		services: services,
	}
	reg.MustRegister(i.requests, i.duration)
	return i
}

func (i *Interceptor) label(procedure string) string {
	for _, s := range i.services {
		if strings.HasPrefix(procedure, "/"+s+"/") {
			return procedure
		}
	}
	return "other"
}

func (i *Interceptor) observe(procedure string, start time.Time, err error) {
	p := i.label(procedure)
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
		var ce *connect.Error
		if !errors.As(err, &ce) {
			code = connect.CodeUnknown.String()
		}
	}
	i.requests.WithLabelValues(p, code).Inc()
	i.duration.WithLabelValues(p, code).Observe(time.Since(start).Seconds())
}

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		res, err := next(ctx, req)
		i.observe(req.Spec().Procedure, start, err)
		return res, err
	}
}

// WrapStreamingClient implements connect.Interceptor (client streams pass through).
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		i.observe(conn.Spec().Procedure, start, err)
		return err
	}
}
