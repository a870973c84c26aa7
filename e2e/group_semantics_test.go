package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// groupRun is one delivery mode's consumers: every record each consumer
// process printed (it prints a record before it counts as processed).
type groupRun struct {
	name    string
	args    []string
	killMin time.Duration // each consumer process is killed 1–2 × killMin after it starts
	mu      sync.Mutex
	seen    map[int]int
	prints  int
	crashes int
}

func (g *groupRun) record(v int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen[v]++
	g.prints++
}

// consumeProcess runs `sluice consume --group` until it exits or is killed
// at kill (zero: runs until it stops by itself), recording what it printed.
func (g *groupRun) consumeProcess(t *testing.T, endpoint, apiKey string, kill time.Duration, extra ...string) {
	t.Helper()
	args := append([]string{"--endpoint", endpoint, "--api-key", apiKey, "consume", "events", "-o", "json"}, g.args...)
	args = append(args, extra...)
	cmd := exec.Command(sluiceBin, args...)
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	var timer *time.Timer
	if kill > 0 {
		timer = time.AfterFunc(kill, func() { _ = cmd.Process.Kill() })
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var r struct {
			Value *string `json:"value"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "line %q", sc.Text())
		v, err := strconv.Atoi(*r.Value)
		require.NoError(t, err)
		g.record(v)
	}
	_, _ = io.Copy(io.Discard, out)
	err = cmd.Wait()
	if timer != nil {
		timer.Stop()
	}
	if r := testcluster.DataRace(stderr.String()); r != "" {
		t.Errorf("sluice consume reports a data race:\n%s", r)
	}
	if kill == 0 {
		require.NoError(t, err, "consumer %s: %s", g.name, stderr.String())
	}
}

// TestGroupDeliverySemanticsUnderConsumerCrashes runs three consumer
// groups on one topic fed at a fixed rate, each as `sluice consume
// --group` processes that are SIGKILLed every few seconds and started again, and
// counts what they processed (printed):
//   - at-least-once, commit every 500: nothing lost, at most 500 replays
//     per crash;
//   - at-least-once, auto-commit every 5 s: nothing lost, replays bounded
//     by the rate × 5 s per crash;
//   - at-most-once: no duplicates, losses bounded per crash by the records
//     fetched at once.
func TestGroupDeliverySemanticsUnderConsumerCrashes(t *testing.T) {
	t.Parallel()
	c := testcluster.Start(t, testcluster.Options{
		Bin: sluiceBin, DatabaseURL: testenv.PostgresURL(t),
		GroupHeartbeatInterval: 200 * time.Millisecond, GroupSessionTimeout: 2 * time.Second,
	})
	tc := c.NewClient(t, "acme", "events", 3, 2)
	ctx := t.Context()
	cl, err := client.New(ctx, c.ControlPlane(), client.APIKey(tc.APIKey))
	require.NoError(t, err)
	defer cl.Close()

	const rate, duration = 400, 20 * time.Second
	runs := []*groupRun{
		{name: "at-least-once/every-500", killMin: 2 * time.Second, args: []string{"--group", "alo-500", "--commit", "every", "--commit-every", "500"}},
		// Crashes further apart than the commit interval: a consumer
		// killed sooner than 5 s after it started has committed nothing,
		// and the next one replays everything since the last commit.
		{name: "at-least-once/auto-5s", killMin: 6 * time.Second, args: []string{"--group", "alo-5s", "--commit", "interval", "--commit-interval", "5s"}},
		{name: "at-most-once", killMin: 2 * time.Second, args: []string{"--group", "amo", "--delivery", "at-most-once"}},
	}
	for _, g := range runs {
		g.seen = map[int]int{}
	}

	// The producer: rate records/s for duration, values 0, 1, 2, ...
	p, err := cl.NewProducer(ctx)
	require.NoError(t, err)
	produced := 0
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		end := time.Now().Add(duration)
		for time.Now().Before(end) {
			<-tick.C
			for range rate / 100 {
				p.Produce(ctx, &client.Record{Topic: "events", Value: []byte(strconv.Itoa(produced))}, nil)
				produced++
			}
		}
	}()

	endpoint := c.ControlPlane()
	var wg sync.WaitGroup
	for _, g := range runs {
		wg.Go(func() {
			for {
				select {
				case <-prodDone:
					return
				default:
				}
				g.consumeProcess(t, endpoint, tc.APIKey, g.killMin+rand.N(g.killMin))
				g.mu.Lock()
				g.crashes++
				g.mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, p.Close(ctx))
	// A last consumer per group reads to the end and stops cleanly.
	for _, g := range runs {
		wg.Go(func() { g.consumeProcess(t, endpoint, tc.APIKey, 0, "--timeout", "4s") })
	}
	wg.Wait()

	for _, g := range runs {
		lost, dups := 0, 0
		for v := range produced {
			switch n := g.seen[v]; {
			case n == 0:
				lost++
			case n > 1:
				dups += n - 1
			}
		}
		t.Logf("%s: %d produced at %d/s, %d consumer crashes: %d processed, %d lost, %d replayed",
			g.name, produced, rate, g.crashes, g.prints, lost, dups)
		require.Positive(t, g.crashes)
		switch g.name {
		case "at-least-once/every-500":
			require.Zero(t, lost, "at-least-once loses nothing")
			require.LessOrEqual(t, dups, 500*g.crashes, "at most 500 replays per crash")
		case "at-least-once/auto-5s":
			require.Zero(t, lost, "at-least-once loses nothing")
			require.LessOrEqual(t, dups, (rate*5+rate)*g.crashes, "replays bounded by rate × 5 s per crash (plus a second of slack)")
		case "at-most-once":
			require.Zero(t, dups, "at-most-once never replays")
			require.LessOrEqual(t, lost, 500*g.crashes, fmt.Sprintf("losses bounded by what was fetched at once, per crash (%d crashes)", g.crashes))
		}
	}
}
