package partition

import (
	"testing"

	"github.com/sluicemq/sluice/internal/testenv"
)

// The tests mostly wait on replicas' fetch loops and timers: alone and
// idle, six at a time ran the package in 12 s instead of 21 s (two,
// GOMAXPROCS) for about the same CPU.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(6)
	m.Run()
}
