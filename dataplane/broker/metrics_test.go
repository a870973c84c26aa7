package broker

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/alerts"
	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/internal/h2c"
)

// TestBrokerTenantPortsServeNoMetrics: metrics name tenants, topics and
// groups with their traffic and lag, so the ports tenants reach (every
// broker's client port, the control plane's API port) serve none of them;
// the operator listeners do, to plain HTTP/1.1 scrapers, with the probes.
func TestBrokerTenantPortsServeNoMetrics(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t, testClusterOpts{
		broker: func(bc *Config) { bc.GroupLagMetricsInterval = 200 * time.Millisecond },
		controlPlane: func(cfg *controlplane.Config) {
			cfg.LagSampleInterval = 250 * time.Millisecond
			cfg.LagWindow = 5 * time.Second
			cfg.LagAlertPolicy = alerts.DefaultPolicy()
		},
	})
	const group = "payroll-secret"
	c.produce(t, 0, 5, time.Now())
	c.commit(t, group, map[int32]int64{0: 1})

	get := func(hc *http.Client, url string) (int, string, error) {
		res, err := hc.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	scraper := &http.Client{Timeout: 10 * time.Second} // HTTP/1.1, as Prometheus scrapes
	tenantLabel := fmt.Sprintf(`tenant=%q`, c.tenantID)
	groupLabel := fmt.Sprintf(`group=%q`, group)

	// The operator listeners carry the tenant's series: the coordinator its
	// group lag, the control plane its lag samples, every broker the
	// tenant's traffic somewhere.
	coord := c.coordinatorOf(t, group)
	testenv.Wait(t, 30*time.Second, "the expected state", func() error {
		for url, want := range map[string][]string{
			c.brokerMetrics[coord-1]: {"sluice_group_lag_messages{", tenantLabel, groupLabel},
			c.cpMetrics:              {"sluice_consumer_lag_messages{", tenantLabel, groupLabel},
		} {
			code, body, err := get(scraper, url+"/metrics")
			if err != nil {
				return err
			}
			if code != http.StatusOK {
				return fmt.Errorf("GET %s/metrics: %d", url, code)
			}
			for _, w := range want {
				if !strings.Contains(body, w) {
					return fmt.Errorf("%s/metrics has no %s yet", url, w)
				}
			}
		}
		return nil
	})
	for _, url := range append([]string{c.cpMetrics}, c.brokerMetrics...) {
		for _, path := range []string{"/healthz", "/readyz"} {
			code, _, err := get(scraper, url+path)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, "%s%s", url, path)
		}
	}

	// The tenant-facing ports answer no metric, under any path a scraper
	// or a curious tenant would try, over HTTP/1.1 and h2c alike.
	tenantPorts := []string{c.endpoint}
	for _, b := range c.brokers {
		tenantPorts = append(tenantPorts, "http://"+b.cfg.Advertised())
	}
	for _, hc := range []*http.Client{scraper, h2c.Client()} {
		for _, base := range tenantPorts {
			for _, path := range []string{"/metrics", "/metrics/", "/", "/debug/pprof/", "/debug/vars", "/federate"} {
				code, body, err := get(hc, base+path)
				require.NoError(t, err)
				require.Equal(t, http.StatusNotFound, code, "GET %s%s", base, path)
				for _, secret := range []string{c.tenantID, group, "orders", "sluice_"} {
					require.NotContains(t, body, secret, "GET %s%s", base, path)
				}
			}
			// Probes stay on the tenant-facing port; they name no one.
			code, body, err := get(hc, base+"/readyz")
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, base)
			require.NotContains(t, body, c.tenantID)
		}
	}
}
