package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// version is stamped at build time: `make build` and the Dockerfile pass
// -ldflags "-X github.com/sluicemq/sluice/cmd/sluice/cli.version=$(VERSION)".
// A plain `go build` leaves it "dev".
var version = "dev"

// buildInfo is what `sluice version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
}

func currentBuild() buildInfo {
	b := buildInfo{Version: version, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary (stamped at build), its Go version and VCS revision",
		Long: `Print the version stamped at build time (make build VERSION=…, or the
Dockerfile's VERSION build argument; "dev" for a plain go build), the Go
version it was built with and, when the build recorded it, the VCS revision.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			b := currentBuild()
			if a.output == "json" {
				out, _ := json.MarshalIndent(b, "", "  ")
				_, err := fmt.Fprintln(a.stdout, string(out))
				return err
			}
			pairs := []string{"version", b.Version, "go", b.GoVersion}
			if b.Revision != "" {
				rev := b.Revision
				if b.Modified {
					rev += " (modified)"
				}
				pairs = append(pairs, "revision", rev)
			}
			return kv(a.stdout, pairs...)
		},
	}
}

// healthcheckCommand is the container probe: the runtime image has no
// shell, curl or wget, so Docker's HEALTHCHECK and compose's healthcheck
// run `sluice healthcheck`.
func (a *app) healthcheckCommand() *cobra.Command {
	var (
		metricsAddr string
		metricsCert string
		path        string
		timeout     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "healthcheck [URL]",
		Short: "Exit 0 when a server's probe URL answers 200 (the container health check)",
		Long: `GET URL (for example http://127.0.0.1:9644/readyz) and exit 0 when it
answers 200 OK, 1 otherwise. Without URL, probe --path on the operator listener
at --metrics-addr (set from $SLUICE_METRICS_ADDR, as the server's own flag is,
so a container configured through that variable needs no argument; a
0.0.0.0 or empty host is probed on 127.0.0.1), or, when that is not set
either, on the roles' default listeners 127.0.0.1:9644 (broker) and
127.0.0.1:9643 (control plane): healthy when one of them answers 200. With
--metrics-tls-cert set (as the server's own flag, from $SLUICE_METRICS_TLS_CERT)
the operator listener is probed over https. An https URL's certificate is not
verified, as Kubernetes' HTTPS probes do not: the probe asks whether the
server answers, not who it is.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				return probe(cmd.Context(), args[0], timeout)
			}
			p := "/" + strings.TrimPrefix(path, "/")
			scheme := "http://"
			if metricsCert != "" {
				scheme = "https://"
			}
			if metricsAddr == "" {
				var errs []error
				for _, addr := range []string{"127.0.0.1:9644", "127.0.0.1:9643"} {
					err := probe(cmd.Context(), scheme+addr+p, timeout)
					if err == nil {
						return nil
					}
					errs = append(errs, err)
				}
				return errors.Join(errs...)
			}
			host, port, err := net.SplitHostPort(metricsAddr)
			if err != nil {
				return usageError{fmt.Errorf("healthcheck: --metrics-addr %q: %w", metricsAddr, err)}
			}
			if host == "" || host == "0.0.0.0" || host == "::" {
				host = "127.0.0.1"
			}
			return probe(cmd.Context(), scheme+net.JoinHostPort(host, port)+p, timeout)
		},
	}
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", "operator listener (host:port) to probe when no URL is given")
	cmd.Flags().StringVar(&metricsCert, "metrics-tls-cert", "", "when set (the operator listener serves TLS with this certificate, as the server's flag of the same name), probe --metrics-addr over https")
	cmd.Flags().StringVar(&path, "path", "/readyz", "path probed on --metrics-addr: /readyz (ready to serve) or /healthz (the process is up)")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

func probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return usageError{fmt.Errorf("healthcheck: %w", err)}
	}
	// A probe of a server's own listener: whether it answers, not who it
	// is (a certificate for its service name, not 127.0.0.1).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}}}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}
