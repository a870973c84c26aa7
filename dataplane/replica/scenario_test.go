package replica

import (
	"testing"

	"github.com/sluicemq/sluice/internal/scenario"
)

// Scenario files (testdata/*.txt) hold blocks: comment lines (#), command
// lines, a "----" line and the expected output up to a blank line. Each file
// runs on a fresh simulated cluster (cluster_test.go); every command is
// followed by an invariant check. Regenerate the expected output with
//
//	go test ./dataplane/replica -run TestReplicaScenario -rewrite
//
// (or SLUICE_REWRITE=1) and review the diff.

func TestReplicaScenario(t *testing.T) {
	scenario.Run(t, "testdata/*.txt", func(*testing.T) scenario.Script {
		c := newCluster()
		return scenario.Script{Exec: c.run, Out: &c.out}
	})
}
