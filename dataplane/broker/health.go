package broker

import (
	"context"
	"net/http"
)

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

// runContext is Run's context (nil before Run): it ends when the broker
// begins to drain.
func (b *Broker) runContext() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runCtx
}

// healthChanged tells Watch streams that readiness may have changed: call
// it after each change notReady looks at.
func (b *Broker) healthChanged() { b.health.Changed() }
