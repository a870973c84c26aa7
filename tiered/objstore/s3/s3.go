// Package s3 is an objstore.Store on an S3-compatible service (Amazon S3, versitygw, MinIO,
// SeaweedFS, Cloudflare R2) through aws-sdk-go-v2.
//
// Each operation is one S3 request (List: one per page of up to 1000 keys), retried by the SDK's
// standard retryer up to Config.MaxAttempts times with jittered exponential backoff on throttling,
// 5xx answers and connection errors. Puts are single PutObject requests (S3 takes up to 5 GiB that
// way), which are atomic; the SDK sends a CRC32 checksum that the service verifies. S3 errors are
// translated here, once: NoSuchKey (and HeadObject's bare 404) to objstore.ErrNotFound,
// InvalidRange to objstore.ErrOutOfRange.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/tiered/objstore"
)

// Config says which bucket to use and how to reach it. Credentials come from the AWS default chain
// (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE and the shared config
// files, web identity, container and EC2 instance roles) unless AccessKeyID is set.
type Config struct {
	// Bucket must exist; New checks that it answers.
	Bucket string
	// Region is the bucket's region (also the signing region of other services; us-east-1 suits
	// most of them).
	Region string
	// Endpoint overrides the AWS endpoint, e.g. http://127.0.0.1:7070 for a local gateway.
	Endpoint string
	// PathStyle addresses buckets as <endpoint>/<bucket> instead of <bucket>.<endpoint>; most
	// services other than AWS need it.
	PathStyle bool
	// AccessKeyID, SecretAccessKey and SessionToken are static credentials that replace the
	// default chain when AccessKeyID is set. For tests and embedding; prefer the chain otherwise.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// MaxAttempts bounds the attempts per request, the first included (SDK standard retryer).
	MaxAttempts int
	// MaxBackoff bounds the wait between two attempts.
	MaxBackoff time.Duration
}

// DefaultConfig returns the defaults RegisterFlags uses.
func DefaultConfig() Config {
	return Config{Region: "us-east-1", MaxAttempts: 5, MaxBackoff: 5 * time.Second}
}

// RegisterFlags binds c to --tier-s3-* flags with c's values as defaults. Credentials are not flags
// (they would show in the process list): use the AWS environment variables or files.
func (c *Config) RegisterFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Bucket, "tier-s3-bucket", c.Bucket, "S3 bucket for tiered storage (must exist); setting it turns tiered storage on")
	fs.StringVar(&c.Region, "tier-s3-region", c.Region, "region of --tier-s3-bucket")
	fs.StringVar(&c.Endpoint, "tier-s3-endpoint", c.Endpoint, "S3 endpoint URL for S3-compatible services, e.g. http://127.0.0.1:7070 (default: AWS)")
	fs.BoolVar(&c.PathStyle, "tier-s3-path-style", c.PathStyle, "address the bucket as <endpoint>/<bucket> (most S3-compatible services need it)")
	fs.IntVar(&c.MaxAttempts, "tier-s3-max-attempts", c.MaxAttempts, "attempts per S3 request, the first included, before an error is returned")
	fs.DurationVar(&c.MaxBackoff, "tier-s3-max-backoff", c.MaxBackoff, "longest wait between two attempts of an S3 request")
}

// Validate checks the config and names the first bad field.
func (c *Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("--tier-s3-bucket is required")
	}
	if c.Region == "" {
		return errors.New("--tier-s3-region is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--tier-s3-endpoint must be an http:// or https:// URL; got %q", c.Endpoint)
		}
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > 20 {
		return fmt.Errorf("--tier-s3-max-attempts must be between 1 and 20; got %d", c.MaxAttempts)
	}
	if c.MaxBackoff <= 0 {
		return fmt.Errorf("--tier-s3-max-backoff must be positive; got %s", c.MaxBackoff)
	}
	if c.AccessKeyID != "" && c.SecretAccessKey == "" {
		return errors.New("a static access key id needs its secret access key")
	}
	return nil
}

// Store is an S3-backed objstore.Store. It is safe for concurrent use.
type Store struct {
	client   *awss3.Client
	bucket   string
	endpoint string // for error messages
}

var _ objstore.Store = (*Store)(nil)

// memSpoolMax is the largest body Put copies to memory when it cannot seek; larger ones go to a
// temporary file. (The SDK must read a body more than once to checksum and sign it over plain
// HTTP.)
const memSpoolMax = 8 << 20

// maxPutSize is the largest object one PutObject may store.
const maxPutSize = 5 << 30

// New connects to the bucket and checks that it answers (HeadBucket). It fails with an error that
// says what to fix when there are no credentials, the credentials are refused, the bucket does not
// exist, or the endpoint cannot be reached (after the configured retries).
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3 object store: %w", err)
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxAttempts
				o.MaxBackoff = cfg.MaxBackoff
			})
		}),
	}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 object store: load AWS configuration: %w", err)
	}
	where := "AWS"
	if cfg.Endpoint != "" {
		where = cfg.Endpoint
	}
	if _, err := awsCfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("s3 object store: no AWS credentials for bucket %q: set AWS_ACCESS_KEY_ID and "+
			"AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or run with an instance or container role): %w", cfg.Bucket, err)
	}
	client := awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Ranged GETs carry no whole-object checksum; do not log that at every read.
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	s := &Store{client: client, bucket: cfg.Bucket, endpoint: where}
	if _, err := client.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
		return nil, s.bucketError(ctx, err)
	}
	return s, nil
}

// bucketError explains why HeadBucket failed. HEAD answers have no body, so an HTTP error is
// asked again with a one-key ListObjectsV2, whose answer names the S3 error code (versitygw, for
// one, answers an unknown access key with 404, which HEAD alone would report as a missing bucket).
func (s *Store) bucketError(ctx context.Context, err error) error {
	prefix := fmt.Sprintf("s3 object store: bucket %q at %s", s.bucket, s.endpoint)
	var rse *smithyhttp.RequestSendError
	var re *smithyhttp.ResponseError
	switch {
	case contextError(err) != nil:
		return fmt.Errorf("%s: %w", prefix, err)
	case errors.As(err, &rse):
		return fmt.Errorf("%s: cannot reach the endpoint: %w", prefix, err)
	case !errors.As(err, &re):
		return fmt.Errorf("%s: %w", prefix, err)
	}
	code := ""
	_, lerr := s.client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(1)})
	var ae smithy.APIError
	if errors.As(lerr, &ae) {
		code = ae.ErrorCode()
		err = lerr
	}
	switch {
	case code == "NoSuchBucket" || (code == "" && re.HTTPStatusCode() == http.StatusNotFound):
		return fmt.Errorf("%s does not exist: create it first: %w", prefix, err)
	case code == "InvalidAccessKeyId" || code == "XAdminUserNotFound" || code == "SignatureDoesNotMatch" ||
		code == "InvalidToken" || code == "ExpiredToken" || code == "AccessDenied" ||
		(code == "" && re.HTTPStatusCode() == http.StatusForbidden):
		return fmt.Errorf("%s: access denied: check the credentials and that they may use the bucket: %w", prefix, err)
	case code == "PermanentRedirect" || code == "AuthorizationHeaderMalformed" ||
		(code == "" && re.HTTPStatusCode() == http.StatusMovedPermanently):
		return fmt.Errorf("%s: refused: check the region (--tier-s3-region) and the endpoint: %w", prefix, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// contextError returns the context error inside err, if any.
func contextError(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	}
	return nil
}

// translate maps an SDK error of op on key to the objstore sentinels, once.
func (s *Store) translate(op, key string, err error) error {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nsb *types.NoSuchBucket
	var ae smithy.APIError
	switch {
	case errors.As(err, &nsk), errors.As(err, &nf):
		return fmt.Errorf("%s %q: %w", op, key, objstore.ErrNotFound)
	case errors.As(err, &nsb):
		return fmt.Errorf("%s %q: bucket %q does not exist at %s: %w", op, key, s.bucket, s.endpoint, err)
	case errors.As(err, &ae) && ae.ErrorCode() == "NoSuchKey":
		return fmt.Errorf("%s %q: %w", op, key, objstore.ErrNotFound)
	case errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange":
		return fmt.Errorf("%s %q: %w: %w", op, key, objstore.ErrOutOfRange, err)
	}
	return fmt.Errorf("%s %q: %w", op, key, err)
}

// Put implements objstore.Store with one PutObject request.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, size int64) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %q: negative size %d", key, size)
	}
	if size > maxPutSize {
		return fmt.Errorf("put %q: %d bytes is more than S3 takes in one PutObject (5 GiB)", key, size)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	rs, cleanup, err := seekable(ctx, body, size)
	if err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	defer cleanup()
	_, err = s.client.PutObject(ctx, &awss3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          rs,
		ContentLength: aws.Int64(size),
	})
	if err != nil {
		return s.translate("put", key, err)
	}
	return nil
}

// seekable returns body as a seeker positioned where body was, checking that exactly size bytes
// remain: the body itself when it can seek, otherwise a copy in memory or in a temporary file.
// The SDK reads a body more than once (checksum, signature, retries), which needs seeking.
func seekable(ctx context.Context, body io.Reader, size int64) (io.ReadSeeker, func(), error) {
	nop := func() {}
	if rs, ok := body.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil {
			end, err := rs.Seek(0, io.SeekEnd)
			if err != nil {
				return nil, nop, err
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return nil, nop, err
			}
			if end-start != size {
				return nil, nop, fmt.Errorf("%w: body has %d bytes, want %d", objstore.ErrSizeMismatch, end-start, size)
			}
			return rs, nop, nil
		}
		// Not really seekable (a pipe behind an *os.File): copy it.
	}
	if size <= memSpoolMax {
		var buf bytes.Buffer
		buf.Grow(int(size))
		if err := objstore.CopyBody(ctx, &buf, body, size); err != nil {
			return nil, nop, err
		}
		return bytes.NewReader(buf.Bytes()), nop, nil
	}
	f, err := os.CreateTemp("", "sluice-s3-put-*")
	if err != nil {
		return nil, nop, err
	}
	cleanup := func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	if err := objstore.CopyBody(ctx, f, body, size); err != nil {
		cleanup()
		return nil, nop, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		cleanup()
		return nil, nop, err
	}
	return f, cleanup, nil
}

// Get implements objstore.Store with one ranged GetObject request (plus a HeadObject for reads
// that end exactly at the end of the object, which S3 cannot express as a range).
func (s *Store) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if off < 0 || (n > 0 && n > math.MaxInt64-off) {
		return nil, fmt.Errorf("get %q bytes at offset %d (n=%d): %w", key, off, n, objstore.ErrOutOfRange)
	}
	if n == 0 {
		// An empty read: S3 has no empty range, so check existence and bounds with Head.
		info, err := s.headObject(ctx, "get", key)
		if err != nil {
			return nil, err
		}
		if _, err := objstore.CheckRange(key, off, n, info.Size); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	in := &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	ranged := off > 0 || n > 0
	if ranged {
		r := fmt.Sprintf("bytes=%d-", off)
		if n > 0 {
			r += strconv.FormatInt(off+n-1, 10)
		}
		in.Range = aws.String(r)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		err = s.translate("get", key, err)
		if errors.Is(err, objstore.ErrOutOfRange) && n < 0 {
			// "bytes=<size>-" is unsatisfiable for S3, but reading nothing at the end is allowed.
			info, herr := s.headObject(ctx, "get", key)
			if herr != nil {
				return nil, herr
			}
			if _, rerr := objstore.CheckRange(key, off, n, info.Size); rerr != nil {
				return nil, rerr
			}
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		if errors.Is(err, objstore.ErrOutOfRange) {
			// Name the object's size in the error.
			if info, herr := s.headObject(ctx, "get", key); herr == nil {
				if _, rerr := objstore.CheckRange(key, off, n, info.Size); rerr != nil {
					return nil, rerr
				}
			}
		}
		return nil, err
	}
	want := aws.ToInt64(out.ContentLength)
	if ranged {
		// S3 shortens a range that ends past the object ("bytes=8-20" of 10 bytes gives 2): check
		// the total in Content-Range ("bytes 8-9/10") and refuse instead.
		first, total, perr := parseContentRange(aws.ToString(out.ContentRange))
		if perr != nil {
			_ = out.Body.Close()
			return nil, fmt.Errorf("get %q: %w", key, perr)
		}
		length, rerr := objstore.CheckRange(key, off, n, total)
		if rerr != nil {
			_ = out.Body.Close()
			return nil, rerr
		}
		if first != off || want != length {
			_ = out.Body.Close()
			return nil, fmt.Errorf("get %q: asked for %d bytes at %d, the service sent %d at %d", key, length, off, want, first)
		}
	}
	return &reader{ctx: ctx, body: out.Body, left: want}, nil
}

// parseContentRange reads "bytes <first>-<last>/<total>".
func parseContentRange(cr string) (first, total int64, err error) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, 0, fmt.Errorf("the service ignored the Range header (Content-Range %q)", cr)
	}
	rng, tot, ok := strings.Cut(rest, "/")
	f, _, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("malformed Content-Range %q", cr)
	}
	if first, err = strconv.ParseInt(f, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("malformed Content-Range %q", cr)
	}
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("content-Range %q has no total size", cr)
	}
	return first, total, nil
}

// reader is a GetObject body that fails with ctx's error once ctx is done and with
// io.ErrUnexpectedEOF if the body ends early.
type reader struct {
	ctx  context.Context
	body io.ReadCloser
	left int64
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.body.Read(p)
	r.left -= int64(n)
	if err != nil {
		if ctxErr := r.ctx.Err(); ctxErr != nil {
			return n, ctxErr
		}
		if errors.Is(err, io.EOF) && r.left > 0 {
			return n, io.ErrUnexpectedEOF
		}
		if !errors.Is(err, io.EOF) && strings.HasPrefix(err.Error(), "checksum did not match") {
			// The SDK checks the object's stored checksum when a GET
			// returns the whole object; its error type is unexported.
			return n, fmt.Errorf("%w: %w", objstore.ErrChecksum, err)
		}
	}
	return n, err
}

func (r *reader) Close() error { return r.body.Close() }

// Head implements objstore.Store with one HeadObject request.
func (s *Store) Head(ctx context.Context, key string) (objstore.Info, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.Info{}, err
	}
	return s.headObject(ctx, "head", key)
}

func (s *Store) headObject(ctx context.Context, op, key string) (objstore.Info, error) {
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		var re *smithyhttp.ResponseError
		if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
			// HEAD answers carry no body, so a 404 has no error code: it is a missing key (a
			// missing bucket was ruled out by New).
			return objstore.Info{}, fmt.Errorf("%s %q: %w", op, key, objstore.ErrNotFound)
		}
		return objstore.Info{}, s.translate(op, key, err)
	}
	return objstore.Info{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// Delete implements objstore.Store with one DeleteObject request (S3 answers 204 for a missing
// key too).
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		err = s.translate("delete", key, err)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// List implements objstore.Store with ListObjectsV2, one request per page of up to 1000 keys. It
// checks that the service returns keys in increasing order.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return objstore.ErrorSeq(err)
	}
	return func(yield func(objstore.Info, error) bool) {
		in := &awss3.ListObjectsV2Input{Bucket: aws.String(s.bucket)}
		if prefix != "" {
			in.Prefix = aws.String(prefix)
		}
		pages := awss3.NewListObjectsV2Paginator(s.client, in)
		last := ""
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				yield(objstore.Info{}, s.translate("list", prefix, err))
				return
			}
			for _, o := range page.Contents {
				key := aws.ToString(o.Key)
				if key <= last && last != "" {
					yield(objstore.Info{}, fmt.Errorf("list %q: the service returned %q after %q, out of order", prefix, key, last))
					return
				}
				last = key
				if err := ctx.Err(); err != nil {
					yield(objstore.Info{}, fmt.Errorf("list %q: %w", prefix, err))
					return
				}
				if !yield(objstore.Info{Key: key, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)}, nil) {
					return
				}
			}
		}
	}
}
