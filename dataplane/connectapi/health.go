package connectapi

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// ClientServices are the services a broker serves to tenants' clients and
// advertises through gRPC reflection and health. ReplicaService is left
// out on purpose: only other brokers call it, with the broker credential
// (every procedure of it is accessBroker in the access rules), so it has nothing to
// offer a tenant's tool, and it is not advertised on a port tenants reach.
// Its schema stays public (proto/), and leaving it unlisted protects
// nothing: the credential check does.
var ClientServices = []string{sluicev1connect.RecordServiceName, sluicev1connect.GroupServiceName, sluicev1connect.TransactionServiceName}

// DiscoveryServices are what reflection lists: the client services, and
// health and reflection themselves, as grpc-go servers list them.
var DiscoveryServices = append(slices.Clone(ClientServices),
	grpchealth.HealthV1ServiceName, grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName)

// Health answers grpc.health.v1.Health for the whole broker ("") and for
// each client service alike: SERVING exactly when NotReady says "" (the
// broker's readiness, as /readyz), NOT_SERVING otherwise. Any other
// service name, ReplicaService included, is NotFound. Watch streams get
// each change the broker announces with Changed; they end when the broker
// drains (healthwatch.EndOnDrain).
type Health struct {
	NotReady func() string

	mu   sync.Mutex
	next uint64
	fns  map[uint64]func() // the callbacks of open Watch streams
}

// Changed tells Watch streams that readiness may have changed: the broker
// calls it after each change NotReady looks at. The callbacks only signal
// a channel, so it never blocks.
func (h *Health) Changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, fn := range h.fns {
		fn()
	}
}

func (h *Health) add(fn func()) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fns == nil {
		h.fns = map[uint64]func(){}
	}
	id := h.next
	h.next++
	h.fns[id] = fn
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.fns, id)
	}
}

func (h *Health) known(service string) error {
	if service == "" || slices.Contains(ClientServices, service) {
		return nil
	}
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %s", service))
}

func (h *Health) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if err := h.known(req.Service); err != nil {
		return nil, err
	}
	if h.NotReady() != "" {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

func (h *Health) Watch(_ context.Context, req *grpchealth.CheckRequest, onChange func()) (func(), error) {
	if err := h.known(req.Service); err != nil {
		return nil, err
	}
	return h.add(onChange), nil
}
