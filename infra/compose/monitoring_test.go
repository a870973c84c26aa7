package compose

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testenv"
)

// mirrorBinds copies svc's bind-mounted files and folders into dir at their container paths, so
// that its config can be checked as the container sees it.
func mirrorBinds(t *testing.T, s types.ServiceConfig, dir string) {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		require.True(t, v.ReadOnly, "%s: bind mount %s is read-only", s.Name, v.Source)
		dst := filepath.Join(dir, v.Target)
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		out, err := exec.Command("cp", "-R", v.Source, dst).CombinedOutput()
		require.NoError(t, err, "%s: bind mount source %s: %s", s.Name, v.Source, out)
	}
}

var targetsRe = regexp.MustCompile(`(?m)^\s*- job_name: (\S+)\s*\n\s*static_configs:\s*\n\s*- targets: \[([^\]]*)\]`)

// TestComposePrometheus: the compose Prometheus's config (as mounted) passes promtool check
// config, loads infra/prometheus/alerts.yml, and scrapes exactly the metrics listeners of the
// sluice services. Prometheus itself is not run.
func TestComposePrometheus(t *testing.T) {
	p := loadRepoProject(t)
	prom := p.Services["prometheus"]
	dir := t.TempDir()
	mirrorBinds(t, prom, dir)
	i := slices.IndexFunc(prom.Command, func(a string) bool { return strings.HasPrefix(a, "--config.file=") })
	require.GreaterOrEqual(t, i, 0, "prometheus names its config file")
	config := filepath.Join(dir, strings.TrimPrefix(prom.Command[i], "--config.file="))
	out, err := exec.Command(testenv.Promtool(t), "check", "config", config).CombinedOutput()
	require.NoError(t, err, "promtool check config: %s", out)
	rules := filepath.Join(filepath.Dir(config), "alerts.yml")
	require.Equal(t, readFile(t, filepath.Join(repoRoot(t), "infra/prometheus/alerts.yml")), readFile(t, rules), "infra/prometheus/alerts.yml is mounted beside the config")
	require.Contains(t, string(out), "alerts.yml", "promtool checked the rule file: %s", out)

	jobs := map[string][]string{}
	for _, m := range targetsRe.FindAllStringSubmatch(readFile(t, config), -1) {
		for _, tg := range strings.Split(m[2], ",") {
			jobs[m[1]] = append(jobs[m[1]], strings.Trim(strings.TrimSpace(tg), `"`))
		}
	}
	want := map[string][]string{}
	for n, s := range p.Services {
		if !isSluice(s) || slices.Contains(s.Profiles, "cli") {
			continue
		}
		addr := s.Environment["SLUICE_METRICS_ADDR"]
		require.NotNil(t, addr, "%s sets SLUICE_METRICS_ADDR", n)
		host, port, err := net.SplitHostPort(*addr)
		require.NoError(t, err)
		require.Equal(t, "0.0.0.0", host, "%s: the metrics listener is reachable from the prometheus container", n)
		job := "sluice-" + s.Command[0]
		want[job] = append(want[job], n+":"+port)
	}
	for job, ts := range want {
		slices.Sort(ts)
		got := slices.Sorted(slices.Values(jobs[job]))
		require.Equal(t, ts, got, "job %s scrapes every %s's metrics listener", job, strings.TrimPrefix(job, "sluice-"))
	}
}

// TestComposeGrafana: Grafana gets the dashboards of infra/grafana through its provisioning (the
// provider's path is where infra/grafana is mounted) and the compose Prometheus as its data
// source. Grafana itself is not run.
func TestComposeGrafana(t *testing.T) {
	p := loadRepoProject(t)
	g := p.Services["grafana"]
	dir := t.TempDir()
	mirrorBinds(t, g, dir)
	var dashboards string
	for _, v := range g.Volumes {
		if v.Type == types.VolumeTypeBind && filepath.Clean(v.Source) == filepath.Join(repoRoot(t), "infra/grafana") {
			dashboards = v.Target
		}
	}
	require.NotEmpty(t, dashboards, "infra/grafana is mounted into grafana")
	prov := filepath.Join(dir, "etc/grafana/provisioning")
	dash := readFile(t, filepath.Join(prov, "dashboards/sluice.yml"))
	require.Regexp(t, `(?m)^\s+path: `+regexp.QuoteMeta(dashboards)+`$`, dash)
	json, err := filepath.Glob(filepath.Join(dir, dashboards, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, json, "dashboards of infra/grafana where the provider reads them")
	t.Logf("%d dashboards in infra/grafana (infra/grafana's tests check them)", len(json))
	ds := readFile(t, filepath.Join(prov, "datasources/prometheus.yml"))
	require.Contains(t, ds, "type: prometheus")
	require.Contains(t, ds, "url: http://prometheus:9090")
	require.Contains(t, p.Services, "prometheus")
}
