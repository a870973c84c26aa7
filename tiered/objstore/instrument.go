package objstore

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operation names, the op label of the metrics.
const (
	opPut    = "put"
	opGet    = "get"
	opHead   = "head"
	opDelete = "delete"
	opList   = "list"
)

// Results, the result label of the metrics.
const (
	resultOK       = "ok"
	resultNotFound = "not_found"
	resultCanceled = "canceled" // the caller's context ended
	resultError    = "error"
)

// metrics are shared by every instrumented store of one registry; the backend label tells them
// apart.
type metrics struct {
	ops      *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "objstore",
			Name: "operations_total",
			Help: "Object-store operations by backend, operation (put, get, head, delete, list) and result " +
				"(ok, not_found, canceled, error).",
		}, []string{"backend", "op", "result"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "objstore",
			Name: "bytes_total",
			Help: "Object bytes transferred by backend and operation: stored by successful puts, read from gets.",
		}, []string{"backend", "op"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "objstore",
			Name: "operation_duration_seconds",
			Help: "Object-store operation latency by backend and operation. A get is timed to its first " +
				"byte (until Get returns), a list over the whole iteration.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms .. 65 s
		}, []string{"backend", "op"}),
	}
	m.ops = register(reg, m.ops)
	m.bytes = register(reg, m.bytes)
	m.duration = register(reg, m.duration)
	return m
}

// register registers c, or returns the equal collector registered before (a second instrumented
// store on the same registry). It panics on other registration errors, which are programming
// errors, like prometheus.MustRegister.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}

// Instrument returns s with Prometheus metrics registered with reg: sluice_objstore_operations_total
// {backend, op, result}, sluice_objstore_bytes_total{backend, op} and
// sluice_objstore_operation_duration_seconds{backend, op}, with backend = name (e.g. "s3",
// "folder"). Labels are bounded: five operations, four results, one backend per store. Several
// stores may be instrumented on one registry under different names. The returned store keeps s's
// contract. Like prometheus.MustRegister, it panics if reg holds different metrics under these
// names.
func Instrument(s Store, reg prometheus.Registerer, name string) Store {
	return &instrumented{next: s, m: newMetrics(reg), backend: name}
}

type instrumented struct {
	next    Store
	m       *metrics
	backend string
}

func (s *instrumented) observe(op string, start time.Time, err error) {
	s.m.ops.WithLabelValues(s.backend, op, result(err)).Inc()
	s.m.duration.WithLabelValues(s.backend, op).Observe(time.Since(start).Seconds())
}

func result(err error) string {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ErrNotFound):
		return resultNotFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resultCanceled
	}
	return resultError
}

func (s *instrumented) Put(ctx context.Context, key string, body io.Reader, size int64) error {
	start := time.Now()
	err := s.next.Put(ctx, key, body, size)
	s.observe(opPut, start, err)
	if err == nil {
		s.m.bytes.WithLabelValues(s.backend, opPut).Add(float64(size))
	}
	return err
}

func (s *instrumented) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := s.next.Get(ctx, key, off, n)
	s.observe(opGet, start, err)
	if err != nil {
		return nil, err
	}
	return &countingReader{ReadCloser: rc, bytes: s.m.bytes.WithLabelValues(s.backend, opGet)}, nil
}

// countingReader counts the bytes read from a Get.
type countingReader struct {
	io.ReadCloser
	bytes prometheus.Counter
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		r.bytes.Add(float64(n))
	}
	return n, err
}

func (s *instrumented) Head(ctx context.Context, key string) (Info, error) {
	start := time.Now()
	info, err := s.next.Head(ctx, key)
	s.observe(opHead, start, err)
	return info, err
}

func (s *instrumented) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := s.next.Delete(ctx, key)
	s.observe(opDelete, start, err)
	return err
}

func (s *instrumented) List(ctx context.Context, prefix string) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		start := time.Now()
		var err error
		for info, e := range s.next.List(ctx, prefix) {
			if e != nil {
				err = e
			}
			if !yield(info, e) {
				break
			}
		}
		s.observe(opList, start, err)
	}
}
