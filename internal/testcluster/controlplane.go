package testcluster

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"
)

// KillControlPlane SIGKILLs the control plane and waits for it to exit.
// The brokers keep running; until RestartControlPlane they can neither
// heartbeat, register, watch assignments nor alter ISRs, and nothing elects
// leaders.
func (c *Cluster) KillControlPlane() {
	c.t.Helper()
	if !c.ControlPlaneRunning() {
		c.t.Fatal("testcluster: the control plane is not running")
	}
	c.cp.kill()
	c.mark("SIGKILL control plane")
}

// ControlPlaneRunning reports whether the control plane process is up.
func (c *Cluster) ControlPlaneRunning() bool {
	done, _ := c.cp.exited()
	return !done
}

// RestartControlPlane starts the control plane again (SIGKILLing it first
// if it still runs) with exactly the arguments it was first started with:
// the same database URL, listen address, secrets and leases. Its output is
// appended to the same log, after a marker line. It waits until the new
// process answers /readyz; it does not wait for the brokers (see WaitLive).
func (c *Cluster) RestartControlPlane() {
	c.t.Helper()
	if c.ControlPlaneRunning() {
		c.cp.kill()
	}
	bin, args, logPath := c.cp.cmd.Path, c.cp.cmd.Args[1:], c.cp.logPath
	c.mark("restart control plane on %s", c.cpAddr)
	start := func() error {
		p, err := startProc("controlplane", bin, logPath, nil, args)
		if err != nil {
			return err
		}
		c.cp = p
		return nil
	}
	if err := start(); err != nil {
		c.t.Fatal(err)
	}
	testenv.Wait(c.t, 30*time.Second, "the restarted control plane ready", func() error {
		if done, err := c.cp.exited(); done {
			out := lastRun(tail(logPath, 4000))
			// The listen address is an ephemeral port: in the rare case that
			// an outgoing connection holds it for a moment, start again.
			if !strings.Contains(out, "address already in use") {
				return testenv.Permanent(fmt.Errorf("restarted control plane exited: %v\n%s", err, out))
			}
			c.mark("control plane could not listen on %s; starting it again", c.cpAddr)
			if err := start(); err != nil {
				return testenv.Permanent(err)
			}
			return fmt.Errorf("control plane could not listen on %s", c.cpAddr)
		}
		return httpOK(c.hc, c.URL(c.cpAddr)+"/readyz")
	})
}

// lastRun cuts a process log down to its last run (from the last start
// line startProc wrote).
func lastRun(log string) string {
	if i := strings.LastIndex(log, "=== controlplane start "); i >= 0 {
		return log[i:]
	}
	return log
}
