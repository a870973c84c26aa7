package testcluster

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one run of a sluice server process. Its output goes straight to
// a log file (appended across restarts), so a stopped process never blocks
// on a pipe and the log survives the process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	mu      sync.Mutex
	err     error // exit status, set before done is closed
}

// startProc starts bin with args, its output appended to logPath, in the
// test's environment plus env (KEY=VALUE entries, later ones winning).
func startProc(name, bin, logPath string, env, args []string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "=== %s start %s: sluice %s\n", name, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=")
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// signal sends sig unless the process has exited.
func (p *proc) signal(sig syscall.Signal) error {
	if done, _ := p.exited(); done {
		return fmt.Errorf("%s has exited", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits for it to exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// tail returns up to n bytes of the end of a file.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	off := max(fi.Size()-n, 0)
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	b, _ := io.ReadAll(f)
	s := string(b)
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
		s = "…\n" + s
	}
	return s
}
