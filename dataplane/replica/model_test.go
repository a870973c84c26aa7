package replica

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestReplicaModel drives the simulated cluster with random commands from
// fixed seeds (produce, fetch, clock, crash and restart with an unflushed
// tail lost, isolation, elections, a controller that delays, reorders and
// refuses) and checks the invariants after every step (cluster.check). At
// the end it heals everything and requires the replicas to converge: logs
// identical, every replica in the ISR, HW = LEO, every acknowledged record
// present.
func TestReplicaModel(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed, 400)
		})
	}
}

type modelRun struct {
	t      *testing.T
	seed   uint64
	c      *cluster
	script []string
	trace  strings.Builder // commands and their output
}

func (m *modelRun) do(format string, args ...any) {
	cmd := fmt.Sprintf(format, args...)
	m.script = append(m.script, cmd)
	m.c.out.Reset()
	err := m.c.run(cmd)
	fmt.Fprintf(&m.trace, "> %s\n%s", cmd, m.c.out.String())
	if err != nil {
		m.t.Fatalf("seed %d: %s: %v\ntrace:\n%s", m.seed, cmd, err, m.trace.String())
	}
}

func runModel(t *testing.T, seed uint64, steps int) *modelRun {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	m := &modelRun{t: t, seed: seed, c: newCluster()}
	c := m.c
	n := 2 + rng.IntN(3) // 2..4 replicas
	minISR := 1 + rng.IntN(min(n, 3))
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
	}
	m.do("replicas %s leader=1 min-isr=%d lag-max=30s", strings.Join(ids, " "), minISR)
	pick := func() *broker { return c.brokers[rng.IntN(len(c.brokers))] }
	for range steps {
		b := pick()
		switch r := rng.IntN(100); {
		case r < 25:
			target := c.ctl.leader
			if rng.IntN(5) == 0 {
				target = b.id // sometimes a zombie or a follower
			}
			acks := "1"
			if rng.IntN(3) > 0 {
				acks = "all"
			}
			m.do("produce %d acks=%s n=%d", target, acks, 1+rng.IntN(3))
		case r < 55:
			if rng.IntN(3) == 0 {
				m.do("fetch %d max=%d", b.id, rng.IntN(3))
			} else {
				m.do("fetch %d", b.id)
			}
		case r < 70:
			m.do("tick %ds", []int{0, 1, 5, 10, 20, 31}[rng.IntN(6)])
		case r < 74:
			if b.up {
				m.do("crash %d", b.id)
			}
		case r < 80:
			if !b.up {
				// Lose only records that were never committed: a
				// flush=always broker loses nothing acknowledged.
				lose := max(0, int64(len(b.log))-c.commitEnd)
				m.do("restart %d lose=%d", b.id, rng.Int64N(lose+1))
			}
		case r < 85:
			if len(c.ctl.isr) > 0 {
				m.do("elect %d", c.ctl.isr[rng.IntN(len(c.ctl.isr))])
			}
		case r < 89:
			if rng.IntN(2) == 0 {
				m.do("isolate %d", b.id)
			} else {
				m.do("isolate %d controller", b.id)
			}
		case r < 94:
			m.do("heal %d", b.id)
		default:
			switch rng.IntN(4) {
			case 0:
				m.do("controller manual")
			case 1:
				m.do("controller auto")
			case 2:
				m.do("controller process")
			default:
				if k := len(c.ctl.outbox); k > 0 {
					order := rng.Perm(k)[:1+rng.IntN(k)]
					var s []string
					for _, i := range order {
						s = append(s, fmt.Sprint(i+1))
					}
					m.do("deliver %s", strings.Join(s, " "))
				}
			}
		}
	}
	m.converge()
	return m
}

// converge heals the cluster and requires the replicas to become identical.
func (m *modelRun) converge() {
	c := m.c
	m.do("controller auto")
	for _, b := range c.brokers {
		if b.isolated || b.ctlIsolated {
			m.do("heal %d", b.id)
		}
		if !b.up {
			m.do("restart %d", b.id)
		}
	}
	if l := c.broker(c.ctl.leader); l == nil || l.leader == nil {
		m.do("elect %d", c.ctl.isr[0])
	}
	leader := c.broker(c.ctl.leader)
	for range 20 {
		for _, b := range c.brokers {
			if b != leader {
				m.do("fetch %d", b.id)
			}
		}
		m.do("tick 1s")
		done := len(leader.leader.ISR()) == len(c.brokers) && leader.leader.HW() == leader.leader.LEO()
		for _, b := range c.brokers {
			done = done && slices.Equal(b.log, leader.log)
		}
		if done {
			for o, e := range c.acked {
				if leader.log[o] != e {
					m.t.Fatalf("seed %d: acknowledged %v at %d lost", m.seed, e, o)
				}
			}
			return
		}
	}
	m.do("status")
	m.t.Fatalf("seed %d: no convergence\ntrace:\n%s", m.seed, m.trace.String())
}
