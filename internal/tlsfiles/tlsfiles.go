// Package tlsfiles builds the TLS configurations of Sluice's listeners and
// of the calls its servers make to each other from PEM files, and re-reads
// those files when they change: cert-manager, Kubernetes secrets and
// certbot replace them in place (often by swapping a symlink), and a
// server picks the new certificate up without a restart or a dropped
// connection. Handshakes after the change use the new files; connections
// already open keep the certificate they were made with.
//
// A change is noticed by the files' size, modification time and inode,
// checked at most once per CheckEvery on a handshake. A set of files that
// does not load (a certificate whose key is not there yet, half of a
// rotation) is logged and the previous one kept, until the files load.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
)

// CheckEvery is how often, at most, a handshake looks at the files.
const CheckEvery = time.Second

// Files names the PEM files of one side of a TLS connection.
type Files struct {
	// Cert and Key are the certificate chain (leaf first) and its private
	// key: a server's certificate, or a client's for mutual TLS.
	Cert, Key string
	// CA holds the certificates that the peer's chain must end at: on a
	// server, its clients' (mutual TLS: a client without a certificate
	// that chains to one of them is refused); on a client, the servers'
	// (empty: the system's roots).
	CA string
}

// files is a snapshot of what was loaded from Files.
type loaded struct {
	cert  *tls.Certificate    // nil without Cert
	pool  *x509.CertPool      // nil without CA
	cas   []*x509.Certificate // the CA file's certificates
	stamp [3]fileStamp
}

type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// Source holds what Files loaded and loads them again when they change.
type Source struct {
	files  Files
	logger *slog.Logger
	now    func() time.Time

	mu        sync.Mutex
	cur       loaded
	checked   time.Time
	lastError string // the last failed reload's, logged once
}

// Load reads f's files: an error when a file named cannot be read or
// parsed, or Cert and Key do not name both or neither.
func Load(f Files, logger *slog.Logger) (*Source, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("tls: a certificate needs its key and a key its certificate (--tls-cert and --tls-key)")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: f, logger: logger, now: time.Now}
	l, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur, s.checked = l, s.now()
	return s, nil
}

func (s *Source) load() (loaded, error) {
	var l loaded
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if name == "" {
			continue
		}
		st, err := stamp(name)
		if err != nil {
			return loaded{}, fmt.Errorf("tls: %w", err)
		}
		l.stamp[i] = st
	}
	if s.files.Cert != "" {
		c, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
		if err != nil {
			return loaded{}, fmt.Errorf("tls: load certificate %s and key %s: %w", s.files.Cert, s.files.Key, err)
		}
		l.cert = &c
	}
	if s.files.CA != "" {
		rest, err := os.ReadFile(s.files.CA)
		if err != nil {
			return loaded{}, fmt.Errorf("tls: %w", err)
		}
		l.pool = x509.NewCertPool()
		for {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			if blk.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return loaded{}, fmt.Errorf("tls: CA file %s: %w", s.files.CA, err)
			}
			l.cas = append(l.cas, c)
			l.pool.AddCert(c)
		}
		if len(l.cas) == 0 {
			return loaded{}, fmt.Errorf("tls: no PEM certificate in CA file %s", s.files.CA)
		}
	}
	return l, nil
}

func stamp(name string) (fileStamp, error) {
	fi, err := os.Stat(name) // follows the symlink a Kubernetes secret swaps
	if err != nil {
		return fileStamp{}, err
	}
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st, nil
}

// current returns what the files hold now, reloading them when they
// changed since the last look (at most once per CheckEvery).
func (s *Source) current() loaded {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.checked) < CheckEvery {
		return s.cur
	}
	s.checked = now
	changed := false
	for i, name := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if name == "" {
			continue
		}
		if st, err := stamp(name); err != nil || st != s.cur.stamp[i] {
			changed = true
			break
		}
	}
	if !changed {
		return s.cur
	}
	l, err := s.load()
	if err != nil {
		if msg := err.Error(); msg != s.lastError {
			s.lastError = msg
			s.logger.Warn("TLS files changed but do not load; still using the previous ones", "err", err)
		}
		return s.cur
	}
	s.cur, s.lastError = l, ""
	s.logger.Info("TLS files reloaded", "cert", s.files.Cert, "ca", s.files.CA)
	return s.cur
}

// Certificate is the certificate loaded now (nil without Cert).
func (s *Source) Certificate() *tls.Certificate { return s.current().cert }

// ServerConfig returns a listener's configuration: TLS 1.2 and later with
// Go's defaults, the certificate as the files hold it at each handshake,
// and with CA, mutual TLS (a client certificate that chains to CA is
// required). cluster, when not nil and with a CA, is the cluster's side
// (RegisterClusterFlags): a client certificate from its CA is accepted
// too, and asked for but not required without s's CA (tenants and the
// cluster's servers share the listener; what a broker-credential call
// must present is the authenticators' rule, PeerOf). nextProtos are
// offered in ALPN ("h2", "http/1.1" for the API; nil for a protocol
// without ALPN, such as Kafka's).
func (s *Source) ServerConfig(cluster *Source, nextProtos ...string) (*tls.Config, error) {
	if s.files.Cert == "" {
		return nil, errors.New("tls: a listener needs a certificate and its key (--tls-cert, --tls-key)")
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			l := s.current()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				NextProtos:   nextProtos,
				Certificates: []tls.Certificate{*l.cert},
			}
			var cas []*x509.Certificate
			if cluster != nil {
				cas = cluster.current().cas
			}
			if len(cas) > 0 {
				c.ClientAuth = tls.VerifyClientCertIfGiven
			}
			if l.pool != nil {
				cas = append(cas[:len(cas):len(cas)], l.cas...)
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
			if len(cas) > 0 {
				c.ClientCAs = x509.NewCertPool()
				for _, ca := range cas {
					c.ClientCAs.AddCert(ca)
				}
			}
			return c, nil
		},
	}, nil
}

// ClientConfig returns the configuration of a client connection made
// now: it verifies the server against CA as the file holds it now (empty,
// or a nil s: the system's roots), and presents the certificate when Cert
// is set (mutual TLS), as the files hold it at the handshake. serverName,
// when set, is the name the server's certificate must carry (else the
// dialled host's). Build one per connection (HTTPClient does) so that a
// rotated CA applies to the next one.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if s == nil {
		return c
	}
	c.RootCAs = s.current().pool
	if s.files.Cert != "" {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		}
	}
	return c
}

// Enabled reports whether s holds a certificate: a listener with it
// serves TLS. False for a nil s.
func (s *Source) Enabled() bool { return s != nil && s.files.Cert != "" }

// Mutual reports whether s has both a CA and a certificate: on a server's
// cluster side, that its calls present a certificate and that calls made
// with the broker credential must present one (PeerOf). False for nil.
func (s *Source) Mutual() bool { return s != nil && s.files.Cert != "" && s.files.CA != "" }
