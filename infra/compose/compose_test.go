package compose

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testenv"
	"github.com/sluicemq/sluice/tiered/objstore/s3"
)

// sluiceImage is the image compose builds: a local name, since no registry publishes Sluice.
const sluiceImage = "sluice:dev"

// loadProject loads composeFile as docker compose would, with envFile as its .env and the cli
// profile active (so that the CLI service is in Services).
func loadProject(t testing.TB, composeFile, envFile string, overrides ...string) (*types.Project, error) {
	t.Helper()
	po, err := cli.NewProjectOptions(append([]string{composeFile}, overrides...),
		cli.WithWorkingDirectory(filepath.Dir(composeFile)),
		cli.WithEnvFiles(envFile), cli.WithDotEnv,
		cli.WithProfiles([]string{"cli"}),
	)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return po.LoadProject(ctx)
}

// loadRepoProject loads docker-compose.yml with .env.example and, in
// order, the overrides named (docker-compose.tls.yml).
func loadRepoProject(t testing.TB, overrides ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	for i, o := range overrides {
		overrides[i] = filepath.Join(root, o)
	}
	p, err := loadProject(t, filepath.Join(root, "docker-compose.yml"), filepath.Join(root, ".env.example"), overrides...)
	require.NoError(t, err, "docker-compose.yml with .env.example and %v", overrides)
	return p
}

func isSluice(s types.ServiceConfig) bool { return s.Image == sluiceImage }

// TestComposeLoads: docker-compose.yml loads with .env.example and declares the stack the
// issue and docs/deploy.md describe.
func TestComposeLoads(t *testing.T) {
	p := loadRepoProject(t)
	require.Equal(t, "sluice", p.Name)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	})
	require.Equal(t, []string{"broker-1", "broker-2", "broker-3", "controlplane-1", "controlplane-2", "grafana", "postgres", "prometheus", "sluice", "versitygw"}, names)
	require.Equal(t, "versity/versitygw:v1.8.0", p.Services["versitygw"].Image)
	require.True(t, strings.HasPrefix(p.Services["postgres"].Image, "postgres:"), "the official Postgres image")
	racks := map[string]bool{}
	vols := map[string]bool{}
	for _, n := range []string{"broker-1", "broker-2", "broker-3"} {
		s := p.Services[n]
		require.True(t, isSluice(s), n)
		require.Equal(t, "broker", s.Command[0])
		i := slices.Index(s.Command, "--rack")
		require.Positive(t, i, "%s has a rack", n)
		racks[s.Command[i+1]] = true
		require.Len(t, s.Volumes, 1)
		require.Equal(t, types.VolumeTypeVolume, s.Volumes[0].Type)
		require.Equal(t, "/var/lib/sluice", s.Volumes[0].Target)
		vols[s.Volumes[0].Source] = true
		require.NotEmpty(t, *s.Environment["SLUICE_TIER_S3_BUCKET"], "tiered storage on")
	}
	require.Len(t, racks, 3, "one rack per broker")
	require.Len(t, vols, 3, "a volume per broker")
	for _, n := range []string{"controlplane-1", "controlplane-2", "sluice"} {
		require.True(t, isSluice(p.Services[n]), n)
		require.Equal(t, filepath.Clean(repoRoot(t)), filepath.Clean(p.Services[n].Build.Context), "%s is built from the root Dockerfile", n)
	}
	require.Equal(t, []string{"cli"}, p.Services["sluice"].Profiles, "the CLI service is not started by up")
}

// TestComposeLoadRefusesBrokenFiles: the loader is a check, not a pass-through: an unknown key,
// a bad port and a missing secret fail.
func TestComposeLoadRefusesBrokenFiles(t *testing.T) {
	root := repoRoot(t)
	orig := readFile(t, filepath.Join(root, "docker-compose.yml"))
	for _, c := range []struct{ name, old, new string }{
		{"unknown key", "    entrypoint: [\"/bin/sh\", \"-c\"]", "    entrypoint: [\"/bin/sh\", \"-c\"]\n    comand: [\"x\"]"},
		{"bad port", `"127.0.0.1:8080:8080"`, `"127.0.0.1:80800:8080"`},
		{"depends on no service", "    controlplane-1:\n      condition: service_healthy\n\nservices:", "    controlplane-9:\n      condition: service_healthy\n\nservices:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, 1, strings.Count(orig, c.old), "the planted change applies once")
			dir := t.TempDir()
			f := filepath.Join(dir, "docker-compose.yml")
			require.NoError(t, os.WriteFile(f, []byte(strings.Replace(orig, c.old, c.new, 1)), 0o644))
			_, err := loadProject(t, f, filepath.Join(root, ".env.example"))
			require.Error(t, err)
			t.Logf("refused: %v", err)
		})
	}
	t.Run("missing secret", func(t *testing.T) {
		dir := t.TempDir()
		env := regexp.MustCompile(`(?m)^SLUICE_BROKER_TOKEN=.*$`).ReplaceAllString(readFile(t, filepath.Join(root, ".env.example")), "")
		require.NoError(t, os.WriteFile(filepath.Join(dir, ".env"), []byte(env), 0o644))
		_, err := loadProject(t, filepath.Join(root, "docker-compose.yml"), filepath.Join(dir, ".env"))
		require.ErrorContains(t, err, "SLUICE_BROKER_TOKEN")
	})
}

// stack maps the compose network onto loopback: each (service, container port) gets a free
// loopback port, each service's volumes get folders.
type stack struct {
	t       *testing.T
	p       *types.Project
	dir     string
	bin     string         // folder on PATH with sluice and versitygw
	ports   map[string]int // "service:port" → loopback port
	names   map[string]string
	volumes map[string]map[string]string // service → volume target → folder
	dbURL   string
}

var (
	hostPortRe = regexp.MustCompile(`(^|[^A-Za-z0-9_.-])([A-Za-z0-9_.-]*):([0-9]{2,5})\b`)
	selfHosts  = map[string]bool{"": true, "0.0.0.0": true, "127.0.0.1": true, "localhost": true}
)

// strs is every string of a service the processes see: command, entrypoint, environment values,
// health check.
func strs(s types.ServiceConfig) []string {
	out := slices.Concat([]string(s.Entrypoint), []string(s.Command))
	for _, v := range s.Environment {
		if v != nil {
			out = append(out, *v)
		}
	}
	if s.HealthCheck != nil {
		out = append(out, s.HealthCheck.Test...)
	}
	return out
}

func newStack(t *testing.T, p *types.Project) *stack {
	st := &stack{t: t, p: p, dir: t.TempDir(), ports: map[string]int{}, names: map[string]string{}, volumes: map[string]map[string]string{}}
	// Names on the network: services, and their aliases (an alias shared by replicas is mapped to
	// the first of them by name: loopback has no DNS round robin).
	svcs := slices.Sorted(func(yield func(string) bool) {
		for n := range p.Services {
			if !yield(n) {
				return
			}
		}
	})
	for _, n := range svcs {
		st.names[n] = n
	}
	for _, n := range svcs {
		for _, nw := range p.Services[n].Networks {
			if nw == nil {
				continue
			}
			for _, a := range nw.Aliases {
				if _, ok := st.names[a]; !ok {
					st.names[a] = n
				}
			}
		}
	}
	for _, n := range svcs {
		for _, s := range strs(p.Services[n]) {
			for _, m := range hostPortRe.FindAllStringSubmatch(s, -1) {
				host, port := m[2], m[3]
				svc := n
				if !selfHosts[host] {
					var ok bool
					if svc, ok = st.names[host]; !ok {
						continue
					}
				}
				st.port(svc, port)
			}
		}
		st.volumes[n] = map[string]string{}
		for _, v := range p.Services[n].Volumes {
			if v.Type == types.VolumeTypeVolume {
				d := filepath.Join(st.dir, "volumes", v.Source)
				require.NoError(t, os.MkdirAll(d, 0o755))
				st.volumes[n][v.Target] = d
			}
		}
	}
	st.bin = filepath.Join(st.dir, "bin")
	require.NoError(t, os.MkdirAll(st.bin, 0o755))
	return st
}

func (st *stack) port(svc, port string) int {
	k := svc + ":" + port
	if p, ok := st.ports[k]; ok {
		return p
	}
	p, err := testenv.FreePort()
	require.NoError(st.t, err)
	st.ports[k] = p
	return p
}

// rewrite maps a string of service svc onto loopback: host:port of a service → 127.0.0.1 and
// its loopback port, the service's own listen addresses likewise, volume paths → folders.
func (st *stack) rewrite(svc, s string) string {
	if strings.HasPrefix(s, "postgres://") {
		return st.dbURL
	}
	s = hostPortRe.ReplaceAllStringFunc(s, func(m string) string {
		sm := hostPortRe.FindStringSubmatch(m)
		pre, host, port := sm[1], sm[2], sm[3]
		target := svc
		if !selfHosts[host] {
			var ok bool
			if target, ok = st.names[host]; !ok {
				return m
			}
		}
		return pre + "127.0.0.1:" + strconv.Itoa(st.ports[target+":"+port])
	})
	targets := slices.Sorted(func(yield func(string) bool) {
		for k := range st.volumes[svc] {
			if !yield(k) {
				return
			}
		}
	})
	for i := len(targets) - 1; i >= 0; i-- { // longest first
		s = strings.ReplaceAll(s, targets[i], st.volumes[svc][targets[i]])
	}
	return s
}

func (st *stack) env(svc string) []string {
	home := filepath.Join(st.dir, "home", svc)
	require.NoError(st.t, os.MkdirAll(home, 0o755))
	env := []string{"PATH=" + st.bin + ":/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + os.TempDir()}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range st.p.Services[svc].Environment {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if v := st.p.Services[svc].Environment[k]; v != nil {
			env = append(env, k+"="+st.rewrite(svc, *v))
		}
	}
	return env
}

func (st *stack) argv(svc string, args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = st.rewrite(svc, a)
	}
	return out
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func (pr *proc) tail() string {
	b, _ := os.ReadFile(pr.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// start runs svc's entrypoint and command (the sluice image's entrypoint is sluice).
func (st *stack) start(svc string) *proc {
	s := st.p.Services[svc]
	args := slices.Concat([]string(s.Entrypoint), []string(s.Command))
	if isSluice(s) && len(s.Entrypoint) == 0 {
		args = append([]string{"sluice"}, args...)
	}
	require.NotEmpty(st.t, args, svc)
	args = st.argv(svc, args)
	pr := &proc{name: svc, log: filepath.Join(st.dir, svc+".log"), done: make(chan struct{})}
	f, err := os.Create(pr.log)
	require.NoError(st.t, err)
	defer f.Close()
	path := args[0]
	if !strings.Contains(path, "/") {
		path = filepath.Join(st.bin, path)
	}
	pr.cmd = exec.Command(path, args[1:]...)
	pr.cmd.Env = st.env(svc)
	pr.cmd.Dir = filepath.Join(st.dir, "home", svc)
	pr.cmd.Stdout, pr.cmd.Stderr = f, f
	pr.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(st.t, pr.cmd.Start(), svc)
	go func() { pr.err = pr.cmd.Wait(); close(pr.done) }()
	st.t.Cleanup(func() {
		_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-pr.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
			<-pr.done
		}
		if st.t.Failed() {
			st.t.Logf("--- %s log (tail) ---\n%s", svc, pr.tail())
		}
	})
	st.t.Logf("started %s: %s", svc, strings.Join(args, " "))
	return pr
}

// healthy runs svc's health check once: CMD sluice … runs the sluice binary, CMD wget … GETs the
// URL (the versitygw image's busybox wget), CMD pg_isready … is checked against the postgres
// service's user and database (the Postgres of internal/testenv is up by construction).
func (st *stack) healthy(svc string) error {
	hc := st.p.Services[svc].HealthCheck
	if hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
		return testenv.Permanent(fmt.Errorf("%s: a health check in exec form (CMD …) is needed: the sluice image has no shell", svc))
	}
	argv := st.argv(svc, hc.Test[1:])
	switch argv[0] {
	case "sluice":
		cmd := exec.Command(filepath.Join(st.bin, "sluice"), argv[1:]...)
		cmd.Env = st.env(svc)
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, b)
		}
		return nil
	case "wget":
		resp, err := http.Get(argv[len(argv)-1])
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", argv[len(argv)-1], resp.Status)
		}
		return nil
	case "pg_isready":
		env := st.p.Services["postgres"].Environment
		u, d := slices.Index(argv, "-U"), slices.Index(argv, "-d")
		if u < 0 || d < 0 || argv[u+1] != *env["POSTGRES_USER"] || argv[d+1] != *env["POSTGRES_DB"] {
			return testenv.Permanent(fmt.Errorf("%s: pg_isready must name POSTGRES_USER and POSTGRES_DB", svc))
		}
		return nil
	}
	return testenv.Permanent(fmt.Errorf("%s: health check %v: this test knows sluice, wget and pg_isready", svc, argv))
}

func (st *stack) waitHealthy(pr *proc) {
	st.t.Helper()
	testenv.Wait(st.t, 45*time.Second, pr.name+" healthy (its compose health check)", func() error {
		select {
		case <-pr.done:
			return testenv.Permanent(fmt.Errorf("%s exited: %v\n%s", pr.name, pr.err, pr.tail()))
		default:
		}
		return st.healthy(pr.name)
	})
}

// oneShot reports whether s runs once, to completion, before the services that need it start
// (docker-compose.tls.yml's certs): no health check and no restarts.
func oneShot(s types.ServiceConfig) bool { return s.HealthCheck == nil && s.Restart == "no" }

// waitCompleted waits until a one-shot service exits, and requires it to succeed (compose's
// service_completed_successfully).
func (st *stack) waitCompleted(pr *proc) {
	st.t.Helper()
	select {
	case <-pr.done:
	case <-time.After(45 * time.Second):
		st.t.Fatalf("%s did not complete within 45 s:\n%s", pr.name, pr.tail())
	}
	require.NoError(st.t, pr.err, "%s:\n%s", pr.name, pr.tail())
}

// order is the services in depends_on order (ties by name).
func order(p *types.Project, names []string) []string {
	var out []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		deps := slices.Sorted(func(yield func(string) bool) {
			for d := range p.Services[n].DependsOn {
				if !yield(d) {
					return
				}
			}
		})
		for _, d := range deps {
			visit(d)
		}
		if slices.Contains(names, n) {
			out = append(out, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		visit(n)
	}
	return out
}

// checkDatabaseURL checks the control planes' database URL against the postgres service (user,
// password, database, host and the port Postgres listens on) before the test's Postgres stands
// in for it.
func checkDatabaseURL(t *testing.T, p *types.Project, svc string) {
	raw := p.Services[svc].Environment["SLUICE_DATABASE_URL"]
	require.NotNil(t, raw, "%s has SLUICE_DATABASE_URL", svc)
	u, err := url.Parse(*raw)
	require.NoError(t, err)
	env := p.Services["postgres"].Environment
	pw, _ := u.User.Password()
	require.Equal(t, "postgres", u.Scheme)
	require.Equal(t, *env["POSTGRES_USER"], u.User.Username(), "%s: database user", svc)
	require.Equal(t, *env["POSTGRES_PASSWORD"], pw, "%s: database password", svc)
	require.Equal(t, "/"+*env["POSTGRES_DB"], u.Path, "%s: database name", svc)
	require.Equal(t, "postgres:5432", u.Host, "%s: the postgres service on the port the official image listens on", svc)
}

// checkEnvNames: every SLUICE_* variable of a sluice service is one that its command reads (a
// misspelt variable is otherwise ignored).
func checkEnvNames(t *testing.T, st *stack, svc string, helpArgs ...string) {
	cmd := exec.Command(filepath.Join(st.bin, "sluice"), append(helpArgs, "--help")...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + st.dir}
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	for k := range st.p.Services[svc].Environment {
		if strings.HasPrefix(k, "SLUICE_") {
			require.True(t, strings.Contains(string(b), "[$"+k+"]"), "%s sets %s, which `sluice %s` does not read", svc, k, strings.Join(helpArgs, " "))
		}
	}
}

// TestComposeStack starts docker-compose.yml's services as local processes and uses the stack:
// signup, topic, produce and consume through the control plane's published port.
func TestComposeStack(t *testing.T) { runStack(t, loadRepoProject(t)) }

// TestComposeStackTLS is TestComposeStack with docker-compose.tls.yml: the certs service makes
// the CA and the servers' certificates, every API listener serves TLS, the servers call each
// other with mutual TLS, and the CLI service, trusting the CA, uses the stack over https.
func TestComposeStackTLS(t *testing.T) {
	p := loadRepoProject(t, "docker-compose.tls.yml")
	require.Equal(t, "https://controlplane:8080", *p.Services["sluice"].Environment["SLUICE_ENDPOINT"])
	runStack(t, p)
}

// runStack is TestComposeStack's body for the project p.
func runStack(t *testing.T, p *types.Project) {
	start := time.Now()
	sluice := buildSluice(t, testVersion)
	st := newStack(t, p)
	require.NoError(t, os.Symlink(sluice, filepath.Join(st.bin, "sluice")))
	vgw := os.Getenv(testenv.EnvVersitygw)
	if vgw == "" {
		t.Fatalf("set $%s to a versitygw %s binary (make test builds bin/versitygw-%s)", testenv.EnvVersitygw, testenv.VersitygwVersion, testenv.VersitygwVersion)
	}
	require.NoError(t, os.Symlink(vgw, filepath.Join(st.bin, "versitygw")))

	// Postgres: the test's own stands in for the postgres service.
	for _, n := range []string{"controlplane-1", "controlplane-2"} {
		checkDatabaseURL(t, p, n)
	}
	st.dbURL = testenv.PostgresURL(t)
	require.NoError(t, st.healthy("postgres"))

	for n, s := range p.Services {
		switch {
		case n == "sluice":
			checkEnvNames(t, st, n, "produce")
		case isSluice(s):
			checkEnvNames(t, st, n, s.Command[0])
		}
	}

	// Everything else but Prometheus and Grafana (TestComposePrometheus, TestComposeGrafana) and
	// the CLI, which is run below.
	var run []string
	for n, s := range p.Services {
		if n != "postgres" && n != "prometheus" && n != "grafana" && !slices.Contains(s.Profiles, "cli") {
			run = append(run, n)
		}
	}
	for _, n := range order(p, run) {
		pr := st.start(n)
		if oneShot(p.Services[n]) {
			st.waitCompleted(pr)
			t.Logf("%s completed after %s", n, time.Since(start).Round(time.Millisecond))
			continue
		}
		st.waitHealthy(pr)
		t.Logf("%s healthy after %s", n, time.Since(start).Round(time.Millisecond))
	}

	// The bucket versitygw made at start takes writes with the brokers' credentials.
	benv := p.Services["broker-1"].Environment
	for _, k := range []string{"SLUICE_TIER_S3_BUCKET", "SLUICE_TIER_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		require.NotNil(t, benv[k], "broker-1 sets %s", k)
	}
	cfg := s3.DefaultConfig()
	cfg.Bucket, cfg.Endpoint, cfg.PathStyle = *benv["SLUICE_TIER_S3_BUCKET"], st.rewrite("broker-1", *benv["SLUICE_TIER_S3_ENDPOINT"]), true
	cfg.AccessKeyID, cfg.SecretAccessKey = *benv["AWS_ACCESS_KEY_ID"], *benv["AWS_SECRET_ACCESS_KEY"]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := s3.New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "compose-test/probe", strings.NewReader("x"), 1))

	// The CLI service, against the control plane's published port.
	pub := p.Services["controlplane-1"].Ports
	require.Len(t, pub, 1)
	lp, ok := st.ports["controlplane-1:"+strconv.Itoa(int(pub[0].Target))]
	require.True(t, ok, "controlplane-1 publishes port %d, which it does not listen on", pub[0].Target)
	scheme, _, _ := strings.Cut(*p.Services["sluice"].Environment["SLUICE_ENDPOINT"], "://")
	endpoint := fmt.Sprintf("%s://127.0.0.1:%d", scheme, lp)
	if scheme == "https" {
		// The published port serves TLS only.
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", lp))
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		require.Contains(t, string(body), "Client sent an HTTP request to an HTTPS server")
	}
	sl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(st.bin, "sluice"), args...)
		cmd.Env = st.env("sluice")
		cmd.Dir = st.dir
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "sluice %s: %s", strings.Join(args, " "), b)
		return string(b)
	}
	// The CLI service's own endpoint is the published one.
	require.Contains(t, st.env("sluice"), "SLUICE_ENDPOINT="+endpoint)
	sl("--profile", "acme", "signup", "--email", "ops@example.com", "--tenant", "acme")
	require.FileExists(t, st.rewrite("sluice", *p.Services["sluice"].Environment["SLUICE_CLI_CONFIG"]), "the profile is saved in the cli volume")
	sl("--profile", "acme", "--endpoint", endpoint, "topic", "create", "orders", "--partitions", "3")
	testenv.Wait(t, 30*time.Second, "orders has leaders", func() error {
		out := sl("--profile", "acme", "--endpoint", endpoint, "topic", "describe", "orders", "-o", "json")
		if strings.Contains(out, `"leader": -1`) || !strings.Contains(out, `"leader"`) {
			return fmt.Errorf("not yet: %s", out)
		}
		return nil
	})
	sl("--profile", "acme", "--endpoint", endpoint, "produce", "orders", "--key", "customer-1", "--value", "hello-compose")
	out := sl("--profile", "acme", "--endpoint", endpoint, "consume", "orders", "-n", "1", "--timeout", "30s", "--format", `%k=%v\n`)
	require.Contains(t, out, "customer-1=hello-compose")
	t.Logf("stack up, signed up, produced and consumed in %s", time.Since(start).Round(time.Millisecond))
}
