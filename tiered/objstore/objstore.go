package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"
	"time"
	"unicode/utf8"
)

// Store is an object store. Implementations are safe for concurrent use. See the package
// documentation for the consistency model and the key rules shared by every method.
type Store interface {
	// Put stores the size bytes that body yields under key, replacing any object there. body must
	// yield exactly size bytes (from its current position, if it is an io.Seeker); otherwise Put
	// fails with ErrSizeMismatch and stores nothing.
	//
	// Put is atomic: until it returns nil, readers see the previous object (or none); afterwards
	// they see all of the new one, never a prefix or a mix. A failed or cancelled Put leaves the
	// previous object in place. Putting the same bytes again is harmless, so a Put whose outcome is
	// unknown may be retried. Put does not close body.
	Put(ctx context.Context, key string, body io.Reader, size int64) error

	// Get returns a reader of n bytes of the object at key starting at byte off; n < 0 reads to the
	// end of the object. It fails with ErrNotFound when there is no object, and with ErrOutOfRange
	// when off < 0, off > size, or n >= 0 and off+n > size (off == size reads nothing). All bytes
	// come from one version of the object, even if it is replaced or deleted while they are read.
	// The caller must close the reader; reads fail once ctx is done.
	Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)

	// Head returns the object's size and modification time, or ErrNotFound.
	Head(ctx context.Context, key string) (Info, error)

	// Delete removes the object at key. Deleting a missing object is not an error, so Delete is
	// idempotent and may be retried.
	Delete(ctx context.Context, key string) error

	// List yields the objects whose keys start with prefix ("" lists everything) in lexicographic
	// (byte-wise) key order, each exactly once, fetching them page by page as the loop advances. An
	// object put before List was called and not deleted since is always yielded; objects changed
	// while the listing runs may or may not be. An error (an invalid prefix, a failed page, a done
	// ctx) is yielded once, with a zero Info, as the last element.
	List(ctx context.Context, prefix string) iter.Seq2[Info, error]
}

// Info describes a stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time // when the object was last put, as the backend records it (S3: whole seconds)
}

var (
	// ErrNotFound: there is no object at the key.
	ErrNotFound = errors.New("object not found")
	// ErrInvalidKey: the key (or List prefix) breaks the key rules; the error says which.
	ErrInvalidKey = errors.New("invalid object key")
	// ErrOutOfRange: a Get asked for bytes beyond the end of the object.
	ErrOutOfRange = errors.New("range beyond end of object")
	// ErrChecksum: the bytes a Get read do not match the checksum the store
	// keeps for the object (the object is damaged; a reader of it fails
	// with this error rather than return them all).
	ErrChecksum = errors.New("object fails its stored checksum")
	// ErrSizeMismatch: the body given to Put did not yield exactly the size given.
	ErrSizeMismatch = errors.New("body length differs from size")
)

// MaxKeyLen is the longest key in bytes (S3's limit).
const MaxKeyLen = 1024

// ValidateKey reports whether key obeys the key rules of the package documentation, with an error
// wrapping ErrInvalidKey that names the problem.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid(key, "empty")
	case strings.HasPrefix(key, "/"):
		return invalid(key, "starts with '/'")
	case strings.HasSuffix(key, "/"):
		return invalid(key, "ends with '/'")
	}
	return checkCommon(key, strings.Count(key, "/")+1)
}

// ValidatePrefix checks a List prefix: "" is allowed, and so is a trailing '/'; otherwise the key
// rules apply to every complete segment (those followed by '/'). The last, partial segment may be
// anything without NUL, since it only filters names ("a/.." matches "a/..x").
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") {
		return invalid(prefix, "starts with '/'")
	}
	return checkCommon(prefix, strings.Count(prefix, "/"))
}

// checkCommon checks length, encoding, NUL and the first complete segments of s.
func checkCommon(s string, complete int) error {
	if len(s) > MaxKeyLen {
		return invalid(s, fmt.Sprintf("%d bytes long, more than %d", len(s), MaxKeyLen))
	}
	if !utf8.ValidString(s) {
		return invalid(s, "not valid UTF-8")
	}
	if strings.IndexByte(s, 0) >= 0 {
		return invalid(s, "contains a NUL byte")
	}
	i := 0
	for seg := range strings.SplitSeq(s, "/") {
		if i == complete {
			break
		}
		i++
		switch seg {
		case "":
			return invalid(s, "has an empty segment (\"//\")")
		case ".", "..":
			return invalid(s, fmt.Sprintf("has a %q segment", seg))
		}
	}
	return nil
}

func invalid(key, problem string) error {
	if len(key) > 80 {
		key = key[:80] + "..."
	}
	return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, problem)
}

// CheckRange checks a Get of n bytes at off (n < 0: to the end) against an object of size bytes and
// returns how many bytes the Get yields, or an error wrapping ErrOutOfRange. Backends share it so
// that they agree on every edge.
func CheckRange(key string, off, n, size int64) (int64, error) {
	switch {
	case off < 0:
		return 0, fmt.Errorf("get %q at offset %d: %w", key, off, ErrOutOfRange)
	case off > size:
		return 0, fmt.Errorf("get %q at offset %d of a %d-byte object: %w", key, off, size, ErrOutOfRange)
	case n < 0:
		return size - off, nil
	case n > size-off:
		return 0, fmt.Errorf("get %q bytes [%d, %d) of a %d-byte object: %w", key, off, off+n, size, ErrOutOfRange)
	}
	return n, nil
}

// ErrorSeq returns a sequence that yields only err: how List reports an error found before the
// first page.
func ErrorSeq(err error) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) { yield(Info{}, err) }
}

// CopyBody copies a Put body of size bytes from r to w, failing with ErrSizeMismatch if r yields
// fewer or more (it reads past size only to find a longer body), and with ctx's error once ctx is
// done (checked between reads). Backends share it.
func CopyBody(ctx context.Context, w io.Writer, r io.Reader, size int64) error {
	buf := make([]byte, min(size+1, 1<<20))
	var done int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.Read(buf)
		if n > 0 {
			if done+int64(n) > size {
				return fmt.Errorf("%w: body has more than %d bytes", ErrSizeMismatch, size)
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			done += int64(n)
		}
		if errors.Is(err, io.EOF) {
			if done != size {
				return fmt.Errorf("%w: body has %d bytes, want %d", ErrSizeMismatch, done, size)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read body: %w", err)
		}
	}
}
