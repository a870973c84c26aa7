package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/internal/tlsfiles"
)

// certCommand makes a private CA and the certificates of a cluster's
// servers (docs/tls.md): what the compose stack's TLS override runs, and
// what an operator without cert-manager or a PKI of their own can use.
func (a *app) certCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make a private CA and the TLS certificates of the cluster's servers",
		Long: `cert makes a private CA (create-ca) and, signed by it, the certificate of a
control plane or a broker (create), each with its cluster identity
(sluice://controlplane, sluice://broker/<id>) for mutual TLS inside the
cluster and the host names clients reach it at. Files are PEM, keys readable
by their owner only; see docs/tls.md for the flags that use them.`,
		Example: `  sluice cert create-ca --dir certs
  sluice cert create --dir certs --control-plane --host controlplane --host localhost
  sluice cert create --dir certs --broker 1 --host broker-1 --host localhost`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.certCreateCACommand(), a.certCreateCommand(), a.certCreateClusterCommand())
	return cmd
}

func (a *app) certCreateClusterCommand() *cobra.Command {
	var dir string
	var cpHosts, brokerHosts, hosts []string
	var brokers, firstID int32
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "create-cluster",
		Short: "Make a small cluster's certificates in one go: the CA (unless DIR has one), the control plane's and every broker's",
		Long: `create-cluster makes the CA in --dir unless it holds one already (ca.crt and
ca.key: kept, so that certificates it signed before stay valid), then the
control plane's certificate (controlplane.crt, .key) for every
--control-plane-host, and the certificates of brokers --first-id to
--first-id + --brokers - 1 (broker-ID.crt, .key) for every --broker-host, in
which {id} stands for the broker's id; --host names go on every certificate.
Running it again issues new server certificates (a rotation: running servers
re-read them) under the same CA. The compose stack's TLS override runs it.`,
		Example: `  sluice cert create-cluster --dir certs --brokers 3 --host localhost --host 127.0.0.1`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if brokers < 0 || firstID < 0 {
				return usageError{errors.New("--brokers and --first-id must not be negative")}
			}
			certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
			ca, err := tlsfiles.LoadCA(certFile, keyFile)
			switch {
			case err == nil:
				fmt.Fprintf(a.stdout, "kept the CA in %s\n", certFile)
			case !exists(certFile) && !exists(keyFile):
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return err
				}
				if ca, err = tlsfiles.NewCA("Sluice cluster CA", 5*365*24*time.Hour); err != nil {
					return err
				}
				if err := ca.WriteKey(keyFile); err != nil {
					return err
				}
				if err := ca.WriteCert(certFile); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "wrote %s and %s\n", certFile, keyFile)
			default:
				return err
			}
			issue := func(name, identity string, hs []string) error {
				f, err := ca.IssueFiles(dir, name, tlsfiles.Leaf{CommonName: name, Hosts: append(slices.Clone(hs), hosts...), URIs: []string{identity}, Server: true, Client: true, ValidFor: validFor})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(a.stdout, "wrote %s and %s (%s)\n", f.Cert, f.Key, identity)
				return err
			}
			if err := issue("controlplane", tlsfiles.ControlPlaneURI, cpHosts); err != nil {
				return err
			}
			for id := firstID; id < firstID+brokers; id++ {
				hs := make([]string, len(brokerHosts))
				for i, h := range brokerHosts {
					hs[i] = strings.ReplaceAll(h, "{id}", strconv.Itoa(int(id)))
				}
				if err := issue(fmt.Sprintf("broker-%d", id), tlsfiles.BrokerURI(id), hs); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "folder of the CA and the certificates (created, mode 0700)")
	cmd.Flags().Int32Var(&brokers, "brokers", 3, "how many brokers")
	cmd.Flags().Int32Var(&firstID, "first-id", 1, "the first broker's id")
	cmd.Flags().StringSliceVar(&cpHosts, "control-plane-host", []string{"controlplane"}, "DNS name or IP address of the control plane (repeatable)")
	cmd.Flags().StringSliceVar(&brokerHosts, "broker-host", []string{"broker-{id}"}, "DNS name or IP address of each broker, {id} its id (repeatable)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "DNS name or IP address on every certificate, e.g. localhost (repeatable)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the servers' certificates are valid (a new CA: 5 years)")
	return cmd
}

func (a *app) certCreateCACommand() *cobra.Command {
	var dir, name string
	var validFor time.Duration
	var force bool
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Make a CA: DIR/ca.crt (what clients and servers trust) and DIR/ca.key (keep it private)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
			if !force {
				for _, f := range []string{certFile, keyFile} {
					if _, err := os.Stat(f); err == nil {
						return usageError{fmt.Errorf("%s exists: a new CA would invalidate every certificate it signed (--force to replace it)", f)}
					}
				}
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			ca, err := tlsfiles.NewCA(name, validFor)
			if err != nil {
				return err
			}
			if err := ca.WriteKey(keyFile); err != nil {
				return err
			}
			if err := ca.WriteCert(certFile); err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "wrote %s and %s\n", certFile, keyFile)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "folder to write ca.crt and ca.key into (created, mode 0700)")
	cmd.Flags().StringVar(&name, "name", "Sluice cluster CA", "the CA's common name")
	cmd.Flags().DurationVar(&validFor, "valid-for", 5*365*24*time.Hour, "how long the CA is valid")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing CA")
	return cmd
}

func (a *app) certCreateCommand() *cobra.Command {
	var dir, name string
	var hosts []string
	var broker int32
	var controlPlane bool
	var validFor time.Duration
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Make a server's certificate, signed by DIR's CA: DIR/NAME.crt and DIR/NAME.key",
		Long: `create writes the certificate of a control plane (--control-plane) or of
broker ID (--broker ID), signed by the CA in --dir (create-ca), as
DIR/NAME.crt and DIR/NAME.key (NAME: controlplane or broker-ID by default),
replacing them atomically: a running server re-reads them (rotation). The
certificate serves the listeners (server authentication) for every --host (a
DNS name or an IP address) and presents the server to the others of its
cluster (client authentication, with its identity sluice://controlplane or
sluice://broker/ID).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			isBroker := cmd.Flags().Changed("broker")
			if isBroker == controlPlane {
				return usageError{errors.New("name the server: --control-plane or --broker ID")}
			}
			if isBroker && broker < 0 {
				return usageError{fmt.Errorf("--broker must not be negative; got %d", broker)}
			}
			if len(hosts) == 0 {
				return usageError{errors.New("name at least one --host clients reach the server at")}
			}
			identity, def := tlsfiles.ControlPlaneURI, "controlplane"
			if isBroker {
				identity, def = tlsfiles.BrokerURI(broker), fmt.Sprintf("broker-%d", broker)
			}
			if name == "" {
				name = def
			}
			ca, err := tlsfiles.LoadCA(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
			if err != nil {
				return fmt.Errorf("%w (make one with sluice cert create-ca --dir %s)", err, dir)
			}
			f, err := ca.IssueFiles(dir, name, tlsfiles.Leaf{CommonName: name, Hosts: hosts, URIs: []string{identity}, Server: true, Client: true, ValidFor: validFor})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(a.stdout, "wrote %s and %s (%s)\n", f.Cert, f.Key, identity)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "certs", "folder holding the CA (ca.crt, ca.key) and where the certificate is written")
	cmd.Flags().StringVar(&name, "name", "", "file name (without .crt/.key) and common name (default controlplane or broker-ID)")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "DNS name or IP address clients reach the server at (repeatable or comma-separated)")
	cmd.Flags().Int32Var(&broker, "broker", 0, "make broker ID's certificate (identity sluice://broker/ID)")
	cmd.Flags().BoolVar(&controlPlane, "control-plane", false, "make the control plane's certificate (identity sluice://controlplane)")
	cmd.Flags().DurationVar(&validFor, "valid-for", 365*24*time.Hour, "how long the certificate is valid")
	return cmd
}

// exists reports whether path names something (an error other than "not
// there" counts as there: nothing is written over it).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
