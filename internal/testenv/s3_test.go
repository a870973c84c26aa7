//go:build unix

package testenv

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
)

func s3Client(s *S3Server) *awss3.Client {
	return awss3.New(awss3.Options{
		Region:       s.Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

func TestS3ServesAFreshBucketPerCall(t *testing.T) {
	t.Parallel()
	a, b := S3(t), S3(t)
	if a.Endpoint == b.Endpoint || a.Bucket == b.Bucket || a.SecretKey == b.SecretKey {
		t.Fatalf("two calls share a server, bucket or key: %+v %+v", a, b)
	}
	if !strings.HasPrefix(a.Endpoint, "http://127.0.0.1:") {
		t.Fatalf("endpoint %q is not on loopback", a.Endpoint)
	}
	ctx := t.Context()
	c := s3Client(a)
	other := a.NewBucket(t)
	for _, bucket := range []string{a.Bucket, other} {
		out, err := c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		if len(out.Contents) != 0 {
			t.Fatalf("bucket %s is not empty: %d objects", bucket, len(out.Contents))
		}
	}
	if _, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(a.Bucket), Key: aws.String("k"),
		Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	// The other server knows neither the bucket nor a's credentials.
	if _, err := s3Client(b).HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(a.Bucket)}); err == nil {
		t.Fatal("server b has server a's bucket")
	}
	wrong := *a
	wrong.SecretKey = "wrong"
	if _, err := s3Client(&wrong).HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(a.Bucket)}); err == nil {
		t.Fatal("a wrong secret key was accepted")
	}
}

func TestS3CleanupStopsTheServerAndRemovesItsData(t *testing.T) {
	t.Parallel()
	var srv *S3Server
	var pid int
	t.Run("use", func(t *testing.T) {
		srv = S3(t)
		pid = srv.proc.cmd.Process.Pid
		if !processAlive(pid) {
			t.Fatal("versitygw is not running")
		}
	})
	if srv.proc != nil || processAlive(pid) {
		t.Fatalf("versitygw %d still runs after cleanup", pid)
	}
	if _, err := os.Stat(srv.root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s still exists after cleanup: %v", srv.root, err)
	}
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(srv.Endpoint, "http://"), time.Second)
	if err == nil {
		_ = conn.Close()
		t.Fatalf("something still answers on %s", srv.Endpoint)
	}
}

// newStoppedS3 is an S3Server that has not started, for calling start directly.
func newStoppedS3(t *testing.T) *S3Server {
	t.Helper()
	S3(t) // makes sure versitygw is built
	root := t.TempDir()
	if err := os.Mkdir(root+"/data", 0o755); err != nil {
		t.Fatal(err)
	}
	s := &S3Server{Region: s3Region, AccessKey: "k" + randomHex(4), SecretKey: randomHex(8), root: root}
	t.Cleanup(s.stop)
	return s
}

func TestS3StartReportsATakenPortSoAnotherIsTried(t *testing.T) {
	t.Parallel()
	t.Run("bound but silent", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		s := newStoppedS3(t)
		err = s.start(versitygwPath, l.Addr().(*net.TCPAddr).Port)
		if !errors.Is(err, errPortInUse) {
			t.Fatalf("start on a taken port: %v, want errPortInUse", err)
		}
	})
	t.Run("another HTTP server answers", func(t *testing.T) {
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		defer other.Close()
		port, _ := strconv.Atoi(other.URL[strings.LastIndexByte(other.URL, ':')+1:])
		s := newStoppedS3(t)
		err := s.start(versitygwPath, port)
		if !errors.Is(err, errPortInUse) {
			t.Fatalf("start on a port another server answers: %v, want errPortInUse", err)
		}
	})
}

func TestS3RefusesAVersitygwOfAnotherVersion(t *testing.T) {
	// Not parallel: it sets the environment.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkVersitygw(self); err == nil || !strings.Contains(err.Error(), versitygwModule) {
		t.Fatalf("checkVersitygw(test binary) = %v, want an error naming %s", err, versitygwModule)
	}
	t.Setenv(EnvVersitygw, self)
	if _, err := findOrBuildVersitygw(); err == nil || !strings.Contains(err.Error(), EnvVersitygw) {
		t.Fatalf("findOrBuildVersitygw with %s=<test binary> = %v, want an error naming the variable", EnvVersitygw, err)
	}
	t.Setenv(EnvVersitygw, "/nonexistent/versitygw")
	if _, err := findOrBuildVersitygw(); err == nil {
		t.Fatal("a missing binary was accepted")
	}
}

func TestS3ServerIsReadyQuickly(t *testing.T) {
	t.Parallel()
	S3(t) // build first
	start := time.Now()
	S3(t)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("starting versitygw took %s", d)
	} else {
		t.Logf("versitygw started, with a bucket, in %s", d.Round(time.Millisecond))
	}
}

func TestS3StopAndStartKeepAddressDataAndCredentials(t *testing.T) {
	t.Parallel()
	s := S3(t)
	ctx := t.Context()
	c := s3Client(s)
	if _, err := c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b.log"),
		Body: strings.NewReader("kept")}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(s.ObjectPath("a/b.log")); err != nil || string(b) != "kept" {
		t.Fatalf("ObjectPath: %q, %v", b, err)
	}
	endpoint := s.Endpoint

	s.Stop(t)
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "http://"), time.Second); err == nil {
		_ = conn.Close()
		t.Fatalf("something still answers on %s after Stop", endpoint)
	}
	s.Start(t)
	if s.Endpoint != endpoint {
		t.Fatalf("endpoint moved from %s to %s", endpoint, s.Endpoint)
	}
	out, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b.log")})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	defer out.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, out.Body); err != nil || sb.String() != "kept" {
		t.Fatalf("object after restart: %q, %v", sb.String(), err)
	}
}
