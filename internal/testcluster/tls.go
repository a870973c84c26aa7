package testcluster

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// newCA makes the cluster's CA in Dir/tls, points the cluster's client at
// it, and returns the control plane's TLS flags.
func (c *Cluster) newCA() []string {
	c.t.Helper()
	c.TLSDir = filepath.Join(c.Dir, "tls")
	if err := os.MkdirAll(c.TLSDir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	ca, err := tlsfiles.NewCA("e2e cluster CA", 24*time.Hour)
	if err != nil {
		c.t.Fatal(err)
	}
	c.CA, c.CAFile = ca, filepath.Join(c.TLSDir, "ca.crt")
	if err := ca.WriteCert(c.CAFile); err != nil {
		c.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if c.opts.External {
		// Internal listeners want a certificate from the cluster's CA.
		certPEM, keyPEM, err := ca.Issue(tlsfiles.Leaf{CommonName: "testcluster", Client: true, ValidFor: 24 * time.Hour})
		if err != nil {
			c.t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			c.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	c.hc = testClient(cfg)
	return c.serverTLSArgs("controlplane", tlsfiles.ControlPlaneURI)
}

// externalArgs are the flags of name's external listener at addr,
// advertised (brokers) at advertised, serving name's certificate, and of
// its API listener made internal (a client certificate from the
// cluster's CA required).
func (c *Cluster) externalArgs(name, addr, advertised string) []string {
	f := tlsfiles.Files{Cert: filepath.Join(c.TLSDir, name+".crt"), Key: filepath.Join(c.TLSDir, name+".key")}
	args := []string{"--external-listen-addr", addr, "--external-tls-cert", f.Cert, "--external-tls-key", f.Key, "--tls-client-ca", c.CAFile}
	if advertised != "" {
		args = append(args, "--external-advertised-addr", advertised)
	}
	return args
}

// IssueServer writes a certificate for the process name (controlplane,
// broker-<id>) with the cluster identity identity, for 127.0.0.1 and
// localhost, as TLSDir/<name>.crt and .key (replacing them atomically:
// a rotation), and returns their paths.
func (c *Cluster) IssueServer(name, identity string) tlsfiles.Files {
	c.t.Helper()
	f, err := c.CA.IssueFiles(c.TLSDir, name, tlsfiles.Leaf{
		CommonName: name, Hosts: []string{"127.0.0.1", "localhost"}, URIs: []string{identity},
		Server: true, Client: true, ValidFor: 24 * time.Hour,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

// serverTLSArgs issues name's certificate and returns the flags that
// serve it on both listeners and present it to the other servers.
func (c *Cluster) serverTLSArgs(name, identity string) []string {
	f := c.IssueServer(name, identity)
	return []string{
		"--tls-cert", f.Cert, "--tls-key", f.Key,
		"--metrics-tls-cert", f.Cert, "--metrics-tls-key", f.Key,
		"--cluster-ca", c.CAFile, "--cluster-cert", f.Cert, "--cluster-key", f.Key,
	}
}
