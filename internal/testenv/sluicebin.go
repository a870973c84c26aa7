package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildSluice builds the `sluice` binary of the module holding the working directory
// (./cmd/sluice) for tests that run it as separate processes, and returns its path. It is for
// TestMain, before testenv.Main (which exits without returning, so nothing could remove a
// temporary binary): the binary goes to a fixed place in the user cache, one per checkout and
// cache name, and is replaced atomically. With race, it is built with -race (as sluice-race), so
// that the processes the tests start run under the race detector too.
func BuildSluice(cacheName string, race bool) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, cacheName, hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "sluice-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := []string{"build", "-o", tmp.Name()}
	name := "sluice"
	if race {
		args = append(args, "-race")
		name = "sluice-race"
	}
	build := exec.Command("go", append(args, "./cmd/sluice")...)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %w", err)
	}
	bin := filepath.Join(dir, name)
	return bin, os.Rename(tmp.Name(), bin)
}

// moduleRoot is the nearest directory at or above the working directory holding a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = parent
	}
}
