package tlsfiles

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/spf13/pflag"
)

// ServerFiles are a server's TLS files (the control plane's, a broker's):
// its API listener's, its external listener's, its operator listener's,
// a broker's Kafka listener's and its side of the calls between the
// cluster's servers. Each listener without a certificate serves plaintext.
type ServerFiles struct {
	API, External, Ops, Kafka, Cluster Files
}

// RegisterFlags registers --tls-cert, --tls-key, --tls-client-ca (the API
// listener), --metrics-tls-cert, --metrics-tls-key,
// --metrics-tls-client-ca (the operator listener), the same with
// external- (the external listener) and --cluster-ca,
// --cluster-cert, --cluster-key.
func (f *ServerFiles) RegisterFlags(fs *pflag.FlagSet) {
	RegisterListenerFlags(fs, &f.API, "", "the API listener (--listen-addr)")
	RegisterListenerFlags(fs, &f.External, "external-", "the external listener (--external-listen-addr)")
	RegisterListenerFlags(fs, &f.Ops, "metrics-", "the operator listener (--metrics-addr)")
	RegisterClusterFlags(fs, &f.Cluster)
}

// RegisterKafkaFlags registers --kafka-tls-cert, --kafka-tls-key and
// --kafka-tls-client-ca: a broker's Kafka listener (SASL_SSL with them,
// SASL_PLAINTEXT without).
func (f *ServerFiles) RegisterKafkaFlags(fs *pflag.FlagSet) {
	RegisterListenerFlags(fs, &f.Kafka, "kafka-", "the Kafka listener (--kafka-addr)")
}

// Validate names the first flag set without its pair.
func (f ServerFiles) Validate() error {
	for _, l := range []struct {
		f      Files
		prefix string
	}{{f.API, ""}, {f.External, "external-"}, {f.Ops, "metrics-"}, {f.Kafka, "kafka-"}} {
		if (l.f.Cert == "") != (l.f.Key == "") {
			return fmt.Errorf("--%[1]stls-cert and --%[1]stls-key go together", l.prefix)
		}
		if l.f.CA != "" && l.f.Cert == "" {
			return fmt.Errorf("--%[1]stls-client-ca needs --%[1]stls-cert and --%[1]stls-key", l.prefix)
		}
	}
	if (f.Cluster.Cert == "") != (f.Cluster.Key == "") {
		return errors.New("--cluster-cert and --cluster-key go together")
	}
	return nil
}

// Server holds what a server's ServerFiles loaded: nil for a listener
// without TLS, or no cluster files.
type Server struct {
	API, External, Ops, Kafka, Cluster *Source
}

// Load loads f's files (Validate first): an error names a file that does
// not load.
func (f ServerFiles) Load(logger *slog.Logger) (*Server, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Server{}
	for _, l := range []struct {
		f   Files
		dst **Source
	}{{f.API, &s.API}, {f.External, &s.External}, {f.Ops, &s.Ops}, {f.Kafka, &s.Kafka}, {f.Cluster, &s.Cluster}} {
		if l.f == (Files{}) {
			continue
		}
		src, err := Load(l.f, logger)
		if err != nil {
			return nil, err
		}
		*l.dst = src
	}
	return s, nil
}

// APIListener wraps the API listener ln with TLS when it has a
// certificate (ALPN h2 and http/1.1; client certificates from the
// cluster's CA are asked for, not required), else returns it as is. A
// nil s serves plaintext.
func (s *Server) APIListener(ln net.Listener, logger *slog.Logger) (net.Listener, error) {
	if s == nil || !s.API.Enabled() {
		warnPlaintext(ln, "API", "--tls-cert and --tls-key", logger)
		return ln, nil
	}
	cfg, err := s.API.ServerConfig(s.Cluster, "h2", "http/1.1")
	if err != nil {
		return nil, err
	}
	return tls.NewListener(guardListener{ln}, cfg), nil
}

// ExternalListener wraps the external listener ln with TLS when it has a
// certificate (ALPN h2 and http/1.1; no cluster certificates: the
// cluster's servers do not call each other there), else returns it as is.
func (s *Server) ExternalListener(ln net.Listener, logger *slog.Logger) (net.Listener, error) {
	if s == nil || !s.External.Enabled() {
		warnPlaintext(ln, "external", "--external-tls-cert and --external-tls-key", logger)
		return ln, nil
	}
	cfg, err := s.External.ServerConfig(nil, "h2", "http/1.1")
	if err != nil {
		return nil, err
	}
	return tls.NewListener(guardListener{ln}, cfg), nil
}

// OpsListener wraps the operator listener ln with TLS when it has a
// certificate, else returns it as is.
func (s *Server) OpsListener(ln net.Listener, logger *slog.Logger) (net.Listener, error) {
	if s == nil || !s.Ops.Enabled() {
		warnPlaintext(ln, "operator", "--metrics-tls-cert and --metrics-tls-key", logger)
		return ln, nil
	}
	cfg, err := s.Ops.ServerConfig(nil, "h2", "http/1.1")
	if err != nil {
		return nil, err
	}
	return tls.NewListener(guardListener{ln}, cfg), nil
}

// KafkaListener wraps the Kafka listener ln with TLS when it has a
// certificate (no ALPN: Kafka clients send none; client certificates are
// required with --kafka-tls-client-ca, else not asked for), else returns
// it as is.
func (s *Server) KafkaListener(ln net.Listener, logger *slog.Logger) (net.Listener, error) {
	if s == nil || !s.Kafka.Enabled() {
		warnPlaintext(ln, "Kafka", "--kafka-tls-cert and --kafka-tls-key", logger)
		return ln, nil
	}
	cfg, err := s.Kafka.ServerConfig(nil)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, cfg), nil
}

// ClusterSource is the cluster side (nil: none, or a nil s).
func (s *Server) ClusterSource() *Source {
	if s == nil {
		return nil
	}
	return s.Cluster
}

// warnPlaintext logs a warning when ln serves plaintext on an address
// beyond loopback: whatever crosses it (API keys, tokens, records) can
// be read on the way.
func warnPlaintext(ln net.Listener, name, flags string, logger *slog.Logger) {
	if logger == nil {
		return
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		logger.Warn("the "+name+" listener serves plaintext on an address beyond loopback: credentials and records cross the network in the clear; set "+flags+" to serve TLS",
			"addr", a.String())
	}
}
