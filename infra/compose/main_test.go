package compose

import (
	"testing"

	"github.com/sluicemq/sluice/internal/testenv"
)

func TestMain(m *testing.M) {
	sweepBinDirs()
	testenv.Main(m)
}
