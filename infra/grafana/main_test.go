package grafana_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluicemq/sluice/internal/testenv"
)

// sluiceBin is the sluice binary TestDashboardMetricsExported runs, built by TestMain.
var sluiceBin string

// TestMain builds the sluice binary once per test binary (with -race when the tests run with it,
// as e2e does, so that the two share the build cache), then runs the tests through testenv.Main,
// which tears down the Postgres they start (testenv.BuildSluice says where the binary goes).
func TestMain(m *testing.M) {
	bin, err := testenv.BuildSluice("sluice-grafana", raceEnabled)
	if err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	sluiceBin = bin
	testenv.Main(m)
}
