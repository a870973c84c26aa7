package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// The sluice binaries the tests start. plainBin is a race-free build.
// sluiceBin, which the families whose subject is concurrency under faults
// start (TestCluster…, TestSDK…, TestGroup…, TestTxn…, TestTiered… but for
// TestTieredHotTailAndColdReadBack, whose subject is volume), is the same
// build unless the tests run with the race detector and $SLUICE_E2E_RACE
// is 1 (make test-e2e-race, make soak): then it is built with the race
// detector too, and a data race any of its processes reports fails the
// test. make test leaves it race-free: the race detector makes every
// server process about twice as expensive (the e2e package took 892
// CPU-seconds with those families under it, 468 without, go test -race
// ./e2e/ on a loaded machine), while the server code they run is the code
// the in-process tests (dataplane/broker, client, dataplane/partition…),
// which make test runs under the race detector, check for races with
// faults of their own.
var sluiceBin, plainBin string

// TestMain runs the binary as TestTxnUnderFaults's job when
// txnJobEnv is set, as TestQuotaNoisyNeighbour's tenant A when noisyJobEnv is,
// as a Kafka group member of TestKafkaGroupMembersKilled when kafkaMemberEnv is.
// Otherwise it builds the sluice binaries once per test binary, then runs
// the tests through testenv.Main (which tears down the Postgres the
// cluster tests start; testenv.BuildSluice says where the binaries go).
func TestMain(m *testing.M) {
	if os.Getenv(txnJobEnv) != "" {
		os.Exit(runTxnJob())
	}
	if os.Getenv(noisyJobEnv) != "" {
		os.Exit(runNoisyJob())
	}
	if os.Getenv(kafkaMemberEnv) != "" {
		os.Exit(runKafkaMember())
	}
	var err error
	if plainBin, err = testenv.BuildSluice("sluice-e2e", false); err == nil {
		sluiceBin = plainBin
		if raceEnabled && os.Getenv("SLUICE_E2E_RACE") == "1" {
			sluiceBin, err = testenv.BuildSluice("sluice-e2e", true)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	if raceEnabled && sluiceBin == plainBin && os.Getenv("GOMAXPROCS") == "" {
		// make test's race run: a dozen race-free server processes share
		// two cores with this one, and one P each spends less of them
		// (e2e alone, idle: 361 CPU-s instead of 406), as a server with a
		// CPU limit of one runs in Kubernetes. The timing tests (make
		// test's race-free pass) and SLUICE_E2E_RACE runs keep the default.
		os.Setenv("GOMAXPROCS", "1")
	}
	// Each test's cluster runs in processes of its own, and most of a
	// test's time is waiting on them: three tests at a time keep two
	// cores busier than two (the default there, GOMAXPROCS): e2e took
	// 271 s instead of 419 s, idle, for about the same CPU.
	testenv.DefaultParallel(3)
	testenv.Main(m)
}

// syncBuffer is a bytes.Buffer safe for the process's output copier and
// the test reading it at the same time.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running sluice server process.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

func startDev(t testing.TB, dataDir, cfgPath, addr string, extra ...string) *proc {
	t.Helper()
	cmd := exec.Command(plainBin, append([]string{"dev", "--data-dir", dataDir, "--listen-addr", addr, "--kafka-addr", "127.0.0.1:0", "--cli-config", cfgPath}, extra...)...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, out: out}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if r := testcluster.DataRace(out.String()); r != "" {
			t.Errorf("sluice dev reports a data race:\n%s", r)
		}
		if t.Failed() {
			t.Logf("sluice dev output:\n%s", out.String())
		}
	})
	// Ready when it has printed its banner (the dev tenant exists then).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "Sluice dev is running") {
		if time.Now().After(deadline) {
			t.Fatalf("sluice dev did not start:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond) // poll: until sluice dev says it is running
	}
	return p
}

// cli runs a client command and returns stdout, stderr and the exit code.
func cli(t *testing.T, cfgPath string, args ...string) (string, string, int) {
	t.Helper()
	return cliIn(t, cfgPath, "", args...)
}

func mustCLI(t *testing.T, cfgPath string, args ...string) string {
	t.Helper()
	out, errOut, code := cli(t, cfgPath, args...)
	require.Equal(t, 0, code, "sluice %v: %s%s", args, out, errOut)
	return out
}

// TestDevCLI is what a new user does: start `sluice dev`, use the saved
// profile, sign up a tenant, manage keys and topics, with real processes.
func TestDevCLI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	endpoint := "http://" + addr
	dev := startDev(t, dataDir, cfgPath, addr)
	require.Contains(t, dev.out.String(), endpoint)

	// The dev profile works out of the box, and the config file is private.
	fi, err := os.Stat(cfgPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	out := mustCLI(t, cfgPath, "--profile", "dev", "tenant", "get")
	require.Contains(t, out, "dev")
	require.Contains(t, out, "free")

	// dev runs three brokers: an RF 3 topic works out of the box.
	out = mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "events", "-p", "3")
	require.Regexp(t, `\s[123],[123],[123]\s`, out, "three replicas (in any order: placement rotates)")
	_, errOut, code := cli(t, cfgPath, "--profile", "dev", "topic", "create", "wide", "-r", "4")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "needs 4 live brokers; 3 live")

	// A new tenant signs up; its key is saved as a profile.
	out = mustCLI(t, cfgPath, "--profile", "acme", "--endpoint", endpoint, "signup", "--email", "ops@acme.example", "--tenant", "acme")
	require.Contains(t, out, "slk_")
	require.Contains(t, out, "shown only once")
	_, errOut, code = cli(t, cfgPath, "--profile", "acme2", "--endpoint", endpoint, "signup", "--email", "OPS@acme.example", "--tenant", "acme-two")
	require.Equal(t, 5, code, errOut)
	require.Contains(t, errOut, "tenant name or email is already registered", "one answer for a taken name and a taken email")
	// A new profile takes its endpoint from the default profile (which dev saved)...
	mustCLI(t, cfgPath, "--profile", "beta", "signup", "--email", "ops@beta.example", "--tenant", "beta")
	// ...and an existing profile is never overwritten by accident.
	_, errOut, code = cli(t, cfgPath, "--profile", "beta", "signup", "--email", "ops2@beta.example", "--tenant", "beta-two")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `profile "beta" already exists`)
	_, errOut, code = cli(t, cfgPath, "--profile", "nobody", "topic", "list")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `profile "nobody" not found`)

	out = mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "orders", "-p", "6", "--config", "retention.ms=86400000")
	require.Contains(t, out, "86400000 (1d)")
	require.Contains(t, out, "PARTITION")
	out = mustCLI(t, cfgPath, "--profile", "acme", "topic", "list", "-o", "json")
	var list struct {
		Topics []struct {
			Name           string `json:"name"`
			PartitionCount int    `json:"partitionCount"`
		} `json:"topics"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Topics, 1)
	require.Equal(t, "orders", list.Topics[0].Name)
	require.Equal(t, 6, list.Topics[0].PartitionCount)
	out = mustCLI(t, cfgPath, "--profile", "acme", "topic", "alter", "orders", "--config", "max.message.bytes=524288")
	require.Contains(t, out, "524288")

	// The dev tenant cannot see acme's topic.
	_, errOut, code = cli(t, cfgPath, "--profile", "dev", "topic", "describe", "orders")
	require.Equal(t, 4, code)
	require.Contains(t, errOut, `topic "orders" not found`)

	// Bad input: a clear message and the right exit code.
	_, errOut, code = cli(t, cfgPath, "--profile", "acme", "topic", "create", "bad/name")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "invalid_argument: name: character '/'")
	_, errOut, code = cli(t, cfgPath, "--profile", "acme", "topic", "create", "x", "--config", "retention.ms=2592000000")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "exceeds the free plan's maximum retention of 7d")
	_, errOut, code = cli(t, cfgPath, "--profile", "acme", "topic", "create", "x", "--config", "nope=1")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown key "nope"`)
	_, errOut, code = cli(t, cfgPath, "--profile", "acme", "topic", "create", "x", "-p", "abc")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `invalid argument "abc"`)
	_, _, code = cli(t, cfgPath, "--profile", "acme", "topic", "describe")
	require.Equal(t, 2, code)

	// A second key: log in with it, then revoke it; the profile stops working.
	out = mustCLI(t, cfgPath, "--profile", "acme", "apikey", "create", "--name", "reader", "--scope", "consume", "-o", "json")
	var created struct {
		APIKey struct {
			ID string `json:"id"`
		} `json:"apiKey"`
		Secret string `json:"secret"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created))
	mustCLI(t, cfgPath, "--profile", "reader", "--endpoint", endpoint, "login", "--api-key", created.Secret)
	mustCLI(t, cfgPath, "--profile", "reader", "topic", "list")
	_, errOut, code = cli(t, cfgPath, "--profile", "reader", "topic", "delete", "orders")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, `"admin" scope`)
	out = mustCLI(t, cfgPath, "--profile", "acme", "apikey", "list")
	require.Contains(t, out, created.APIKey.ID)
	require.NotContains(t, out, created.Secret)
	mustCLI(t, cfgPath, "--profile", "acme", "apikey", "revoke", created.APIKey.ID)
	_, errOut, code = cli(t, cfgPath, "--profile", "reader", "topic", "list")
	require.Equal(t, 3, code)
	require.Contains(t, errOut, "revoked")

	// kill -9 and restart: the dev state survives, the same profile works.
	require.NoError(t, dev.cmd.Process.Signal(syscall.SIGKILL))
	_ = dev.cmd.Wait()
	startDev(t, dataDir, cfgPath, addr)
	out = mustCLI(t, cfgPath, "--profile", "acme", "topic", "describe", "orders")
	require.Contains(t, out, "524288")
	var desc struct {
		Topic struct {
			ID string `json:"id"`
		} `json:"topic"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, "--profile", "acme", "topic", "describe", "orders", "-o", "json")), &desc))
	dirs := func() []string {
		m, err := filepath.Glob(filepath.Join(dataDir, "broker-*", "*", desc.Topic.ID+"-*"))
		require.NoError(t, err)
		return m
	}
	require.NotEmpty(t, dirs(), "replicas hold the topic's partitions")
	mustCLI(t, cfgPath, "--profile", "acme", "topic", "delete", "orders")
	// Brokers delete the data of a deleted topic.
	deadline := time.Now().Add(10 * time.Second)
	for len(dirs()) > 0 {
		require.True(t, time.Now().Before(deadline), "partition data still on disk: %v", dirs())
		time.Sleep(50 * time.Millisecond) // poll: until the brokers deleted the topic's data
	}
	_, _, code = cli(t, cfgPath, "--profile", "acme", "topic", "describe", "orders")
	require.Equal(t, 4, code)
}

// TestCLIControlPlaneFlags: bad configuration is refused with a usage error
// that names the flag, and env variables stand in for flags.
func TestCLIControlPlaneFlags(t *testing.T) {
	t.Parallel()
	_, errOut, code := cli(t, filepath.Join(t.TempDir(), "c.json"), "controlplane")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--database-url is required")

	cmd := exec.Command(plainBin, "controlplane", "--token-ttl", "1s")
	cmd.Env = append(os.Environ(), "SLUICE_DATABASE_URL=sqlite:"+filepath.Join(t.TempDir(), "x.db"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "--token-ttl must be between 1m")

	help, _, code := cli(t, filepath.Join(t.TempDir(), "c.json"), "controlplane", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, help, "[$SLUICE_DATABASE_URL]")
	require.Contains(t, help, "[$SLUICE_OPERATOR_TOKEN]")
}
