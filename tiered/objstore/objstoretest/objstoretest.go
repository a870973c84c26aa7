// Package objstoretest is the acceptance suite that every objstore.Store backend passes: one
// definition of the contract in objstore's documentation, run against the folder backend and
// against S3 on a real versitygw server.
//
//	func TestObjstoreFolder(t *testing.T) {
//		objstoretest.Run(t, func(t *testing.T) objstore.Store { ... a new, empty store ... })
//	}
package objstoretest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/tiered/objstore"
)

// Run runs the acceptance suite as parallel subtests. newStore must return a new, empty store for
// each call (a fresh directory or bucket) and release it in t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"PutGetHead", testPutGetHead},
		{"RangedGet", testRangedGet},
		{"RangedGetEmptyObject", testRangedGetEmptyObject},
		{"NotFound", testNotFound},
		{"OverwriteAndIdempotentPut", testOverwrite},
		{"PutSizeMismatch", testPutSizeMismatch},
		{"PutFromReaderPosition", testPutFromReaderPosition},
		{"Delete", testDelete},
		{"ListOrderAndPrefix", testListOrderAndPrefix},
		{"ListPagination", testListPagination},
		{"OverwriteAtomicity", testOverwriteAtomicity},
		{"KeyValidation", testKeyValidation},
		{"ContextCancellation", testContextCancellation},
		{"CancelledPutLeavesOldObject", testCancelledPut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func put(t *testing.T, s objstore.Store, key string, data []byte) {
	t.Helper()
	require.NoError(t, s.Put(ctxT(t), key, bytes.NewReader(data), int64(len(data))), "put %q", key)
}

// get reads a whole Get and checks that it closes cleanly.
func get(t *testing.T, s objstore.Store, key string, off, n int64) ([]byte, error) {
	t.Helper()
	rc, err := s.Get(ctxT(t), key, off, n)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(rc)
	require.NoError(t, err, "read get %q [%d, +%d)", key, off, n)
	require.NoError(t, rc.Close())
	return data, nil
}

func list(t *testing.T, s objstore.Store, prefix string) []objstore.Info {
	t.Helper()
	var out []objstore.Info
	for info, err := range s.List(ctxT(t), prefix) {
		require.NoError(t, err, "list %q", prefix)
		out = append(out, info)
	}
	return out
}

func keys(infos []objstore.Info) []string {
	var ks []string // nil when empty
	for _, info := range infos {
		ks = append(ks, info.Key)
	}
	return ks
}

func testPutGetHead(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	objects := map[string][]byte{
		"tenants/t1/topics/x/0/00000000000000000000-1-a.log": randomBytes(1<<20 + 7), // > SDK and copy buffers
		"tenants/t1/topics/x/0/00000000000000000000-1-a.idx": randomBytes(1),
		"tenants/t1/empty":      {},
		"top-level":             []byte("hello"),
		"unicode/ünï/😀":         []byte("utf-8 keys"),
		"spaces and+plus/=&?#%": []byte("characters that URLs escape"),
	}
	before := time.Now().Add(-2 * time.Second) // S3 keeps whole seconds; allow for that and skew
	for k, v := range objects {
		put(t, s, k, v)
	}
	after := time.Now().Add(2 * time.Second)
	for k, v := range objects {
		got, err := get(t, s, k, 0, -1)
		require.NoError(t, err, "get %q", k)
		require.True(t, bytes.Equal(v, got), "get %q returned %d bytes that differ from the %d put", k, len(got), len(v))

		info, err := s.Head(ctx, k)
		require.NoError(t, err, "head %q", k)
		require.Equal(t, k, info.Key)
		require.Equal(t, int64(len(v)), info.Size, "head %q size", k)
		require.True(t, !info.ModTime.Before(before) && !info.ModTime.After(after),
			"head %q mod time %s not within [%s, %s]", k, info.ModTime, before, after)
	}
	listed := list(t, s, "")
	require.Len(t, listed, len(objects))
	for _, info := range listed {
		require.Equal(t, int64(len(objects[info.Key])), info.Size, "listed size of %q", info.Key)
		require.True(t, !info.ModTime.Before(before) && !info.ModTime.After(after), "listed mod time of %q", info.Key)
	}
}

func testRangedGet(t *testing.T, s objstore.Store) {
	const key = "ranged/object"
	data := randomBytes(1000)
	put(t, s, key, data)
	size := int64(len(data))
	for _, tc := range []struct {
		name   string
		off, n int64
	}{
		{"start", 0, 10},
		{"middle", 300, 50},
		{"tail to end", 990, -1},
		{"tail exact", 990, 10},
		{"whole", 0, -1},
		{"whole exact", 0, size},
		{"one byte at the end", size - 1, 1},
		{"from the middle to the end", 500, -1},
		{"empty in the middle", 5, 0},
		{"empty at the end", size, 0},
		{"empty to the end", size, -1},
	} {
		got, err := get(t, s, key, tc.off, tc.n)
		require.NoError(t, err, tc.name)
		end := size
		if tc.n >= 0 {
			end = tc.off + tc.n
		}
		require.True(t, bytes.Equal(data[tc.off:end], got), "%s: got %d bytes that differ from [%d, %d)", tc.name, len(got), tc.off, end)
	}
	for _, tc := range []struct {
		name   string
		off, n int64
	}{
		{"start past the end", size + 1, -1},
		{"start past the end with length", size + 1, 1},
		{"start far past the end", 1 << 40, 10},
		{"end past the end", size - 5, 10},
		{"one byte too many", 0, size + 1},
		{"read at the end", size, 1},
		{"negative offset", -1, 10},
		{"huge length", 10, 1<<63 - 5},
	} {
		_, err := s.Get(ctxT(t), key, tc.off, tc.n)
		require.ErrorIs(t, err, objstore.ErrOutOfRange, tc.name)
		require.NotErrorIs(t, err, objstore.ErrNotFound, tc.name)
	}
	// A missing key is not found, whatever the range.
	for _, r := range [][2]int64{{0, -1}, {5, 10}, {5, 0}, {100, -1}} {
		_, err := s.Get(ctxT(t), "ranged/missing", r[0], r[1])
		require.ErrorIs(t, err, objstore.ErrNotFound, "get missing [%d, +%d)", r[0], r[1])
	}
}

func testRangedGetEmptyObject(t *testing.T, s objstore.Store) {
	const key = "empty"
	put(t, s, key, nil)
	for _, r := range [][2]int64{{0, -1}, {0, 0}} {
		got, err := get(t, s, key, r[0], r[1])
		require.NoError(t, err, "get [%d, +%d) of an empty object", r[0], r[1])
		require.Empty(t, got)
	}
	for _, r := range [][2]int64{{0, 1}, {1, -1}, {1, 0}} {
		_, err := s.Get(ctxT(t), key, r[0], r[1])
		require.ErrorIs(t, err, objstore.ErrOutOfRange, "get [%d, +%d) of an empty object", r[0], r[1])
	}
	info, err := s.Head(ctxT(t), key)
	require.NoError(t, err)
	require.Zero(t, info.Size)
}

func testNotFound(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	put(t, s, "present/a", []byte("a"))
	for _, key := range []string{"missing", "present/missing", "present/a/below-an-object", "pres", "present"} {
		_, err := s.Get(ctx, key, 0, -1)
		require.ErrorIs(t, err, objstore.ErrNotFound, "get %q", key)
		_, err = s.Head(ctx, key)
		require.ErrorIs(t, err, objstore.ErrNotFound, "head %q", key)
		require.NotErrorIs(t, err, objstore.ErrInvalidKey)
	}
	require.Empty(t, list(t, s, "missing/"))
	require.Empty(t, list(t, s, "present/a/"))
	require.Empty(t, list(t, s, "zzz"))
}

func testOverwrite(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	const key = "over/write"
	first, second := randomBytes(5000), randomBytes(300)
	put(t, s, key, first)
	put(t, s, key, second) // shorter: nothing of the first may remain
	got, err := get(t, s, key, 0, -1)
	require.NoError(t, err)
	require.Equal(t, second, got)
	info, err := s.Head(ctx, key)
	require.NoError(t, err)
	require.Equal(t, int64(len(second)), info.Size)

	// The same bytes again: harmless, as a retry after an unknown outcome would be.
	put(t, s, key, second)
	put(t, s, key, second)
	got, err = get(t, s, key, 0, -1)
	require.NoError(t, err)
	require.Equal(t, second, got)
	require.Equal(t, []string{key}, keys(list(t, s, "over/")))
}

// testPutSizeMismatch gives Put bodies shorter and longer than the size it is told.
func testPutSizeMismatch(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	const key = "size/mismatch"
	old := []byte("the old object")
	put(t, s, key, old)
	stream := func(n int64) func() io.Reader {
		return func() io.Reader { return io.LimitReader(strings.NewReader(strings.Repeat("x", 100)), n) }
	}
	for _, tc := range []struct {
		name string
		body func() io.Reader
		size int64
	}{
		{"seekable, short", func() io.Reader { return bytes.NewReader(make([]byte, 10)) }, 11},
		{"seekable, long", func() io.Reader { return bytes.NewReader(make([]byte, 12)) }, 11},
		{"stream, short", stream(10), 11},
		{"stream, long", stream(12), 11},
		{"stream, empty but sized", stream(0), 1},
		{"stream, non-empty but size 0", stream(1), 0},
	} {
		err := s.Put(ctx, key, tc.body(), tc.size)
		require.ErrorIs(t, err, objstore.ErrSizeMismatch, tc.name)
		got, gerr := get(t, s, key, 0, -1)
		require.NoError(t, gerr, tc.name)
		require.Equal(t, old, got, "%s: a failed put replaced the object", tc.name)
		err = s.Put(ctx, "size/never", tc.body(), tc.size)
		require.ErrorIs(t, err, objstore.ErrSizeMismatch, tc.name)
		_, err = s.Head(ctx, "size/never")
		require.ErrorIs(t, err, objstore.ErrNotFound, "%s: a failed put created an object", tc.name)
	}
	require.Error(t, s.Put(ctx, key, strings.NewReader(""), -1), "negative size")
}

func testPutFromReaderPosition(t *testing.T, s objstore.Store) {
	data := []byte("0123456789")
	r := bytes.NewReader(data)
	_, err := r.Seek(4, io.SeekStart)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctxT(t), "pos/seeker", r, 6))
	got, err := get(t, s, "pos/seeker", 0, -1)
	require.NoError(t, err)
	require.Equal(t, "456789", string(got))

	// A file (the uploader's case), read from its current position and left open.
	f, err := os.CreateTemp(t.TempDir(), "segment")
	require.NoError(t, err)
	defer f.Close()
	_, err = f.Write(data)
	require.NoError(t, err)
	_, err = f.Seek(2, io.SeekStart)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctxT(t), "pos/file", f, 8))
	got, err = get(t, s, "pos/file", 0, -1)
	require.NoError(t, err)
	require.Equal(t, "23456789", string(got))
	_, err = f.ReadAt(make([]byte, 1), 0)
	require.NoError(t, err, "Put closed its body")

	// A reader that cannot seek, larger than one read.
	big := randomBytes(3<<20 + 1)
	require.NoError(t, s.Put(ctxT(t), "pos/stream", io.MultiReader(bytes.NewReader(big[:1000]), bytes.NewReader(big[1000:])), int64(len(big))))
	got, err = get(t, s, "pos/stream", 0, -1)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got), "streamed put stored different bytes")
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	put(t, s, "del/a/x", []byte("x"))
	put(t, s, "del/a/y", []byte("y"))
	put(t, s, "del/b", []byte("b"))

	require.NoError(t, s.Delete(ctx, "del/a/x"))
	_, err := s.Head(ctx, "del/a/x")
	require.ErrorIs(t, err, objstore.ErrNotFound)
	_, err = s.Get(ctx, "del/a/x", 0, -1)
	require.ErrorIs(t, err, objstore.ErrNotFound)
	require.Equal(t, []string{"del/a/y", "del/b"}, keys(list(t, s, "del/")), "siblings survive a delete")

	require.NoError(t, s.Delete(ctx, "del/a/x"), "deleting twice")
	require.NoError(t, s.Delete(ctx, "del/never-existed"), "deleting a key never put")
	require.NoError(t, s.Delete(ctx, "del/no/such/prefix/key"), "deleting below a missing prefix")
	require.NoError(t, s.Delete(ctx, "del/a"), "deleting a prefix that is not an object")
	require.Equal(t, []string{"del/a/y", "del/b"}, keys(list(t, s, "del/")), "deleting a prefix deletes nothing")

	require.NoError(t, s.Delete(ctx, "del/a/y"))
	require.Equal(t, []string{"del/b"}, keys(list(t, s, "del/")))
	// A key whose prefix was emptied by deletes can be put again.
	put(t, s, "del/a/z", []byte("z"))
	require.Equal(t, []string{"del/a/z", "del/b"}, keys(list(t, s, "del/")))
}

func testListOrderAndPrefix(t *testing.T, s objstore.Store) {
	// Byte order puts '-' (0x2d) and '.' (0x2e) before '/' (0x2f) before '0' (0x30): a listing that
	// walks directories naively gets this wrong.
	all := []string{"o/a-c", "o/a.b", "o/a/b", "o/a/c/d", "o/a0", "o/b", "p", "p0", "x/ü"}
	for i, k := range slices.Backward(all) {
		put(t, s, k, bytes.Repeat([]byte{'x'}, i))
	}
	sizes := map[string]int64{}
	for i, k := range all {
		sizes[k] = int64(i)
	}
	got := list(t, s, "")
	require.Equal(t, all, keys(got), "list everything")
	for _, info := range got {
		require.Equal(t, sizes[info.Key], info.Size, "listed size of %q", info.Key)
	}
	for prefix, want := range map[string][]string{
		"o/":     {"o/a-c", "o/a.b", "o/a/b", "o/a/c/d", "o/a0", "o/b"},
		"o/a":    {"o/a-c", "o/a.b", "o/a/b", "o/a/c/d", "o/a0"},
		"o/a/":   {"o/a/b", "o/a/c/d"},
		"o/a/c":  {"o/a/c/d"},
		"o/a-":   {"o/a-c"},
		"o/a/b":  {"o/a/b"},
		"p":      {"p", "p0"},
		"p0":     {"p0"},
		"o/zz":   nil,
		"q/":     nil,
		"x/":     {"x/ü"},
		"o/a/..": nil, // ".." as a partial segment only filters names
	} {
		require.Equal(t, want, keys(list(t, s, prefix)), "list %q", prefix)
	}

	// Stopping early ends the iteration quietly.
	n := 0
	for info, err := range s.List(ctxT(t), "o/") {
		require.NoError(t, err)
		require.Equal(t, all[n], info.Key)
		n++
		if n == 2 {
			break
		}
	}
	require.Equal(t, 2, n)
}

func testListPagination(t *testing.T, s objstore.Store) {
	const objects = 1100 // more than S3's page of 1000 keys
	ctx := ctxT(t)
	want := make([]string, objects)
	for i := range want {
		want[i] = fmt.Sprintf("page/%05d", i)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Go(func() {
			for k := range work {
				if err := s.Put(ctx, k, strings.NewReader(k), int64(len(k))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for _, k := range slices.Backward(want) {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	put(t, s, "pagf", []byte("after the prefix"))
	put(t, s, "pag", []byte("before it"))

	got := list(t, s, "page/")
	require.Equal(t, want, keys(got))
	for _, info := range got {
		require.Equal(t, int64(len(info.Key)), info.Size)
	}
	require.Equal(t, want[1000:1100], keys(list(t, s, "page/01")))
	require.Len(t, list(t, s, ""), objects+2)

	// Stopping in the second page.
	n := 0
	for _, err := range s.List(ctx, "page/") {
		require.NoError(t, err)
		if n++; n == 1050 {
			break
		}
	}
	require.Equal(t, 1050, n)
}

// testOverwriteAtomicity overwrites one key with two versions of different lengths, each made of
// one repeated byte, while readers check that every read returns exactly one whole version.
func testOverwriteAtomicity(t *testing.T, s objstore.Store) {
	const key = "atomic/object"
	ctx := ctxT(t)
	versions := map[byte]int{'A': 256 << 10, 'B': 384<<10 + 1}
	body := func(c byte) []byte { return bytes.Repeat([]byte{c}, versions[c]) }
	put(t, s, key, body('A'))

	const puts = 40
	var writing atomic.Bool
	writing.Store(true)
	var wg sync.WaitGroup
	var failure atomic.Value
	fail := func(format string, args ...any) { failure.CompareAndSwap(nil, fmt.Sprintf(format, args...)) }
	wg.Go(func() {
		defer writing.Store(false)
		for i := range puts {
			c := byte('A' + i%2)
			if err := s.Put(ctx, key, bytes.NewReader(body(c)), int64(versions[c])); err != nil {
				fail("put %d: %v", i, err)
				return
			}
		}
	})
	var reads atomic.Int64
	for r := range 4 {
		wg.Go(func() {
			for i := 0; writing.Load() || i < 3; i++ {
				off, n := int64(0), int64(-1)
				if r%2 == 1 {
					off, n = 1000, 100000 // within both versions
				}
				rc, err := s.Get(ctx, key, off, n)
				if err != nil {
					fail("reader %d: get: %v", r, err)
					return
				}
				data, err := io.ReadAll(rc)
				_ = rc.Close()
				if err != nil {
					fail("reader %d: read: %v", r, err)
					return
				}
				reads.Add(1)
				if len(data) == 0 {
					fail("reader %d: empty read", r)
					return
				}
				c := data[0]
				want := int64(versions[c]) - off
				if n >= 0 {
					want = n
				}
				if int64(len(data)) != want || bytes.IndexFunc(data, func(x rune) bool { return byte(x) != c }) >= 0 {
					fail("reader %d: read %d bytes mixing versions (first %q, %d bytes expected)", r, len(data), c, want)
					return
				}
				info, err := s.Head(ctx, key)
				if err != nil || (info.Size != int64(versions['A']) && info.Size != int64(versions['B'])) {
					fail("reader %d: head: %+v, %v", r, info, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failure.Load(); f != nil {
		t.Fatal(f)
	}
	t.Logf("%d puts, %d whole reads", puts, reads.Load())
}

func testKeyValidation(t *testing.T, s objstore.Store) {
	ctx := ctxT(t)
	// Segments short enough for any file system, and few (each is a directory in a folder).
	long := strings.Repeat(strings.Repeat("k", 99)+"/", 11)
	maxKey := long[:objstore.MaxKeyLen-1] + "x"
	require.Len(t, maxKey, objstore.MaxKeyLen)
	bad := map[string]string{
		"":                        "empty",
		"/abs":                    "starts with '/'",
		"dir/":                    "ends with '/'",
		"a//b":                    "empty segment",
		"a/../b":                  `".." segment`,
		"..":                      `".." segment`,
		"../escape":               `".." segment`,
		"a/./b":                   `"." segment`,
		".":                       `"." segment`,
		"nul\x00byte":             "NUL",
		"bad\xffutf8":             "UTF-8",
		maxKey + "x":              "more than 1024",
		strings.Repeat("a", 2000): "more than 1024",
	}
	for key, problem := range bad {
		require.ErrorIs(t, objstore.ValidateKey(key), objstore.ErrInvalidKey, "ValidateKey(%q)", key)
		errs := map[string]error{
			"put":    s.Put(ctx, key, strings.NewReader("x"), 1),
			"delete": s.Delete(ctx, key),
		}
		_, errs["get"] = s.Get(ctx, key, 0, -1)
		_, errs["head"] = s.Head(ctx, key)
		for op, err := range errs {
			require.ErrorIs(t, err, objstore.ErrInvalidKey, "%s %q", op, key)
			require.ErrorContains(t, err, problem, "%s %q: the error should name the problem", op, key)
		}
	}
	for _, prefix := range []string{"/abs", "a//", "../", "a/../", "nul\x00", maxKey + "x"} {
		var errs []error
		for _, err := range s.List(ctx, prefix) {
			errs = append(errs, err)
		}
		require.Len(t, errs, 1, "list %q yields one error", prefix)
		require.ErrorIs(t, errs[0], objstore.ErrInvalidKey, "list %q", prefix)
	}
	// Valid edge cases: the longest key, dots inside names, a segment starting with a dot.
	for _, key := range []string{maxKey, "a/.hidden", "a/..b", "a/b..", "x.y/z"} {
		require.NoError(t, objstore.ValidateKey(key))
		put(t, s, key, []byte(key))
		got, err := get(t, s, key, 0, -1)
		require.NoError(t, err, "get %q", key)
		require.Equal(t, key, string(got))
	}
	require.Equal(t, []string{maxKey}, keys(list(t, s, "kk")))
}

// slowReader yields a chunk every tick until it has yielded size bytes.
type slowReader struct {
	left  int
	chunk int
	tick  time.Duration
	read  chan struct{} // closed after the first chunk
	once  sync.Once
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.tick)
	n := min(len(p), r.chunk, r.left)
	for i := range n {
		p[i] = 's'
	}
	r.left -= n
	r.once.Do(func() { close(r.read) })
	return n, nil
}

func testContextCancellation(t *testing.T, s objstore.Store) {
	put(t, s, "ctx/existing", randomBytes(4<<20))
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	err := s.Put(cancelled, "ctx/new", strings.NewReader("x"), 1)
	require.ErrorIs(t, err, context.Canceled, "put")
	_, err = s.Head(ctxT(t), "ctx/new")
	require.ErrorIs(t, err, objstore.ErrNotFound, "a cancelled put stored an object")

	_, err = s.Get(cancelled, "ctx/existing", 0, -1)
	require.ErrorIs(t, err, context.Canceled, "get")
	_, err = s.Head(cancelled, "ctx/existing")
	require.ErrorIs(t, err, context.Canceled, "head")
	err = s.Delete(cancelled, "ctx/existing")
	require.ErrorIs(t, err, context.Canceled, "delete")
	_, err = s.Head(ctxT(t), "ctx/existing")
	require.NoError(t, err, "a cancelled delete deleted")
	var errs []error
	for _, err := range s.List(cancelled, "ctx/") {
		errs = append(errs, err)
	}
	require.Len(t, errs, 1, "list with a cancelled context yields one error")
	require.ErrorIs(t, errs[0], context.Canceled, "list")

	// Cancelling while a Get's body is read ends the read.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rc, err := s.Get(ctx, "ctx/existing", 0, -1)
	require.NoError(t, err)
	defer rc.Close()
	_, err = io.ReadFull(rc, make([]byte, 10))
	require.NoError(t, err)
	cancel()
	_, err = io.ReadAll(rc)
	require.ErrorIs(t, err, context.Canceled, "read after cancel")

	// Cancelling while a List runs ends it with the context's error.
	put(t, s, "ctx/l1", nil)
	put(t, s, "ctx/l2", nil)
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	var got []string
	var lastErr error
	for info, err := range s.List(ctx, "ctx/l") {
		if err != nil {
			lastErr = err
			break
		}
		got = append(got, info.Key)
		cancel()
	}
	require.Equal(t, []string{"ctx/l1"}, got)
	require.ErrorIs(t, lastErr, context.Canceled, "list cancelled after the first key")
}

// testCancelledPut cancels a Put while its body is being read: the old object must stay, whole.
func testCancelledPut(t *testing.T, s objstore.Store) {
	const key = "ctx/replace"
	old := randomBytes(1000)
	put(t, s, key, old)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	body := &slowReader{left: 1 << 20, chunk: 16 << 10, tick: 5 * time.Millisecond, read: make(chan struct{})}
	go func() {
		<-body.read
		cancel()
	}()
	start := time.Now()
	err := s.Put(ctx, key, body, 1<<20)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second)
	got, gerr := get(t, s, key, 0, -1)
	require.NoError(t, gerr)
	require.Equal(t, old, got, "a cancelled put changed the object")

	body = &slowReader{left: 1 << 20, chunk: 16 << 10, tick: 5 * time.Millisecond, read: make(chan struct{})}
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	go func() {
		<-body.read
		cancel()
	}()
	require.ErrorIs(t, s.Put(ctx, "ctx/never", body, 1<<20), context.Canceled)
	_, err = s.Head(ctxT(t), "ctx/never")
	require.ErrorIs(t, err, objstore.ErrNotFound, "a cancelled put created an object")
}
