package cli

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// sluice cert makes a CA and servers' certificates that a cluster accepts:
// each chains to the CA and carries its server's identity; a second CA in
// the same folder is refused, and so is a certificate of no server.
func TestCert(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := Execute(t.Context(), append([]string{"cert"}, args...), strings.NewReader(""), &out, &errOut)
		return out.String() + errOut.String(), code
	}
	out, code := run("create-ca", "--dir", dir)
	require.Zero(t, code, out)
	out, code = run("create", "--dir", dir, "--broker", "7", "--host", "broker-7,127.0.0.1")
	require.Zero(t, code, out)
	require.Contains(t, out, "sluice://broker/7")
	out, code = run("create", "--dir", dir, "--control-plane", "--host", "controlplane")
	require.Zero(t, code, out)

	cluster, err := tlsfiles.Load(tlsfiles.Files{CA: filepath.Join(dir, "ca.crt")}, nil)
	require.NoError(t, err)
	for name, want := range map[string]tlsfiles.Peer{"broker-7": {Broker: 7}, "controlplane": {ControlPlane: true}} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		p, err := cluster.PeerOf(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
		require.NoError(t, err, name)
		require.Equal(t, want, p, name)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "broker-7.crt"), filepath.Join(dir, "broker-7.key"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	require.NoError(t, leaf.VerifyHostname("broker-7"))
	require.NoError(t, leaf.VerifyHostname("127.0.0.1"))

	out, code = run("create-ca", "--dir", dir)
	require.Equal(t, ExitUsage, code, out)
	require.Contains(t, out, "--force")
	out, code = run("create", "--dir", dir, "--host", "x")
	require.Equal(t, ExitUsage, code, out)
	out, code = run("create", "--dir", t.TempDir(), "--broker", "1", "--host", "x")
	require.NotZero(t, code)
	require.Contains(t, out, "sluice cert create-ca")
}

// create-cluster makes a CA once and keeps it: a second run issues new
// server certificates that still chain to the first CA.
func TestCertCreateCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := Execute(t.Context(), append([]string{"cert", "create-cluster", "--dir", dir}, args...), strings.NewReader(""), &out, &errOut)
		return out.String() + errOut.String(), code
	}
	out, code := run("--brokers", "2", "--host", "localhost")
	require.Zero(t, code, out)
	ca1, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	out, code = run("--brokers", "2", "--host", "localhost")
	require.Zero(t, code, out)
	require.Contains(t, out, "kept the CA")
	ca2, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.NoError(t, err)
	require.Equal(t, ca1, ca2)
	cluster, err := tlsfiles.Load(tlsfiles.Files{CA: filepath.Join(dir, "ca.crt")}, nil)
	require.NoError(t, err)
	for name, want := range map[string]tlsfiles.Peer{"broker-1": {Broker: 1}, "broker-2": {Broker: 2}, "controlplane": {ControlPlane: true}} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		require.NoError(t, err)
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		require.NoError(t, err)
		p, err := cluster.PeerOf(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}})
		require.NoError(t, err, name)
		require.Equal(t, want, p, name)
		require.NoError(t, leaf.VerifyHostname("localhost"), name)
		require.NoError(t, leaf.VerifyHostname(map[string]string{"broker-1": "broker-1", "broker-2": "broker-2", "controlplane": "controlplane"}[name]), name)
	}
	require.NoFileExists(t, filepath.Join(dir, "broker-3.crt"))
}
