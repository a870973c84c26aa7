package tlsfiles

import "github.com/spf13/pflag"

// RegisterListenerFlags registers the TLS flags of a listener:
// --<prefix>tls-cert, --<prefix>tls-key and --<prefix>tls-client-ca,
// into f. listener names it in the help ("the API listener").
func RegisterListenerFlags(fs *pflag.FlagSet, f *Files, prefix, listener string) {
	fs.StringVar(&f.Cert, prefix+"tls-cert", f.Cert, "PEM certificate chain (leaf first) that "+listener+" serves TLS with; with --"+prefix+"tls-key turns TLS on there (TLS 1.2 and later). Re-read when the file changes (checked at most once a second on a new connection): a rotated certificate applies to new connections without a restart")
	fs.StringVar(&f.Key, prefix+"tls-key", f.Key, "PEM private key of --"+prefix+"tls-cert, re-read with it")
	fs.StringVar(&f.CA, prefix+"tls-client-ca", f.CA, "PEM CA certificates that the clients of "+listener+" must present a certificate from (mutual TLS: a client without one is refused); re-read when the file changes. Needs --"+prefix+"tls-cert")
}

// RegisterClusterFlags registers the TLS flags of the calls a server
// makes to the others of its cluster (the control plane, brokers):
// --cluster-ca, --cluster-cert and --cluster-key, into f.
func RegisterClusterFlags(fs *pflag.FlagSet, f *Files) {
	fs.StringVar(&f.CA, "cluster-ca", f.CA, "PEM CA certificates that the cluster's servers (the control plane, brokers) present TLS certificates from: calls to them verify against it (default: the system's roots for https URLs); re-read when the file changes")
	fs.StringVar(&f.Cert, "cluster-cert", f.Cert, "PEM certificate this server presents to the others of its cluster when they ask for one (mutual TLS); re-read when the file changes")
	fs.StringVar(&f.Key, "cluster-key", f.Key, "PEM private key of --cluster-cert")
}
