package grafana_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/sluicemq/sluice/internal/testenv"
)

// sluiceBin is the sluice binary TestDashboardMetricsExported runs, built by TestMain.
var sluiceBin string

// TestMain builds the sluice binary once per test binary (with -race when the tests run with it,
// as e2e does, so that the two share the build cache), then runs the tests through testenv.Main,
// which tears down the Postgres they start. The binary goes to a fixed place in the user cache
// (one per checkout, replaced atomically), because testenv.Main exits without returning.
func TestMain(m *testing.M) {
	bin, err := buildSluice()
	if err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	sluiceBin = bin
	testenv.Main(m)
}

func buildSluice() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(wd))
	dir := filepath.Join(cache, "sluice-grafana", hex.EncodeToString(sum[:6]))
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
	if raceEnabled {
		args = append(args, "-race")
		name = "sluice-race"
	}
	build := exec.Command("go", append(args, "../../cmd/sluice")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	return bin, os.Rename(tmp.Name(), bin)
}
