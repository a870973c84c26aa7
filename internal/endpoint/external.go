package endpoint

import (
	"context"
	"net"
	"net/http"
	"strings"
)

// ExternalConnContext wraps a server's ConnContext (nil: none) for its
// external listener: every request on the connection is External.
func ExternalConnContext(next func(context.Context, net.Conn) context.Context) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, c)
		}
		return External(ctx)
	}
}

// ExternalHandler serves h on an external listener, except the services
// only the cluster's servers call there (internal, by their path prefix,
// "/sluice.v1.ReplicaService/"): those are answered 404, which Connect and
// gRPC clients read as unimplemented. The broker credential then never
// needs to cross the external listener.
func ExternalHandler(h http.Handler, internal ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range internal {
			if strings.HasPrefix(r.URL.Path, p) {
				http.Error(w, "not served on the external listener", http.StatusNotFound)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
