package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
)

// noisyJobEnv, when set, makes the test binary run as tenant A's load of
// one TestQuotaNoisyNeighbour phase (TestMain dispatches to runNoisyJob)
// instead of running tests: A's clients in a process of their own, as a
// real neighbour's are, so that their CPU time is measured apart from B's
// client and the test's, and their garbage collection does not pause B's
// requests in the same process. noisyNiceEnv runs the job at that nice
// value (e.g. 19), to measure how much of B's latency A's clients cost
// by competing for the machine's cores.
const (
	noisyJobEnv  = "SLUICE_E2E_NOISY_JOB"
	noisyNiceEnv = "SLUICE_E2E_NOISY_NICE"
)

// noisyJobConfig is the job's configuration, JSON in noisyJobEnv.
type noisyJobConfig struct {
	ControlPlane string
	APIKey       string
	Topic        string
	Partitions   int32
	// Kind is the phase: produce, fetch or requests.
	Kind string
}

// noisyJobCounters are the job's progress, printed as a JSON line every
// 100 ms and once more when it has stopped.
type noisyJobCounters struct {
	Acked, Failed, Fetched, Passes, Answered int64
	// Throttles are the SDK's throttled requests of the phase's kind;
	// MetadataThrottles of metadata calls.
	Throttles, MetadataThrottles int64
	Final                        bool
}

func runNoisyJob() int {
	var cfg noisyJobConfig
	if err := json.Unmarshal([]byte(os.Getenv(noisyJobEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "noisy job: config:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var cls []*client.Client
	for range noisyClients {
		cl, err := client.New(context.Background(), cfg.ControlPlane, client.APIKey(cfg.APIKey))
		if err != nil {
			fmt.Fprintln(os.Stderr, "noisy job: client:", err)
			return 2
		}
		cls = append(cls, cl)
	}
	var c noisyJobCounters
	var acked, failed, fetched, passes, answered atomic.Int64
	throttles := func(k client.RequestKind) (n int64) {
		for _, cl := range cls {
			n += cl.Stats().Throttle[k].Requests
		}
		return n
	}
	kind := map[string]client.RequestKind{"produce": client.KindProduce, "fetch": client.KindFetch, "requests": client.KindListOffsets}[cfg.Kind]
	report := func(final bool) {
		c = noisyJobCounters{Acked: acked.Load(), Failed: failed.Load(), Fetched: fetched.Load(), Passes: passes.Load(),
			Answered: answered.Load(), Throttles: throttles(kind), MetadataThrottles: throttles(client.KindMetadata), Final: final}
		b, _ := json.Marshal(c)
		fmt.Println(string(b))
	}
	go func() {
		for ctx.Err() == nil {
			report(false)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()

	var wg sync.WaitGroup
	switch cfg.Kind {
	case "produce":
		// Each client's idempotent producer is offered its share of A's
		// offer in 4 KiB records (small batches, so that the one request
		// a bucket admits into debt is small against its allotment);
		// once its 2 MiB buffer is full, Produce blocks and A always has
		// more to send than it is admitted.
		var producers []*client.Producer
		for _, cl := range cls {
			p, err := cl.NewProducer(context.Background(), client.WithIdempotence(true), client.WithBufferBytes(2<<20), client.WithMaxBatchBytes(32<<10))
			if err != nil {
				fmt.Fprintln(os.Stderr, "noisy job: producer:", err)
				return 2
			}
			producers = append(producers, p)
			wg.Go(func() {
				rec := make([]byte, 4<<10)
				pace(ctx, noisyOffer*noisyProduce/noisyClients/len(rec), func() {
					p.Produce(ctx, &client.Record{Topic: cfg.Topic, Value: rec}, func(r *client.Record, err error) {
						if err != nil {
							failed.Add(1)
							return
						}
						acked.Add(int64(len(r.Value)))
					})
				})
			})
		}
		wg.Wait()
		for _, p := range producers {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = p.Close(cctx) // what is still buffered fails: A's demand ends here
			cancel()
		}
	case "fetch":
		// Each client's consumer reads every partition from the start to
		// the end, again and again, paced at its share of A's offer, in
		// fetches of at most 64 KiB.
		for _, cl := range cls {
			wg.Go(func() {
				rate := float64(noisyOffer * noisyFetch / noisyClients)
				start := time.Now()
				var mine float64
				for ctx.Err() == nil {
					cs, err := cl.NewConsumer(client.WithFetchMaxBytes(64<<10), client.WithPrefetch(1))
					if err != nil {
						return
					}
					for p := range cfg.Partitions {
						if err := cs.AssignUntil(ctx, cfg.Topic, p, client.Earliest(), client.Latest()); err != nil {
							break
						}
					}
					for {
						recs, err := cs.Poll(ctx)
						if err != nil {
							break // io.EOF: the pass is done; or the phase ended
						}
						for _, r := range recs {
							mine += float64(len(r.Value))
							fetched.Add(int64(len(r.Value)))
						}
						// Ahead of the offered rate: wait (pacing A's demand).
						if ahead := time.Duration(mine/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
							select {
							case <-ctx.Done():
							case <-time.After(ahead):
							}
						}
					}
					cs.Close()
					passes.Add(1)
				}
			})
		}
		wg.Wait()
	case "requests":
		// 8 goroutines per client ask for watermarks (ListOffsets) round
		// the partitions, together at A's offer; the SDK waits out each
		// refusal's delay.
		const perClient = 8
		for _, cl := range cls {
			for g := range perClient {
				wg.Go(func() {
					p := int32(g)
					pace(ctx, noisyOffer*noisyRequests/noisyClients/perClient, func() {
						p = (p + 1) % cfg.Partitions
						if _, _, err := cl.Watermarks(ctx, cfg.Topic, p); err == nil {
							answered.Add(1)
						}
					})
				})
			}
		}
		wg.Wait()
	default:
		fmt.Fprintln(os.Stderr, "noisy job: unknown kind", cfg.Kind)
		return 2
	}
	report(true)
	for _, cl := range cls {
		cl.Close()
	}
	return 0
}

// noisyJob is a running job of A's load.
type noisyJob struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	last noisyJobCounters
}

// startNoisyJob starts A's load of one phase in a process of its own, at
// the nice value of noisyNiceEnv if set.
func startNoisyJob(t *testing.T, cfg noisyJobConfig) *noisyJob {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	self, err := os.Executable()
	require.NoError(t, err)
	args := []string{self}
	if n := os.Getenv(noisyNiceEnv); n != "" {
		_, err := strconv.Atoi(n)
		require.NoError(t, err, noisyNiceEnv)
		args = append([]string{"nice", "-n", n}, args...)
	}
	j := &noisyJob{cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	j.cmd.Env = append(os.Environ(), noisyJobEnv+"="+string(b))
	j.cmd.Stderr = os.Stderr
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := j.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, j.cmd.Start())
	t.Cleanup(func() { _ = j.cmd.Process.Kill() })
	go func() {
		defer close(j.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var c noisyJobCounters
			if json.Unmarshal(sc.Bytes(), &c) == nil {
				j.mu.Lock()
				j.last = c
				j.mu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = j.cmd.Wait()
	}()
	return j
}

// counters are the job's last reported progress.
func (j *noisyJob) counters() noisyJobCounters {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

// pid is the job's process (under nice, nice execs the job in place).
func (j *noisyJob) pid() int { return j.cmd.Process.Pid }

// stop ends the job (SIGTERM: it closes its producers and reports) and
// returns its final counters.
func (j *noisyJob) stop(t *testing.T) noisyJobCounters {
	t.Helper()
	require.NoError(t, j.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-j.done:
	case <-time.After(30 * time.Second):
		t.Fatal("A's load did not stop within 30 s of SIGTERM")
	}
	c := j.counters()
	require.True(t, c.Final, "A's load ended without its final report: %+v (exit %v)", c, j.cmd.ProcessState)
	return c
}

// noisyJobSummary writes a phase's counters for the log.
func noisyJobSummary(kind string, c noisyJobCounters) string {
	switch kind {
	case "produce":
		return fmt.Sprintf("%d MiB of record values acknowledged in the phase, %d records failed at the end, %d produce refusals seen by A's SDK", c.Acked>>20, c.Failed, c.Throttles)
	case "fetch":
		return fmt.Sprintf("%d MiB of record values fetched in the phase over %d passes, %d fetch refusals seen by A's SDK", c.Fetched>>20, c.Passes, c.Throttles)
	}
	return fmt.Sprintf("%d ListOffsets answered in the phase, %d refusals seen by A's SDK (%d of metadata)", c.Answered, c.Throttles, c.MetadataThrottles)
}
