package broker

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// clientServices are the services a broker serves to tenants' clients and
// advertises through gRPC reflection and health. ReplicaService is left
// out on purpose: only other brokers call it, with the broker credential
// (every procedure of it is accessBroker in rules), so it has nothing to
// offer a tenant's tool, and it is not advertised on a port tenants reach.
// Its schema stays public (proto/), and leaving it unlisted protects
// nothing: the credential check does.
var clientServices = []string{sluicev1connect.RecordServiceName, sluicev1connect.GroupServiceName, sluicev1connect.TransactionServiceName}

// discoveryServices are what reflection lists: the client services, and
// health and reflection themselves, as grpc-go servers list them.
var discoveryServices = append(slices.Clone(clientServices),
	grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)

// notReady says why the broker cannot serve clients yet, or "" when it
// can: it runs (not before Run, not while it drains), is registered with
// the control plane, has loaded the API key revocation list (tenant calls
// fail closed until then), and has applied its first assignments from the
// control plane (until then it knows no topic and answers Unavailable for
// every one). /readyz and gRPC health both answer from it.
func (b *Broker) notReady() string {
	ctx := b.runContext()
	switch {
	case ctx == nil:
		return "not started"
	case ctx.Err() != nil:
		return "shutting down"
	case b.brokerEpoch.Load() == 0:
		return "not registered with the control plane yet"
	case !b.revoked.Loaded():
		return "API key revocation list not loaded yet"
	case !b.assigned.Load():
		return "no partition assignments from the control plane yet"
	}
	return ""
}

// serveReady answers /readyz: 200 when the broker is ready (notReady),
// 503 with the reason otherwise.
func (b *Broker) serveReady(w http.ResponseWriter, _ *http.Request) {
	if why := b.notReady(); why != "" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// healthWatchers are the callbacks of open gRPC health Watch streams;
// notify calls each (they only signal a channel, so it never blocks).
type healthWatchers struct {
	mu   sync.Mutex
	next uint64
	fns  map[uint64]func()
}

func (w *healthWatchers) add(fn func()) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[uint64]func(){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, id)
	}
}

func (w *healthWatchers) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, fn := range w.fns {
		fn()
	}
}

// runContext is Run's context (nil before Run): it ends when the broker
// begins to drain.
func (b *Broker) runContext() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runCtx
}

// healthChanged tells Watch streams that readiness may have changed: call
// it after each change notReady looks at.
func (b *Broker) healthChanged() { b.health.notify() }

// healthChecker answers grpc.health.v1.Health for the whole broker ("")
// and for each client service alike: SERVING exactly when the broker is
// ready (notReady, as /readyz), NOT_SERVING otherwise. Any other service
// name, ReplicaService included, is NotFound. Watch streams get each
// change; they end when the broker drains (healthwatch.EndOnDrain).
type healthChecker struct{ b *Broker }

func (h healthChecker) known(service string) error {
	if service == "" || slices.Contains(clientServices, service) {
		return nil
	}
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %s", service))
}

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if err := h.known(req.Service); err != nil {
		return nil, err
	}
	if h.b.notReady() != "" {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

func (h healthChecker) Watch(_ context.Context, req *grpchealth.CheckRequest, onChange func()) (func(), error) {
	if err := h.known(req.Service); err != nil {
		return nil, err
	}
	return h.b.health.add(onChange), nil
}
