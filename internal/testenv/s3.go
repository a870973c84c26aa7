//go:build unix

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

const (
	versitygwPackage = "github.com/versity/versitygw/cmd/versitygw"
	versitygwModule  = "github.com/versity/versitygw"
	s3DirPrefix      = "sluice-testenv-s3-"
	s3Region         = "us-east-1"
	versitygwBuild   = 15 * time.Minute
	s3ReadyTimeout   = 30 * time.Second
	s3StopTimeout    = 10 * time.Second
)

var (
	versitygwOnce sync.Once
	versitygwPath string
	versitygwErr  error
)

// S3Server is a running versitygw server with one bucket made for the caller.
type S3Server struct {
	Endpoint  string // http://127.0.0.1:<port>; buckets are addressed path-style
	Region    string
	AccessKey string
	SecretKey string
	Bucket    string // a fresh, empty bucket

	root string // temp dir holding the posix backend's data ("data") and the server's log
	bin  string
	addr string // host:port it listens on, kept across Stop and Start
	proc *child
}

// S3 starts a real S3-compatible server for this test: versitygw
// (https://github.com/versity/versitygw) with its posix backend in a temporary directory, on a free
// loopback port, with a fresh empty bucket and random root credentials (DESIGN.md §12). The server
// is stopped and its data removed in t.Cleanup, and it dies with the test process (Linux
// parent-death signal). Each call gets its own server (starting one takes tens of milliseconds),
// so parallel tests never share one.
//
// The versitygw binary is, in this order:
//
//  1. $SLUICE_TEST_VERSITYGW, the path of a versitygw binary (`make test` builds bin/versitygw
//     first and sets it).
//  2. Cached under $XDG_CACHE_HOME/sluice-testenv (or ~/.cache/sluice-testenv) by an earlier run.
//  3. Built there, once per machine, with `go install
//     github.com/versity/versitygw/cmd/versitygw@<VersitygwVersion>` (a few minutes), under a file
//     lock so that test binaries running in parallel build it once.
//
// The binary must have been built from VersitygwVersion (read from its build information). When no
// server can be had the test fails (t.Fatal) with the reason and the build or server output; it
// never skips.
func S3(t testing.TB) *S3Server {
	t.Helper()
	start := time.Now()
	versitygwOnce.Do(func() { versitygwPath, versitygwErr = findOrBuildVersitygw() })
	if versitygwErr != nil {
		t.Fatal(versitygwErr)
	}
	built := time.Since(start)
	s, err := startS3(versitygwPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	if built > 5*time.Second {
		t.Logf("testenv: built versitygw %s in %s", VersitygwVersion, built.Round(time.Second))
	}
	return s
}

// NewBucket creates another fresh, empty bucket on the server and returns its name.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	b, err := s.createBucket()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// versitygw is the S3 server's binary, found or built as the S3 documentation says.
var versitygw = goTool{
	name: "versitygw", pkg: versitygwPackage, module: versitygwModule, version: VersitygwVersion,
	env: EnvVersitygw, timeout: versitygwBuild,
}

// findOrBuildVersitygw returns the path of a versitygw binary of VersitygwVersion, in the order of
// the S3 documentation.
func findOrBuildVersitygw() (string, error) { return versitygw.find() }

// checkVersitygw checks that path is a versitygw binary built from VersitygwVersion.
func checkVersitygw(path string) error { return versitygw.check(path) }

// startS3 starts versitygw on a free loopback port, retrying with another port if the one picked
// was taken before the server bound it.
func startS3(bin string) (*S3Server, error) {
	sweepStaleS3()
	root, err := os.MkdirTemp("", s3DirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	err = os.WriteFile(filepath.Join(root, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
	if err == nil {
		err = os.Mkdir(filepath.Join(root, "data"), 0o755)
	}
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("testenv: %w", err)
	}
	s := &S3Server{
		Region:    s3Region,
		AccessKey: "sluice" + randomHex(6),
		SecretKey: randomHex(20),
		root:      root,
	}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err == nil {
			err = s.start(bin, port)
		}
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == portAttempts {
			_ = os.RemoveAll(root)
			return nil, fmt.Errorf("testenv: start versitygw: %w", err)
		}
	}
}

// start runs versitygw on port, waits until it answers and creates the first bucket.
func (s *S3Server) start(bin string, port int) error {
	s.bin = bin
	s.addr = "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(s.root, "versitygw.log")
	p, err := s.launch(os.O_TRUNC)
	if err != nil {
		return err
	}
	s.proc = p
	s.Endpoint = "http://" + s.addr
	err = s.waitReady()
	if err == nil {
		s.Bucket, err = s.createBucket()
	}
	if err != nil {
		// When another server had the port, ours exits by itself: give it a moment to say so.
		_ = p.wait(time.Second)
		s.proc = nil
		log, _ := os.ReadFile(logPath)
		if errors.Is(err, errNotOurs) || strings.Contains(string(log), "address already in use") {
			return fmt.Errorf("%w: %d", errPortInUse, port)
		}
		return fmt.Errorf("%v\n--- versitygw log ---\n%s", err, tail(string(log)))
	}
	return nil
}

// launch starts the versitygw process on s.addr over s.root's data directory, its output going to
// versitygw.log (opened with logFlag: os.O_TRUNC or os.O_APPEND).
func (s *S3Server) launch(logFlag int) (*child, error) {
	logPath := filepath.Join(s.root, "versitygw.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return nil, err
	}
	bin, addr := s.bin, s.addr
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", filepath.Join(s.root, "data"))
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr(nil)
	env := []string{"ROOT_ACCESS_KEY=" + s.AccessKey, "ROOT_SECRET_KEY=" + s.SecretKey}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		// Its own settings come from the command line only.
		if strings.HasPrefix(k, "VGW_") || strings.HasPrefix(k, "ROOT_") || k == "WEBHOOK" || k == "LOGFILE" {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = env
	p, err := startChild(cmd)
	_ = logf.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return p, nil
}

// Stop kills the server (SIGKILL, as in a crash: requests in flight fail) and waits for it to exit,
// keeping its data, port and credentials for Start. Clients see connection refusals until then.
func (s *S3Server) Stop(t testing.TB) {
	t.Helper()
	if s.proc == nil {
		t.Fatal("testenv: S3Server.Stop: the server is not running")
	}
	_ = s.proc.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.proc.wait(s3StopTimeout)
	s.proc = nil
}

// Start starts a stopped server again on the same address, over the same data, with the same
// credentials and buckets, and waits until it answers. If another process took the port meanwhile,
// it retries for a while and then fails the test.
func (s *S3Server) Start(t testing.TB) {
	t.Helper()
	if s.proc != nil {
		t.Fatal("testenv: S3Server.Start: the server is running")
	}
	deadline := time.Now().Add(s3ReadyTimeout)
	for {
		p, err := s.launch(os.O_APPEND)
		if err != nil {
			t.Fatal(err)
		}
		s.proc = p
		err = s.waitReady()
		if err == nil {
			err = s.checkBucket()
		}
		if err == nil {
			return
		}
		_ = p.wait(time.Second)
		s.proc = nil
		log, _ := os.ReadFile(filepath.Join(s.root, "versitygw.log"))
		if !strings.Contains(string(log), "address already in use") || time.Now().After(deadline) {
			t.Fatalf("testenv: restart versitygw on %s: %v\n--- versitygw log ---\n%s", s.addr, err, tail(string(log)))
		}
		time.Sleep(100 * time.Millisecond) // the port's holder may let go of it
	}
}

// checkBucket checks that the server answers for s.Bucket with our credentials.
func (s *S3Server) checkBucket() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.client().HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(s.Bucket)}); err != nil {
		return fmt.Errorf("testenv: bucket %s on versitygw at %s: %w", s.Bucket, s.Endpoint, err)
	}
	return nil
}

// ObjectPath is the file in which the posix backend keeps object key of s.Bucket (for tests that
// damage stored objects behind the server's back).
func (s *S3Server) ObjectPath(key string) string {
	return filepath.Join(s.root, "data", s.Bucket, filepath.FromSlash(key))
}

func (s *S3Server) client() *awss3.Client {
	return awss3.New(awss3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

var errNotOurs = errors.New("another server answers on the port")

// waitReady polls until the server answers HTTP, it exits, or s3ReadyTimeout passes. Whether the
// answer came from our process is checked by createBucket.
func (s *S3Server) waitReady() error {
	deadline := time.Now().Add(s3ReadyTimeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-s.proc.done:
			return fmt.Errorf("versitygw exited: %v", s.proc.err)
		default:
		}
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			select {
			case <-s.proc.done: // someone else answered on the port we could not bind
				return fmt.Errorf("versitygw exited: %v", s.proc.err)
			default:
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer on %s within %s: %v", s.Endpoint, s3ReadyTimeout, err)
		}
		select {
		case <-s.proc.done:
			return fmt.Errorf("versitygw exited: %v", s.proc.err)
		case <-time.After(readyPollPeriod):
		}
	}
}

// createBucket makes a bucket with a random name and checks that it landed in our server's data
// directory (and so that our process, not another one, serves the port).
func (s *S3Server) createBucket() (string, error) {
	name := "sluice-test-" + randomHex(6)
	client := s.client()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("testenv: create bucket %s on versitygw at %s: %w", name, s.Endpoint, err)
	}
	if _, err := os.Stat(filepath.Join(s.root, "data", name)); err != nil {
		return "", fmt.Errorf("testenv: bucket %s was created at %s, but not in our versitygw's directory (%w): %w",
			name, s.Endpoint, err, errNotOurs)
	}
	return name, nil
}

// stop ends the server (SIGTERM, then SIGKILL) and removes its data.
func (s *S3Server) stop() {
	if s.proc != nil {
		_ = s.proc.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.proc.wait(s3StopTimeout)
		s.proc = nil
	}
	_ = os.RemoveAll(s.root)
}

// sweepStaleS3 removes the directories of servers whose test process is gone (their versitygw died
// with it, by the parent-death signal).
func sweepStaleS3() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), s3DirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || owner == os.Getpid() || processAlive(owner) {
			continue
		}
		_ = os.RemoveAll(d)
	}
}
