package objstore_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
	"github.com/sluicemq/sluice/tiered/objstore/objstoretest"
)

func TestObjstoreValidateKey(t *testing.T) {
	t.Parallel()
	for key, problem := range map[string]string{
		"":                        "empty",
		"/a":                      "starts with '/'",
		"a/":                      "ends with '/'",
		"a//b":                    "empty segment",
		"a/./b":                   `"." segment`,
		"a/..":                    `".." segment`,
		"..":                      `".." segment`,
		"a\x00":                   "NUL",
		"\xc3\x28":                "UTF-8",
		strings.Repeat("a", 1025): "1025 bytes long, more than 1024",
	} {
		err := objstore.ValidateKey(key)
		require.ErrorIs(t, err, objstore.ErrInvalidKey, "%q", key)
		require.ErrorContains(t, err, problem, "%q", key)
	}
	for _, key := range []string{"a", "a/b", strings.Repeat("a", 1024), "a/.b", "a/..b", "a/b.", "ü/😀", "a b/c+d=e"} {
		require.NoError(t, objstore.ValidateKey(key), "%q", key)
	}
}

func TestObjstoreValidatePrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a", "a/", "a/b", "a/.", "a/..", "a/..x", "."} {
		require.NoError(t, objstore.ValidatePrefix(p), "%q", p)
	}
	for _, p := range []string{"/", "/a", "a//", "../", "a/../b", "./", "a\x00", strings.Repeat("a", 1025)} {
		require.ErrorIs(t, objstore.ValidatePrefix(p), objstore.ErrInvalidKey, "%q", p)
	}
}

func TestObjstoreCheckRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		off, n, size, want int64
		ok                 bool
	}{
		{0, -1, 10, 10, true},
		{0, 10, 10, 10, true},
		{3, 4, 10, 4, true},
		{10, -1, 10, 0, true},
		{10, 0, 10, 0, true},
		{0, -1, 0, 0, true},
		{11, -1, 10, 0, false},
		{5, 6, 10, 0, false},
		{-1, 1, 10, 0, false},
		{1, 1<<63 - 1, 10, 0, false},
	} {
		got, err := objstore.CheckRange("k", tc.off, tc.n, tc.size)
		if tc.ok {
			require.NoError(t, err, "%+v", tc)
			require.Equal(t, tc.want, got, "%+v", tc)
		} else {
			require.ErrorIs(t, err, objstore.ErrOutOfRange, "%+v", tc)
		}
	}
}

func TestObjstoreInstrumentedKeepsTheContract(t *testing.T) {
	t.Parallel()
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		s, err := folder.New(t.TempDir())
		require.NoError(t, err)
		return objstore.Instrument(s, prometheus.NewRegistry(), "folder")
	})
}

func TestObjstoreInstrumentCounts(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f1, err := folder.New(t.TempDir())
	require.NoError(t, err)
	f2, err := folder.New(t.TempDir())
	require.NoError(t, err)
	s := objstore.Instrument(f1, reg, "one")
	other := objstore.Instrument(f2, reg, "two") // a second store on the same registry
	ctx := t.Context()

	require.NoError(t, s.Put(ctx, "a", bytes.NewReader(make([]byte, 100)), 100))
	require.NoError(t, s.Put(ctx, "b", bytes.NewReader(make([]byte, 50)), 50))
	require.Error(t, s.Put(ctx, "c", bytes.NewReader(make([]byte, 5)), 6)) // size mismatch
	rc, err := s.Get(ctx, "a", 10, 30)
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	_, err = s.Get(ctx, "missing", 0, -1)
	require.ErrorIs(t, err, objstore.ErrNotFound)
	_, err = s.Head(ctx, "missing")
	require.ErrorIs(t, err, objstore.ErrNotFound)
	require.NoError(t, s.Delete(ctx, "b"))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Head(cancelled, "a")
	require.ErrorIs(t, err, context.Canceled)
	n := 0
	for _, err := range s.List(ctx, "") {
		require.NoError(t, err)
		n++
	}
	require.Equal(t, 1, n)
	require.NoError(t, other.Put(ctx, "x", strings.NewReader("xyz"), 3))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_objstore_operations_total Object-store operations by backend, operation (put, get, head, delete, list) and result (ok, not_found, canceled, error).
# TYPE sluice_objstore_operations_total counter
sluice_objstore_operations_total{backend="one",op="delete",result="ok"} 1
sluice_objstore_operations_total{backend="one",op="get",result="not_found"} 1
sluice_objstore_operations_total{backend="one",op="get",result="ok"} 1
sluice_objstore_operations_total{backend="one",op="head",result="canceled"} 1
sluice_objstore_operations_total{backend="one",op="head",result="not_found"} 1
sluice_objstore_operations_total{backend="one",op="list",result="ok"} 1
sluice_objstore_operations_total{backend="one",op="put",result="error"} 1
sluice_objstore_operations_total{backend="one",op="put",result="ok"} 2
sluice_objstore_operations_total{backend="two",op="put",result="ok"} 1
# HELP sluice_objstore_bytes_total Object bytes transferred by backend and operation: stored by successful puts, read from gets.
# TYPE sluice_objstore_bytes_total counter
sluice_objstore_bytes_total{backend="one",op="get"} 30
sluice_objstore_bytes_total{backend="one",op="put"} 150
sluice_objstore_bytes_total{backend="two",op="put"} 3
`), "sluice_objstore_operations_total", "sluice_objstore_bytes_total"))
	// One latency series per (backend, op), each observing every operation.
	require.Equal(t, 6, testutil.CollectAndCount(reg, "sluice_objstore_operation_duration_seconds"))
}
