package tlsfiles

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The identities a cluster certificate carries, as its one sluice:// URI
// SAN: a broker's (sluice://broker/3) or the control plane's. Brokers
// and the control plane present them to each other with mutual TLS.
const (
	brokerURIPrefix = "sluice://broker/"
	ControlPlaneURI = "sluice://controlplane"
)

// BrokerURI is broker id's identity.
func BrokerURI(id int32) string { return brokerURIPrefix + strconv.FormatInt(int64(id), 10) }

// Peer is the server of the cluster a client certificate proved the
// caller to be: a broker, or the control plane.
type Peer struct {
	ControlPlane bool
	Broker       int32 // when not ControlPlane
}

func (p Peer) String() string {
	if p.ControlPlane {
		return ControlPlaneURI
	}
	return BrokerURI(p.Broker)
}

// ErrNoPeer refuses a call that had to present a cluster certificate.
var ErrNoPeer = errors.New("mutual TLS: the broker credential needs a client certificate from the cluster CA naming its server (sluice://broker/<id> or sluice://controlplane)")

// PeerOf returns whom the client certificate of the connection cs proves
// the caller to be, checked against s's CA (the cluster's) as its file
// holds it now: the certificate must chain to that CA for client
// authentication and carry exactly one sluice:// URI SAN, a broker's or
// the control plane's. An error wrapping ErrNoPeer otherwise (a plaintext
// connection, no certificate, another CA, no identity or a bad one).
func (s *Source) PeerOf(cs *tls.ConnectionState) (Peer, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Peer{}, ErrNoPeer
	}
	pool := s.current().pool
	if pool == nil {
		return Peer{}, fmt.Errorf("%w: no cluster CA to check it against (--cluster-ca)", ErrNoPeer)
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrNoPeer, err)
	}
	var ids []string
	for _, u := range leaf.URIs {
		if u.Scheme == "sluice" {
			ids = append(ids, u.String())
		}
	}
	if len(ids) != 1 {
		return Peer{}, fmt.Errorf("%w: the certificate of %q carries %d sluice:// identities", ErrNoPeer, leaf.Subject.CommonName, len(ids))
	}
	if ids[0] == ControlPlaneURI {
		return Peer{ControlPlane: true}, nil
	}
	if n, ok := strings.CutPrefix(ids[0], brokerURIPrefix); ok {
		if id, err := strconv.ParseInt(n, 10, 32); err == nil && id >= 0 && strconv.FormatInt(id, 10) == n {
			return Peer{Broker: int32(id)}, nil
		}
	}
	return Peer{}, fmt.Errorf("%w: %q is neither sluice://broker/<id> nor %s", ErrNoPeer, ids[0], ControlPlaneURI)
}

type connStateKey struct{}

// Handler passes each request's TLS connection state (nil on plaintext)
// to its context, where ConnState finds it: the authenticators take the
// caller's certificate from there.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			r = r.WithContext(context.WithValue(r.Context(), connStateKey{}, r.TLS))
		}
		h.ServeHTTP(w, r)
	})
}

// ConnState is the TLS state of the connection a request came on, as
// Handler recorded it; nil for plaintext or outside Handler.
func ConnState(ctx context.Context) *tls.ConnectionState {
	cs, _ := ctx.Value(connStateKey{}).(*tls.ConnectionState)
	return cs
}
