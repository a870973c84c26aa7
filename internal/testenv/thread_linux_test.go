package testenv

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestLockedThreadOutlivesItsWork: a child forked with the parent-death
// signal from onLockedThread's goroutine lives on after that goroutine
// returns. Ending the thread instead (returning while locked, as startChild
// once did) SIGKILLs it at once, and with it every process a test running in
// parallel had forked from that thread earlier: e2e saw a control plane
// vanish mid-test ("connection refused") when another test's postgres
// stopped.
func TestLockedThreadOutlivesItsWork(t *testing.T) {
	started := make(chan *exec.Cmd, 1)
	onLockedThread(func() {
		cmd := exec.Command("sleep", "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Error(err)
			close(started)
			return
		}
		started <- cmd
	})
	cmd, ok := <-started
	if !ok {
		return
	}
	exited := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	select {
	case <-exited:
		t.Fatalf("the child died when the goroutine that started it returned: %v", err)
	case <-time.After(time.Second): // absence: the parent-death signal comes within moments of the thread's end
	}
}
