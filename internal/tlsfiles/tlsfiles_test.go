package tlsfiles

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a Source's clock that a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// load is Load with a fake clock.
func load(t *testing.T, f Files, logs io.Writer) (*Source, *fakeClock) {
	t.Helper()
	s, err := Load(f, slog.New(slog.NewTextHandler(logs, nil)))
	require.NoError(t, err)
	clk := &fakeClock{t: time.Now()}
	s.now = clk.now
	return s, clk
}

// serve accepts TLS connections with cfg on a loopback port and answers
// each line it reads with "ok\n", until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if buf[0] == '\n' {
						if _, err := c.Write([]byte("ok\n")); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// ping sends a line on c and reads the answer.
func ping(t *testing.T, c *tls.Conn) {
	t.Helper()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := c.Write([]byte("hi\n"))
	require.NoError(t, err)
	buf := make([]byte, 3)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "ok\n", string(buf))
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c.SerialNumber.String()
}

// A listener's certificate replaced on disk is the one the next
// handshake gets (once CheckEvery passed), without a restart; a
// connection made before keeps working.
func TestServerCertificateRotates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	leaf := Leaf{CommonName: "server", Hosts: []string{"127.0.0.1"}, Server: true, ValidFor: time.Hour}
	f, err := ca.IssueFiles(dir, "server", leaf)
	require.NoError(t, err)
	first := serialOf(t, f.Cert)
	var logs bytes.Buffer
	src, clk := load(t, f, &logs)
	cfg, err := src.ServerConfig(nil)
	require.NoError(t, err)
	addr := serve(t, cfg)

	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, ca.WriteCert(caFile))
	client, err := Load(Files{CA: caFile}, nil)
	require.NoError(t, err)
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", addr, client.ClientConfig(""))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	old := dial()
	ping(t, old)
	require.Equal(t, first, old.ConnectionState().PeerCertificates[0].SerialNumber.String())

	_, err = ca.IssueFiles(dir, "server", leaf)
	require.NoError(t, err)
	second := serialOf(t, f.Cert)
	require.NotEqual(t, first, second)
	// Within CheckEvery of the last look: the files are not looked at.
	c := dial()
	require.Equal(t, first, c.ConnectionState().PeerCertificates[0].SerialNumber.String())
	clk.advance(CheckEvery)
	c = dial()
	require.Equal(t, second, c.ConnectionState().PeerCertificates[0].SerialNumber.String())
	require.Contains(t, logs.String(), "TLS files reloaded")
	ping(t, old)
}

// Files that do not load (half of a rotation, a key that is not the
// certificate's) keep the previous certificate in use, logged once;
// once they load, they are used.
func TestHalfRotationKeepsThePreviousCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	leaf := Leaf{CommonName: "server", Hosts: []string{"127.0.0.1"}, Server: true, ValidFor: time.Hour}
	f, err := ca.IssueFiles(dir, "server", leaf)
	require.NoError(t, err)
	first := serialOf(t, f.Cert)
	var logs bytes.Buffer
	src, clk := load(t, f, &logs)

	// A new key, the old certificate: they do not match.
	_, k, err := ca.Issue(leaf)
	require.NoError(t, err)
	require.NoError(t, writeAtomic(f.Key, k, 0o600))
	for range 2 {
		clk.advance(CheckEvery)
		require.Equal(t, first, src.Certificate().Leaf.SerialNumber.String())
	}
	require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("do not load")), logs.String())

	// The rotation completes.
	_, err = ca.IssueFiles(dir, "server", leaf)
	require.NoError(t, err)
	clk.advance(CheckEvery)
	require.Equal(t, serialOf(t, f.Cert), src.Certificate().Leaf.SerialNumber.String())
}

// With a client CA the listener wants a client certificate that chains
// to it (mutual TLS): none, or one from another CA, is refused.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := NewCA("cluster CA", time.Hour)
	require.NoError(t, err)
	other, err := NewCA("other CA", time.Hour)
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, ca.WriteCert(caFile))
	sf, err := ca.IssueFiles(dir, "server", Leaf{CommonName: "cp", Hosts: []string{"127.0.0.1"}, Server: true, ValidFor: time.Hour})
	require.NoError(t, err)
	sf.CA = caFile
	src, err := Load(sf, nil)
	require.NoError(t, err)
	cfg, err := src.ServerConfig(nil)
	require.NoError(t, err)
	addr := serve(t, cfg)

	try := func(f Files) error {
		s, err := Load(f, nil)
		require.NoError(t, err)
		c, err := tls.Dial("tcp", addr, s.ClientConfig(""))
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: the server checks the client's certificate after the
		// client's handshake ended; the refusal arrives on the first read.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("hi\n")); err != nil {
			return err
		}
		_, err = io.ReadFull(c, make([]byte, 3))
		return err
	}
	require.Error(t, try(Files{CA: caFile}), "no client certificate")
	of, err := other.IssueFiles(dir, "stranger", Leaf{CommonName: "b1", Client: true, ValidFor: time.Hour})
	require.NoError(t, err)
	of.CA = caFile
	require.Error(t, try(of), "a client certificate of another CA")
	cf, err := ca.IssueFiles(dir, "broker", Leaf{CommonName: "b1", URIs: []string{"sluice://broker/1"}, Client: true, ValidFor: time.Hour})
	require.NoError(t, err)
	cf.CA = caFile
	require.NoError(t, try(cf))

	// A client that does not trust the server's CA refuses it.
	oc := filepath.Join(dir, "other.crt")
	require.NoError(t, other.WriteCert(oc))
	cf.CA = oc
	require.ErrorContains(t, try(cf), "certificate signed by unknown authority")
}

// Files that cannot be loaded fail Load with the file named.
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := NewCA("test CA", time.Hour)
	require.NoError(t, err)
	f, err := ca.IssueFiles(dir, "server", Leaf{CommonName: "s", Hosts: []string{"localhost"}, Server: true, ValidFor: time.Hour})
	require.NoError(t, err)
	_, err = Load(Files{Cert: f.Cert}, nil)
	require.ErrorContains(t, err, "--tls-key")
	_, err = Load(Files{Cert: f.Cert, Key: filepath.Join(dir, "missing.key")}, nil)
	require.ErrorContains(t, err, "missing.key")
	_, err = Load(Files{CA: f.Key}, nil)
	require.ErrorContains(t, err, "no PEM certificate")
	src, err := Load(Files{CA: f.Cert}, nil)
	require.NoError(t, err)
	_, err = src.ServerConfig(nil)
	require.ErrorContains(t, err, "needs a certificate")
	_, _, err = ca.Issue(Leaf{CommonName: "x"})
	require.Error(t, err)
}

// HTTPClient speaks HTTP/2 to a listener with ServerConfig("h2",
// "http/1.1"), with mutual TLS.
func TestHTTPClientSpeaksHTTP2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caFile := writeCA(t, dir, "cluster CA")
	sf, err := ca.IssueFiles(dir, "server", Leaf{CommonName: "cp", Hosts: []string{"127.0.0.1", "localhost"}, Server: true, ValidFor: time.Hour})
	require.NoError(t, err)
	sf.CA = caFile
	src, err := Load(sf, nil)
	require.NoError(t, err)
	cfg, err := src.ServerConfig(nil, "h2", "http/1.1")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto+" "+r.TLS.PeerCertificates[0].Subject.CommonName)
	})}
	go func() { _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { srv.Close() })

	cf, err := ca.IssueFiles(dir, "broker", Leaf{CommonName: "b1", Client: true, ValidFor: time.Hour})
	require.NoError(t, err)
	cf.CA = caFile
	client, err := Load(cf, nil)
	require.NoError(t, err)
	for _, host := range []string{"127.0.0.1", "localhost"} {
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		res, err := client.HTTPClient().Get("https://" + net.JoinHostPort(host, port) + "/")
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Equal(t, "HTTP/2.0 b1", string(body))
	}
}

// A listener with a cluster side asks for a client certificate without
// requiring one: a tenant without one connects, a server of the cluster
// presents its own, and PeerOf tells who it is; another CA's certificate
// is refused at the handshake.
func TestClusterPeers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caFile := writeCA(t, dir, "cluster CA")
	sf, err := ca.IssueFiles(dir, "listener", Leaf{CommonName: "cp", Hosts: []string{"127.0.0.1"}, Server: true, ValidFor: time.Hour})
	require.NoError(t, err)
	own, err := Load(sf, nil)
	require.NoError(t, err)
	cluster, err := Load(Files{CA: caFile}, nil)
	require.NoError(t, err)
	cfg, err := own.ServerConfig(cluster, "h2", "http/1.1")
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, err := cluster.PeerOf(ConnState(r.Context()))
		if err != nil {
			_, _ = io.WriteString(w, "anonymous")
			return
		}
		_, _ = io.WriteString(w, peer.String())
	}))}
	go func() { _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { srv.Close() })
	url := "https://" + ln.Addr().String() + "/"

	get := func(f Files) (string, error) {
		s, err := Load(f, nil)
		require.NoError(t, err)
		res, err := s.HTTPClient().Get(url)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return string(b), err
	}
	body, err := get(Files{CA: caFile})
	require.NoError(t, err)
	require.Equal(t, "anonymous", body, "a client without a certificate")
	for name, leaf := range map[string]Leaf{
		"sluice://broker/7":     {CommonName: "b7", URIs: []string{BrokerURI(7)}, Client: true},
		"sluice://controlplane": {CommonName: "cp", URIs: []string{ControlPlaneURI}, Client: true},
		"anonymous":             {CommonName: "b7", URIs: []string{"sluice://broker/x"}, Client: true},
	} {
		leaf.ValidFor = time.Hour
		cf, err := ca.IssueFiles(dir, "client", leaf)
		require.NoError(t, err)
		cf.CA = caFile
		body, err := get(cf)
		require.NoError(t, err)
		require.Equal(t, name, body)
	}
	other, err := NewCA("other CA", time.Hour)
	require.NoError(t, err)
	of, err := other.IssueFiles(dir, "stranger", Leaf{CommonName: "b1", URIs: []string{BrokerURI(1)}, Client: true, ValidFor: time.Hour})
	require.NoError(t, err)
	of.CA = caFile
	_, err = get(of)
	require.Error(t, err, "a certificate of another CA")

	// The same client speaks cleartext HTTP/2 to an http:// URL.
	var hp http.Protocols
	hp.SetUnencryptedHTTP2(true)
	h2 := &http.Server{Protocols: &hp, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	})}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = h2.Serve(pln) }()
	t.Cleanup(func() { h2.Close() })
	var none *Source
	res, err := none.HTTPClient().Get("http://" + pln.Addr().String() + "/")
	require.NoError(t, err)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, "HTTP/2.0", string(b))
}

// PeerOf refuses what does not prove a cluster identity.
func TestPeerOfRefuses(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("cluster CA", time.Hour)
	require.NoError(t, err)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, ca.WriteCert(caFile))
	cluster, err := Load(Files{CA: caFile}, nil)
	require.NoError(t, err)
	leaf := func(l Leaf) *tls.ConnectionState {
		l.ValidFor = time.Hour
		c, _, err := ca.Issue(l)
		require.NoError(t, err)
		blk, _ := pem.Decode(c)
		x, err := x509.ParseCertificate(blk.Bytes)
		require.NoError(t, err)
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{x}}
	}
	for name, cs := range map[string]*tls.ConnectionState{
		"plaintext":      nil,
		"no certificate": {},
		"server only":    leaf(Leaf{CommonName: "b1", URIs: []string{BrokerURI(1)}, Server: true}),
		"two identities": leaf(Leaf{CommonName: "b1", URIs: []string{BrokerURI(1), BrokerURI(2)}, Client: true}),
		"no identity":    leaf(Leaf{CommonName: "b1", Client: true}),
		"negative id":    leaf(Leaf{CommonName: "b1", URIs: []string{"sluice://broker/-1"}, Client: true}),
		"padded id":      leaf(Leaf{CommonName: "b1", URIs: []string{"sluice://broker/01"}, Client: true}),
	} {
		_, err := cluster.PeerOf(cs)
		require.ErrorIs(t, err, ErrNoPeer, name)
	}
	p, err := cluster.PeerOf(leaf(Leaf{CommonName: "b1", URIs: []string{"https://example.com", BrokerURI(2147483647)}, Client: true}))
	require.NoError(t, err)
	require.Equal(t, Peer{Broker: 2147483647}, p)
}

// A cleartext client of a TLS listener is told why it is refused: an
// HTTP/2 (h2c, gRPC) one in the GOAWAY its error shows, an HTTP/1.1 one
// by net/http's 400 answer; TLS clients are served as usual.
func TestPlaintextClientOfATLSListener(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caFile := writeCA(t, dir, "test CA")
	sf, err := ca.IssueFiles(dir, "server", Leaf{CommonName: "s", Hosts: []string{"127.0.0.1"}, Server: true, ValidFor: time.Hour})
	require.NoError(t, err)
	srvTLS, err := ServerFiles{API: sf}.Load(nil)
	require.NoError(t, err)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln, err := srvTLS.APIListener(raw, nil)
	require.NoError(t, err)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	srv := &http.Server{Protocols: &p, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	addr := raw.Addr().String()

	var none *Source
	_, err = none.HTTPClient().Get("http://" + addr + "/")
	require.ErrorContains(t, err, "INADEQUATE_SECURITY")
	require.ErrorContains(t, err, PlaintextMessage)
	// A client that waits for the server's SETTINGS before its first
	// request gets them, then the GOAWAY for that request.
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Write([]byte(h2Preface))
	require.NoError(t, err)
	settings := make([]byte, 9)
	_, err = io.ReadFull(c, settings)
	require.NoError(t, err)
	require.Equal(t, frame(0x4, nil), settings)
	_, err = c.Write(append(frame(0x4, nil), 0, 0, 0, 0x1, 0x5, 0, 0, 0, 3)) // HEADERS, stream 3, empty
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	got, _ := io.ReadAll(c)
	require.Equal(t, goAway(3, PlaintextMessage), got)

	res, err := http.Get("http://" + addr + "/")
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, string(body), "Client sent an HTTP request to an HTTPS server")

	trust, err := Load(Files{CA: caFile}, nil)
	require.NoError(t, err)
	res, err = trust.HTTPClient().Get("https://" + addr + "/")
	require.NoError(t, err)
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, "HTTP/2.0", string(body))
}

// A CA written with WriteCert and WriteKey loads again and issues
// certificates that chain to it.
func TestCARoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := NewCA("kept CA", time.Hour)
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	require.NoError(t, ca.WriteCert(certFile))
	require.NoError(t, ca.WriteKey(keyFile))
	fi, err := os.Stat(keyFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	again, err := LoadCA(certFile, keyFile)
	require.NoError(t, err)
	f, err := again.IssueFiles(dir, "b1", Leaf{CommonName: "b1", URIs: []string{BrokerURI(1)}, Client: true, ValidFor: time.Hour})
	require.NoError(t, err)
	cluster, err := Load(Files{CA: certFile}, nil)
	require.NoError(t, err)
	b, err := os.ReadFile(f.Cert)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	leaf, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	p, err := cluster.PeerOf(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
	require.NoError(t, err)
	require.Equal(t, Peer{Broker: 1}, p)
	_, err = LoadCA(f.Cert, f.Key)
	require.ErrorContains(t, err, "not an ECDSA CA certificate")
}

// The preface is recognised when it arrives in pieces: the bytes that
// could still be its start are held back, not passed to the handshake.
func TestGuardPrefaceInPieces(t *testing.T) {
	t.Parallel()
	client, server := net.Pipe()
	defer client.Close()
	g := &guardConn{Conn: server}
	read := make(chan error, 1)
	go func() {
		_, err := g.Read(make([]byte, 512))
		read <- err
	}()
	_, err := client.Write([]byte(h2Preface[:5]))
	require.NoError(t, err)
	_, err = client.Write(append([]byte(h2Preface[5:]), frame(0x4, nil)...))
	require.NoError(t, err)
	settings := make([]byte, 9)
	_, err = io.ReadFull(client, settings)
	require.NoError(t, err)
	require.Equal(t, frame(0x4, nil), settings)
	_, err = client.Write([]byte{0, 0, 0, 0x1, 0x5, 0, 0, 0, 1}) // HEADERS, stream 1
	require.NoError(t, err)
	got, _ := io.ReadAll(client)
	require.Equal(t, goAway(1, PlaintextMessage), got)
	require.ErrorIs(t, <-read, net.ErrClosed)
}

// writeCA makes a CA valid for an hour and writes its certificate to
// dir/ca.crt.
func writeCA(t *testing.T, dir, name string) (*CA, string) {
	t.Helper()
	ca, err := NewCA(name, time.Hour)
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, ca.WriteCert(caFile))
	return ca, caFile
}
