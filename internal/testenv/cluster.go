//go:build unix

package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// dirPrefix names the per-binary cluster directories in the temp dir (and the sweep's glob).
	dirPrefix = "sluice-testenv-"
	// ownerFile, in a cluster directory, holds the PID of the test binary that owns it.
	ownerFile = "owner.pid"

	initdbTimeout   = 2 * time.Minute
	readyTimeout    = time.Minute
	stopTimeout     = 30 * time.Second
	aptTimeout      = 15 * time.Minute
	portAttempts    = 5
	readyPollPeriod = 10 * time.Millisecond
	logTailBytes    = 4000
)

// initdbArgs are the initdb flags after -D. --locale=C keeps collation and messages the same on
// every machine whatever its environment's locale.
var initdbArgs = []string{"-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8", "--locale=C"}

// serverArgs are the postgres flags after -D, -k, -h and -p: fast and unsafe, for tests only.
// dynamic_shared_memory_type=mmap keeps those segments in the data directory, which is removed
// even when postgres is killed, instead of in /dev/shm, where a killed cluster would leave them.
var serverArgs = []string{
	"-c", "fsync=off",
	"-c", "synchronous_commit=off",
	"-c", "full_page_writes=off",
	"-c", "max_connections=300",
	"-c", "dynamic_shared_memory_type=mmap",
}

// binGlobs are where distributions install versioned PostgreSQL binaries (Debian/Ubuntu, RHEL).
var binGlobs = []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"}

var errPortInUse = errors.New("port already in use")

// pgBin is one PostgreSQL installation's binaries.
type pgBin struct {
	dir, initdb, postgres string
	version               string // e.g. "15.18", or "unknown"
}

// findOrInstallBinaries finds initdb/postgres, installing them with apt-get when missing and
// running as root. The note tells why none could be had.
func findOrInstallBinaries() (*pgBin, string, error) {
	if b := findBinaries(); b != nil {
		return b, "", nil
	}
	if os.Geteuid() != 0 {
		return nil, "", nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return nil, "", nil
	}
	note := aptInstall()
	if b := findBinaries(); b != nil {
		return b, "", nil
	}
	if note == "" {
		note = "apt-get install -y postgresql succeeded but no initdb/postgres was found afterwards"
	}
	return nil, note, nil
}

// findBinaries looks for a directory holding both initdb and postgres: initdb's on PATH first, then
// the distributions' versioned directories, highest version first.
func findBinaries() *pgBin {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r // initdb looks for postgres beside its real path
		}
		if a, err := filepath.Abs(p); err == nil {
			dirs = append(dirs, filepath.Dir(a))
		}
	}
	var versioned []string
	for _, g := range binGlobs {
		m, _ := filepath.Glob(g)
		versioned = append(versioned, m...)
	}
	slices.SortStableFunc(versioned, func(a, b string) int {
		return compareVersions(dirVersion(b), dirVersion(a)) // descending
	})
	dirs = append(dirs, versioned...)
	for _, d := range dirs {
		initdb, postgres := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(initdb) && isExecutable(postgres) {
			return &pgBin{dir: d, initdb: initdb, postgres: postgres, version: binVersion(postgres)}
		}
	}
	return nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

var versionNumberRE = regexp.MustCompile(`[0-9]+(?:\.[0-9]+)*`)

// dirVersion reads the version in a versioned bin directory's parent name: .../15/bin, .../pgsql-16/bin.
func dirVersion(binDir string) []int {
	return parseVersion(versionNumberRE.FindString(filepath.Base(filepath.Dir(binDir))))
}

func parseVersion(s string) []int {
	var v []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		v = append(v, n)
	}
	return v
}

func compareVersions(a, b []int) int { return slices.Compare(a, b) }

var serverVersionRE = regexp.MustCompile(`\(PostgreSQL\)\s+([0-9A-Za-z.]+)`)

// binVersion asks postgres for its version: "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)".
func binVersion(postgres string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, postgres, "--version").Output()
	if err != nil {
		return "unknown"
	}
	return versionFromOutput(string(out))
}

func versionFromOutput(out string) string {
	if m := serverVersionRE.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return "unknown"
}

// aptInstall runs apt-get install -y postgresql (after apt-get update if the first try fails),
// one test binary at a time. It returns what went wrong, or "".
func aptInstall() string {
	if unlock, err := lockFile(filepath.Join(os.TempDir(), dirPrefix+"apt.lock"), syscall.LOCK_EX); err == nil {
		defer unlock()
	}
	if findBinaries() != nil { // another test binary installed it while we waited
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), aptTimeout)
	defer cancel()
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if _, err := run("install", "-y", "postgresql"); err == nil {
		return ""
	}
	if out, err := run("update"); err != nil {
		return fmt.Sprintf("apt-get update failed (%v):\n%s", err, tail(out))
	}
	if out, err := run("install", "-y", "postgresql"); err != nil {
		return fmt.Sprintf("apt-get install -y postgresql failed (%v):\n%s", err, tail(out))
	}
	return ""
}

// runAs is the OS identity initdb and postgres run as.
type runAs struct {
	cred     *syscall.Credential // nil: as this process
	uid, gid int
}

// serverIdentity is this process's identity, or the postgres user's when we are root (initdb and
// postgres refuse to run as root).
func serverIdentity() (*runAs, error) {
	if os.Geteuid() != 0 {
		return &runAs{uid: os.Geteuid(), gid: os.Getegid()}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, so initdb/postgres must run as the \"postgres\" OS user, "+
			"but it cannot be found (%v): create it (useradd --system --user-group postgres)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("postgres OS user has non-numeric uid %q / gid %q", u.Uid, u.Gid)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				cred.Groups = append(cred.Groups, uint32(g))
			}
		}
	}
	return &runAs{cred: cred, uid: int(uid), gid: int(gid)}, nil
}

// localCluster is a throwaway PostgreSQL cluster owned by this test binary.
type localCluster struct {
	bin       *pgBin
	as        *runAs
	root      string // temp dir holding everything below; removed by stop
	data      string // data directory
	sock      string // unix socket directory
	logPath   string // postgres's stdout and stderr
	port      int
	proc      *child
	fromCache bool   // data was copied from the cached template instead of made by initdb
	timing    string // how long the steps took, for the log
}

func (c *localCluster) url(db string) *url.URL {
	return &url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
}

// startLocalCluster makes a data directory (from the cache or by initdb) and starts postgres on
// a free loopback port.
func startLocalCluster(bin *pgBin) (*localCluster, error) {
	as, err := serverIdentity()
	if err != nil {
		return nil, err
	}
	for _, b := range tempBases() {
		sweepStale(b)
	}
	base := fastTempBase()
	if base == "" {
		base = os.TempDir()
		if as.cred != nil {
			base = "/tmp" // the postgres user must be able to reach it; $TMPDIR might be under /root
		}
	}
	root, err := os.MkdirTemp(base, dirPrefix+"*") // mode 0700
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(root)
		}
	}()
	if err := os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	c := &localCluster{
		bin:     bin,
		as:      as,
		root:    root,
		data:    filepath.Join(root, "data"),
		sock:    filepath.Join(root, "sock"),
		logPath: filepath.Join(root, "postgres.log"),
	}
	if err := os.Mkdir(c.sock, 0o700); err != nil {
		return nil, err
	}
	if as.cred != nil {
		for _, p := range []string{root, c.sock} {
			if err := os.Chown(p, as.uid, as.gid); err != nil {
				return nil, err
			}
		}
	}

	t0 := time.Now()
	if c.fromCache, err = c.prepareData(); err != nil {
		return nil, err
	}
	t1 := time.Now()
	err = c.startWithRetries()
	if err != nil && c.fromCache {
		// The cached template may be bad: forget it and try once more from initdb.
		c.dropCacheEntry()
		c.fromCache = false
		if rmErr := os.RemoveAll(c.data); rmErr != nil {
			return nil, err
		}
		if initErr := c.initdb(); initErr != nil {
			return nil, fmt.Errorf("%w\n(and after dropping the cached template) %v", err, initErr)
		}
		err = c.startWithRetries()
	}
	if err != nil {
		return nil, err
	}
	how := "initdb"
	if c.fromCache {
		how = "copy of cached template"
	}
	c.timing = fmt.Sprintf("%s %s, start %s", how, t1.Sub(t0).Round(time.Millisecond), time.Since(t1).Round(time.Millisecond))
	ok = true
	return c, nil
}

// prepareData fills c.data: a copy of the cached template when there is one, otherwise initdb (whose
// result then becomes the template). Copies share the cache lock, so test binaries starting
// together copy in parallel; making the template takes it exclusively, so initdb runs once.
// Caching is best effort: its failures fall back to initdb.
func (c *localCluster) prepareData() (fromCache bool, err error) {
	entry, lockPath, ok := c.cacheEntry()
	if !ok {
		return false, c.initdb()
	}
	if c.copyFromCache(entry, lockPath, syscall.LOCK_SH) {
		return true, nil
	}
	unlock, err := lockFile(lockPath, syscall.LOCK_EX)
	if err != nil {
		return false, c.initdb()
	}
	defer unlock()
	if c.copyFromCache(entry, "", 0) { // made by another binary while we waited
		return true, nil
	}
	if err := c.initdb(); err != nil {
		return false, err
	}
	staging := filepath.Join(filepath.Dir(entry), ".staging-"+randomHex(4))
	if copyTree(c.data, staging) == nil {
		_ = os.RemoveAll(entry) // a broken leftover (no PG_VERSION), if any
		_ = os.Rename(staging, entry)
	}
	_ = os.RemoveAll(staging)
	return false, nil
}

// copyFromCache copies the template, if there is one, to c.data, under a lock of the given kind
// (none if lockPath is ""). On failure c.data does not exist.
func (c *localCluster) copyFromCache(entry, lockPath string, how int) bool {
	if lockPath != "" {
		unlock, err := lockFile(lockPath, how)
		if err != nil {
			return false
		}
		defer unlock()
	}
	if _, err := os.Stat(filepath.Join(entry, "PG_VERSION")); err != nil {
		return false
	}
	if copyTree(entry, c.data) != nil {
		_ = os.RemoveAll(c.data)
		return false
	}
	return true
}

// cacheEntry is where the template data directory for this installation, these initdb flags and
// this owner is cached, and the lock file that guards the cache.
func (c *localCluster) cacheEntry() (entry, lock string, ok bool) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", "", false
	}
	dir = filepath.Join(dir, "sluice-testenv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", false
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%q\x00%d", c.bin.dir, initdbArgs, c.as.uid))
	version := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' {
			return r
		}
		return '_'
	}, c.bin.version)
	return filepath.Join(dir, "pgdata-"+version+"-"+hex.EncodeToString(sum[:4])), filepath.Join(dir, "lock"), true
}

func (c *localCluster) dropCacheEntry() {
	entry, lockPath, ok := c.cacheEntry()
	if !ok {
		return
	}
	if unlock, err := lockFile(lockPath, syscall.LOCK_EX); err == nil {
		defer unlock()
	}
	_ = os.RemoveAll(entry)
}

// copyTree copies src to the new path dst, keeping modes and (when root) owners.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// prepare sets up cmd to run as the server identity, in the cluster directory (initdb and postgres
// fail if they cannot read their working directory), with a clean locale and no PG* variables.
func (c *localCluster) prepare(cmd *exec.Cmd) {
	cmd.Dir = c.root
	cmd.SysProcAttr = childAttr(c.as.cred)
	env := []string{"LC_ALL=C"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "LC_") || k == "LANG" || k == "LANGUAGE" {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
}

func (c *localCluster) initdb() error {
	logPath := filepath.Join(c.root, "initdb.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.bin.initdb, append([]string{"-D", c.data}, initdbArgs...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	c.prepare(cmd)
	p, err := startChild(cmd)
	if err == nil {
		err = p.wait(initdbTimeout)
	}
	if err != nil {
		out, _ := os.ReadFile(logPath)
		return fmt.Errorf("initdb failed: %v\n--- initdb output ---\n%s", err, tail(string(out)))
	}
	return nil
}

func (c *localCluster) startWithRetries() error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		err = c.start(port)
		if err == nil || !errors.Is(err, errPortInUse) || attempt == portAttempts {
			return err
		}
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) { return FreePort() }

// start runs postgres on port and waits until it accepts connections.
func (c *localCluster) start(port int) error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	var offset int64
	if fi, err := logf.Stat(); err == nil {
		offset = fi.Size()
	}
	args := append([]string{"-D", c.data, "-k", c.sock, "-h", "127.0.0.1", "-p", strconv.Itoa(port)}, serverArgs...)
	cmd := exec.Command(c.bin.postgres, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	c.prepare(cmd)
	p, err := startChild(cmd)
	_ = logf.Close() // postgres has its own descriptor now
	if err != nil {
		return fmt.Errorf("start %s: %w", c.bin.postgres, err)
	}
	c.port, c.proc = port, p
	if err := c.waitReady(); err != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		c.proc = nil
		log := readFrom(c.logPath, offset)
		if strings.Contains(log, "Address already in use") {
			return fmt.Errorf("%w: %d", errPortInUse, port)
		}
		return fmt.Errorf("%v\n--- postgres log ---\n%s", err, tail(log))
	}
	return nil
}

// waitReady polls until our postgres accepts connections, it exits, or readyTimeout passes.
func (c *localCluster) waitReady() error {
	deadline := time.Now().Add(readyTimeout)
	u := c.url("postgres").String()
	want := realPath(c.data)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			var dir string
			err = conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir)
			_ = conn.Close(ctx)
			if err == nil && realPath(dir) == want {
				cancel()
				return nil
			}
			if err == nil {
				// Someone else's server took the port; ours will exit with "Address already in use".
				err = fmt.Errorf("port %d is served by another cluster (%s)", c.port, dir)
			}
		}
		cancel()
		lastErr = err
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres did not accept connections within %s: %v", readyTimeout, lastErr)
		}
		select {
		case <-c.proc.done:
			return fmt.Errorf("postgres exited: %v", c.proc.err)
		case <-time.After(readyPollPeriod):
		}
	}
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// stop shuts postgres down (SIGINT: fast shutdown) and removes the cluster directory.
func (c *localCluster) stop() {
	if c.proc != nil {
		_ = c.proc.cmd.Process.Signal(os.Interrupt)
		_ = c.proc.wait(stopTimeout)
		c.proc = nil
	}
	_ = os.RemoveAll(c.root)
}

// child is a started process whose parent-death signal is tied to a thread kept for it alone.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been waited for
	err  error         // cmd.Wait's result, once done is closed
}

// startChild starts cmd from a goroutine locked to its OS thread until the process ends. Linux
// sends the parent-death signal when the thread that forked the child exits, and the Go runtime
// ends a thread when a goroutine locked to it returns: the lock keeps the thread from serving
// anything else (and being ended by it) while postgres runs. The goroutine unlocks before it
// returns, so that the thread is never ended: any other process of the test binary forked from it
// earlier (a sluice server of a test running in parallel, with its own parent-death signal) would be
// killed with it. Nothing in this module ends a thread.
func startChild(cmd *exec.Cmd) (*child, error) {
	ch := &child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	onLockedThread(func() {
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		ch.err = cmd.Wait()
		close(ch.done)
	})
	if err := <-started; err != nil {
		return nil, err
	}
	return ch, nil
}

// onLockedThread runs f on a new goroutine locked to its OS thread, and unlocks it when f
// returns: the thread then goes back to the runtime alive, instead of being ended with the
// goroutine (which would send the parent-death signal to every child forked from it).
func onLockedThread(f func()) {
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f()
	}()
}

// wait waits for the process to end, killing it after timeout.
func (ch *child) wait(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch.done:
		return ch.err
	case <-t.C:
		_ = ch.cmd.Process.Kill()
		<-ch.done
		return fmt.Errorf("killed after %s", timeout)
	}
}

// tempBases lists the directories where cluster directories may be.
func tempBases() []string {
	bases := []string{"/tmp"}
	if shmDir != "" {
		bases = append(bases, shmDir)
	}
	if t := os.TempDir(); !slices.Contains(bases, t) {
		bases = append(bases, t)
	}
	return bases
}

// sweepStale removes cluster directories whose test binary is gone (killed before Main could clean
// up), killing their postmaster if it somehow survived.
func sweepStale(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours to judge, or still being set up
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || processAlive(owner) {
			continue
		}
		pid := postmasterPIDFile(filepath.Join(d, "data"))
		pm := 0
		if len(pid) > 0 {
			pm, _ = strconv.Atoi(strings.TrimSpace(pid[0]))
		}
		if pm > 0 && processAlive(pm) && cmdlineContains(pm, d) {
			_ = syscall.Kill(pm, syscall.SIGKILL) // its children exit once they see it gone
		}
		if len(pid) > 6 {
			removeOrphanShm(pid[6]) // no-op while processes are still attached
		}
		_ = os.RemoveAll(d)
	}
}

// postmasterPIDFile returns the lines of the data directory's postmaster.pid: PID, data directory,
// start time, port, socket directory, listen address, "shmem-key shmem-id", status.
func postmasterPIDFile(data string) []string {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return nil
	}
	return strings.Split(string(b), "\n")
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// "pid (comm) S ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
	}
	return true
}

func cmdlineContains(pid int, s string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), s)
}

// lockFile takes a flock (syscall.LOCK_SH or LOCK_EX) on path, creating it if needed.
func lockFile(path string, how int) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// readFrom returns the file's content from offset on.
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// tail returns about the last logTailBytes of s, from a line start.
func tail(s string) string {
	if len(s) <= logTailBytes {
		return s
	}
	s = s[len(s)-logTailBytes:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "...\n" + s
}
