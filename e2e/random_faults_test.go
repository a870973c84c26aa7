package e2e

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

var faultSeedFlag = flag.String("fault-seed", "", "seed of TestClusterRandomFaults' fault schedule (default $SLUICE_FAULT_SEED, else 1)")

// defaultFaultSeed is the schedule TestClusterRandomFaults runs when no
// seed is given, so that a plain `go test` is repeatable.
const defaultFaultSeed = 1

// faultSeed is -fault-seed, else $SLUICE_FAULT_SEED, else defaultFaultSeed.
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	s := *faultSeedFlag
	if s == "" {
		s = os.Getenv("SLUICE_FAULT_SEED")
	}
	if s == "" {
		return defaultFaultSeed
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("fault seed %q: %v", s, err)
	}
	return seed
}

type faultKind int

const (
	faultNone  faultKind = iota
	faultKill            // SIGKILL, down for a while, restart on the same disk
	faultPause           // SIGSTOP for a while, then SIGCONT
	faultWipe            // SIGKILL, down for a while, restart with an empty data dir
	faultLinks           // cut or blackhole a broker's links through its proxies
	numFaultKinds
)

func (k faultKind) String() string {
	return [...]string{"nothing", "kill", "pause", "wipe", "links"}[k]
}

// faultStep is one step of a schedule. Every field is drawn for every step,
// whatever the kind, so that a seed always yields the same schedule.
type faultStep struct {
	kind   faultKind
	victim int32
	hold   time.Duration // how long the fault lasts: 0–4 s
	// For faultLinks: which links (0 its peers' link in, 1 its link to the
	// control plane, 2 both) and how (Cut or Blackhole).
	links int
	mode  testcluster.ProxyMode
}

func (f faultStep) String() string {
	switch f.kind {
	case faultNone:
		return fmt.Sprintf("nothing for %s", f.hold)
	case faultKill:
		return fmt.Sprintf("SIGKILL broker %d, restart after %s on the same disk", f.victim, f.hold)
	case faultPause:
		return fmt.Sprintf("SIGSTOP broker %d for %s", f.victim, f.hold)
	case faultWipe:
		return fmt.Sprintf("SIGKILL broker %d, restart after %s with an empty data dir", f.victim, f.hold)
	default:
		return fmt.Sprintf("%s broker %d's %s for %s", f.mode, f.victim, [...]string{"link in from its peers", "link to the control plane", "links in and to the control plane"}[f.links], f.hold)
	}
}

func drawFault(rng *rand.Rand, ids []int32) faultStep {
	f := faultStep{
		kind:   faultKind(rng.IntN(int(numFaultKinds))),
		victim: ids[rng.IntN(len(ids))],
		hold:   time.Duration(rng.Int64N(4001)) * time.Millisecond,
		links:  rng.IntN(3),
		mode:   testcluster.Cut,
	}
	if rng.IntN(2) == 1 {
		f.mode = testcluster.Blackhole
	}
	return f
}

// TestClusterRandomFaults runs a fault schedule drawn from a seed
// (-fault-seed or SLUICE_FAULT_SEED; logged, and marked in every process
// log) while the acks=all workload runs. Each step injects one fault —
// SIGKILL and restart on the same disk, SIGSTOP/SIGCONT, a restart with an
// empty data dir (one broker at a time, and only when every partition has
// its 3 replicas in sync again; otherwise the step is skipped), a cut or
// blackholed link through the fault proxies, or nothing — holds it 0–4 s,
// heals it and waits, with deadlines, until every broker is live and every
// partition acknowledges acks=all again. Then the cluster quiesces and the
// checker and the byte-identical replica comparison run. 6 steps by
// default, 60 with SLUICE_SOAK=1.
func TestClusterRandomFaults(t *testing.T) {
	t.Parallel()
	seed := faultSeed(t)
	steps := 6
	if soak() {
		steps = 60
	}
	t.Logf("fault schedule: seed %d, %d steps (rerun with SLUICE_FAULT_SEED=%d)", seed, steps, seed)
	rng := rand.New(rand.NewPCG(seed, 0x5e1ce))
	t.Cleanup(func() { // registered first, so it is logged last
		if t.Failed() {
			t.Logf("fault schedule seed %d: rerun with SLUICE_FAULT_SEED=%d", seed, seed)
		}
	})

	s := startScenario(t, testcluster.Options{Proxies: true})
	s.c.Mark("random fault schedule: seed %d, %d steps", seed, steps)
	s.startWorkload(testcluster.WorkloadConfig{})
	s.waitAcked(1000, 60*time.Second)
	s.waitControllerGrace()

	ids := s.c.BrokerIDs()
	ran := map[string]int{}
	for i := range steps {
		f := drawFault(rng, ids)
		if f.kind == faultWipe && !s.waitFullISR(15*time.Second) {
			s.c.Mark("step %d/%d: skip (%s): not every partition has its replicas in sync", i+1, steps, f)
			ran["wipe skipped"]++
			continue
		}
		s.c.Mark("step %d/%d: %s", i+1, steps, f)
		ran[f.kind.String()]++
		s.inject(f)
		healed := time.Now()
		s.waitHealthy(healed)
		t.Logf("step %d/%d: healthy %s after healing", i+1, steps, time.Since(healed).Round(time.Millisecond))
	}
	s.healAll()
	t.Logf("faults run: %v", ran)
	s.waitAcked(s.w.Acked()+1000, 60*time.Second)
	s.verify()
}

// inject applies one fault, holds it, and heals it.
func (s *scenario) inject(f faultStep) {
	s.t.Helper()
	switch f.kind {
	case faultNone:
		time.Sleep(f.hold) // fault: how long it holds
	case faultKill, faultWipe:
		s.c.Kill(f.victim)
		time.Sleep(f.hold) // fault: how long it holds
		s.c.Restart(f.victim, f.kind == faultWipe)
	case faultPause:
		s.c.Pause(f.victim)
		time.Sleep(f.hold) // fault: how long it holds
		s.c.Resume(f.victim)
	case faultLinks:
		b := s.c.Broker(f.victim)
		if f.links != 1 {
			b.In.SetMode(f.mode)
		}
		if f.links != 0 {
			b.CP.SetMode(f.mode)
		}
		time.Sleep(f.hold) // fault: how long it holds
		b.In.SetMode(testcluster.Pass)
		b.CP.SetMode(testcluster.Pass)
		s.c.Mark("healed broker %d's links", f.victim)
	}
}

// waitHealthy waits until every broker is live and every partition has
// acknowledged an acks=all produce sent after since.
func (s *scenario) waitHealthy(since time.Time) {
	s.t.Helper()
	s.c.WaitLive(s.c.BrokerIDs()...)
	for _, p := range partitions {
		s.waitAckAfter(p, since, 60*time.Second)
	}
}

// waitFullISR waits up to timeout until every broker's metadata shows every
// partition with a leader and all its replicas in the ISR, and reports
// whether it did.
func (s *scenario) waitFullISR(timeout time.Duration) bool {
	err := testenv.Retry(timeout, func() error {
		for _, id := range s.c.BrokerIDs() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			md, err := s.cl.Metadata(ctx, id)
			cancel()
			if err != nil {
				return err
			}
			if len(md) != len(partitions) {
				return fmt.Errorf("broker %d knows %d partitions", id, len(md))
			}
			for _, p := range md {
				if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
					return fmt.Errorf("broker %d: partition %d leader %d ISR %v replicas %v", id, p.Partition, p.Leader, p.ISR, p.Replicas)
				}
			}
		}
		return nil
	})
	if err != nil {
		s.t.Logf("not fully in sync: %v", err)
	}
	return err == nil
}

// healAll puts every proxy back to Pass; every step already healed its own
// fault, so this only guards the end of the schedule.
func (s *scenario) healAll() {
	s.t.Helper()
	var healed []string
	for _, id := range s.c.BrokerIDs() {
		b := s.c.Broker(id)
		for name, p := range map[string]*testcluster.Proxy{"in": b.In, "control plane": b.CP} {
			if p != nil && p.Mode() != testcluster.Pass {
				p.SetMode(testcluster.Pass)
				healed = append(healed, fmt.Sprintf("broker %d's %s link", id, name))
			}
		}
	}
	if len(healed) > 0 {
		s.c.Mark("healed %s", strings.Join(healed, ", "))
	}
	s.c.WaitLive(s.c.BrokerIDs()...)
}
