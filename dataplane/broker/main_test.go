package broker

import (
	"testing"

	"github.com/sluicemq/sluice/internal/testenv"
)

// Most of the package's tests wait on brokers of their own (replication,
// heartbeats, quota exchanges, lag samples) far more than they compute:
// alone and idle, six at a time ran the package in 103 s instead of 172 s
// (two, GOMAXPROCS) for 106 CPU-s instead of 95.
func TestMain(m *testing.M) {
	testenv.DefaultParallel(6)
	m.Run()
}
