package folder_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/tiered/objstore"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
	"github.com/sluicemq/sluice/tiered/objstore/objstoretest"
)

func newStore(t *testing.T) *folder.Store {
	t.Helper()
	s, err := folder.New(t.TempDir())
	require.NoError(t, err)
	return s
}

func TestObjstoreFolderAcceptance(t *testing.T) {
	t.Parallel()
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newStore(t) })
}

func TestObjstoreFolderLayoutIsReadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := folder.New(dir)
	require.NoError(t, err)
	ctx := t.Context()
	const key = "tenants/t1/topics/x/0/00000000000000000000-1-u.log"
	require.NoError(t, s.Put(ctx, key, strings.NewReader("segment"), 7))
	b, err := os.ReadFile(filepath.Join(dir, "objects", filepath.FromSlash(key)))
	require.NoError(t, err)
	require.Equal(t, "segment", string(b))

	// Deleting the last object of a prefix removes the emptied directories.
	require.NoError(t, s.Delete(ctx, key))
	entries, err := os.ReadDir(filepath.Join(dir, "objects"))
	require.NoError(t, err)
	require.Empty(t, entries)
	tmp, err := os.ReadDir(filepath.Join(dir, "tmp"))
	require.NoError(t, err)
	require.Empty(t, tmp, "a put leaves no temporary file")
}

func TestObjstoreFolderTempFilesAreNeverListedAndStaleOnesAreRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := folder.New(dir)
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Put(ctx, "a", strings.NewReader("a"), 1))
	// What a crash in the middle of a Put leaves behind.
	fresh := filepath.Join(dir, "tmp", "put-fresh")
	stale := filepath.Join(dir, "tmp", "put-stale")
	for _, p := range []string{fresh, stale} {
		require.NoError(t, os.WriteFile(p, []byte("partial"), 0o644))
	}
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(stale, old, old))

	var listed []string
	for info, err := range s.List(ctx, "") {
		require.NoError(t, err)
		listed = append(listed, info.Key)
	}
	require.Equal(t, []string{"a"}, listed)

	_, err = folder.New(dir)
	require.NoError(t, err)
	_, err = os.Stat(stale)
	require.ErrorIs(t, err, os.ErrNotExist, "New removes temporary files older than an hour")
	_, err = os.Stat(fresh)
	require.NoError(t, err, "New keeps recent temporary files: another process may be writing them")
}

func TestObjstoreFolderObjectAndPrefixCannotShareAName(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	require.NoError(t, s.Put(ctx, "a", strings.NewReader("a"), 1))
	err := s.Put(ctx, "a/b", strings.NewReader("b"), 1)
	require.ErrorContains(t, err, "cannot hold both")
	require.NoError(t, s.Put(ctx, "c/d", strings.NewReader("d"), 1))
	err = s.Put(ctx, "c", strings.NewReader("c"), 1)
	require.ErrorContains(t, err, "cannot hold both")
	// Neither failure changed anything.
	for _, key := range []string{"a/b", "c"} {
		_, err := s.Head(ctx, key)
		require.ErrorIs(t, err, objstore.ErrNotFound, key)
	}
	info, err := s.Head(ctx, "c/d")
	require.NoError(t, err)
	require.Equal(t, int64(1), info.Size)
}

func TestObjstoreFolderConcurrentPutAndDeleteOfSiblings(t *testing.T) {
	t.Parallel()
	// Delete removes emptied directories while Put may be creating a file in one: Put must retry.
	s := newStore(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		for range 100 {
			if err := s.Put(ctx, "p/q/x", strings.NewReader("x"), 1); err != nil {
				done <- err
				return
			}
			if err := s.Delete(ctx, "p/q/x"); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 100 {
		require.NoError(t, s.Put(ctx, "p/q/y", strings.NewReader("y"), 1))
		require.NoError(t, s.Delete(ctx, "p/q/y"))
	}
	require.NoError(t, <-done)
}

func TestObjstoreFolderNewRefusesAnEmptyDirectory(t *testing.T) {
	t.Parallel()
	_, err := folder.New("")
	require.Error(t, err)
}
