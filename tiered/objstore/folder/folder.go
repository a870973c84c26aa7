// Package folder is an objstore.Store in a local directory, for `sluice dev` and tests.
//
// Layout: the object under key k is the regular file <dir>/objects/k, so the tree can be read with
// ls. Put writes a temporary file in <dir>/tmp, fsyncs it, renames it into place and fsyncs the
// directory, so a crash leaves the old object or the whole new one, and a returned Put survives a
// crash. Temporary files are never listed; New removes those left by a crash once they are an hour
// old (so several processes may share a folder).
//
// Like a file system, and unlike S3, a folder cannot hold both an object "a" and an object "a/b":
// such a Put fails. A key segment must also fit in a file name (255 bytes on most file systems).
package folder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sluicemq/sluice/tiered/objstore"
)

const (
	objectsDir = "objects"
	tmpDir     = "tmp"
	// staleTemp is how old a temporary file must be before New removes it.
	staleTemp = time.Hour
	// renameAttempts bounds Put's retries when a concurrent Delete removes the directory that Put
	// just made (Delete removes emptied directories).
	renameAttempts = 10
)

// Store is a folder-backed objstore.Store. It is safe for concurrent use, also by several
// processes sharing the folder.
type Store struct {
	objects string
	tmp     string
}

var _ objstore.Store = (*Store)(nil)

// New opens (creating if needed) the object store in dir.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("folder object store: directory is empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("folder object store %s: %w", dir, err)
	}
	s := &Store{objects: filepath.Join(abs, objectsDir), tmp: filepath.Join(abs, tmpDir)}
	for _, d := range []string{s.objects, s.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("folder object store: %w", err)
		}
	}
	s.removeStaleTemps()
	return s, nil
}

// String describes the store for logs.
func (s *Store) String() string { return "folder:" + filepath.Dir(s.objects) }

func (s *Store) removeStaleTemps() {
	entries, err := os.ReadDir(s.tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(s.tmp, e.Name()))
		}
	}
}

func (s *Store) path(key string) string {
	return filepath.Join(s.objects, filepath.FromSlash(key))
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, body io.Reader, size int64) (err error) {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("put %q: negative size %d", key, size)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	f, err := os.CreateTemp(s.tmp, "put-*")
	if err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	tmpName := f.Name()
	defer func() {
		if f != nil {
			_ = f.Close()
		}
		if err != nil {
			_ = os.Remove(tmpName)
		}
	}()
	if err := objstore.CopyBody(ctx, f, body, size); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	if err := f.Close(); err != nil {
		f = nil
		return fmt.Errorf("put %q: %w", key, err)
	}
	f = nil
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %q: %w", key, err)
	}
	dst := s.path(key)
	for attempt := 1; ; attempt++ {
		err := s.mkdirs(filepath.Dir(dst))
		if err == nil {
			err = os.Rename(tmpName, dst)
		}
		if err == nil {
			break
		}
		// ENOENT: a concurrent Delete removed a directory we made (it was still empty); again.
		if !errors.Is(err, fs.ErrNotExist) || attempt == renameAttempts {
			return fmt.Errorf("put %q: %w", key, conflict(key, err))
		}
	}
	// ENOENT: a concurrent Delete of this key removed the object and its directory already.
	if err := syncDir(filepath.Dir(dst)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("put %q: sync directory: %w", key, err)
	}
	return nil
}

// conflict explains the errors a file-system layout gives when an object and a prefix collide.
func conflict(key string, err error) error {
	if errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("an object is stored at a parent of this key, and a folder cannot hold both: %w", err)
	}
	if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY) {
		return fmt.Errorf("objects are stored under %q/, and a folder cannot hold both: %w", key, err)
	}
	return err
}

// mkdirs makes dir and its missing parents under s.objects, fsyncing the parent of each directory
// it makes so that the new path survives a crash.
func (s *Store) mkdirs(dir string) error {
	if dir == s.objects {
		return nil
	}
	fi, err := os.Stat(dir)
	if err == nil {
		if !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(dir)
	if err := s.mkdirs(parent); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	f, err := os.Open(s.path(key))
	if err != nil {
		return nil, notFound("get", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("get %q: %w", key, objstore.ErrNotFound)
	}
	length, err := objstore.CheckRange(key, off, n, fi.Size())
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return &reader{ctx: ctx, r: io.NewSectionReader(f, off, length), f: f}, nil
}

// reader reads a section of an open file (a rename over the path does not change what it reads)
// until ctx is done.
type reader struct {
	ctx context.Context
	r   io.Reader
	f   *os.File
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (r *reader) Close() error { return r.f.Close() }

// notFound maps the errors of opening a missing path (or one below a file) to ErrNotFound.
func notFound(op, key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%s %q: %w", op, key, objstore.ErrNotFound)
	}
	return fmt.Errorf("%s %q: %w", op, key, err)
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, key string) (objstore.Info, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return objstore.Info{}, fmt.Errorf("head %q: %w", key, err)
	}
	fi, err := os.Stat(s.path(key))
	if err != nil {
		return objstore.Info{}, notFound("head", key, err)
	}
	if !fi.Mode().IsRegular() {
		return objstore.Info{}, fmt.Errorf("head %q: %w", key, objstore.ErrNotFound)
	}
	return objstore.Info{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// Delete implements objstore.Store. It also removes the directories the deletion empties.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	p := s.path(key)
	fi, err := os.Lstat(p)
	if err != nil {
		if err := notFound("delete", key, err); !errors.Is(err, objstore.ErrNotFound) {
			return err
		}
		return nil
	}
	if fi.IsDir() {
		return nil // a prefix of other keys, not an object
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %q: %w", key, err)
	}
	dir := filepath.Dir(p)
	if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %q: sync directory: %w", key, err)
	}
	// Remove emptied directories; rmdir fails, and so stops this, at the first one in use.
	for ; dir != s.objects; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// List implements objstore.Store. It reads one directory at a time, in key order.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return objstore.ErrorSeq(err)
	}
	// The complete segments of the prefix name the one directory that can hold matches; the rest
	// filters that directory's entries.
	dirKey, rest := "", prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirKey, rest = prefix[:i+1], prefix[i+1:]
	}
	return func(yield func(objstore.Info, error) bool) {
		if err := s.walk(ctx, dirKey, rest, yield); err != nil && !errors.Is(err, errStop) {
			yield(objstore.Info{}, fmt.Errorf("list %q: %w", prefix, err))
		}
	}
}

var errStop = errors.New("stopped by the caller")

// walk yields, in key order, the objects below the directory of dirKey ("" or ending in '/') whose
// names in that directory start with filter.
func (s *Store) walk(ctx context.Context, dirKey, filter string, yield func(objstore.Info, error) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	entries, err := os.ReadDir(filepath.Join(s.objects, filepath.FromSlash(dirKey)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil // no such prefix, or removed by a concurrent Delete
		}
		return err
	}
	type item struct {
		key string // the object's key, or the directory's key prefix ending in '/'
		dir bool
	}
	items := make([]item, 0, len(entries))
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), filter) {
			continue
		}
		switch {
		case e.IsDir():
			items = append(items, item{key: dirKey + e.Name() + "/", dir: true})
		case e.Type().IsRegular():
			items = append(items, item{key: dirKey + e.Name()})
		}
	}
	// "a-b" < "a/x" < "a0": a directory sorts as its name followed by '/'.
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.key, b.key) })
	for _, it := range items {
		if it.dir {
			if err := s.walk(ctx, it.key, "", yield); err != nil {
				return err
			}
			continue
		}
		fi, err := os.Lstat(filepath.Join(s.objects, filepath.FromSlash(it.key)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since ReadDir
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !yield(objstore.Info{Key: it.key, Size: fi.Size(), ModTime: fi.ModTime()}, nil) {
			return errStop
		}
	}
	return nil
}
