package e2e

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestClusterControlPlaneRestart proves that control-plane restarts lose
// nothing, with the acks=all workload running throughout.
//
// Phase 1: SIGKILL the control plane and keep it down past the broker
// lease (every lease in the database expires). The brokers keep their
// assignments: produces to the existing leaders are acknowledged or fail
// with a clear retriable (Unavailable, DeadlineExceeded) or refusing
// (NotEnoughReplicas, NotLeader) error, and every partition keeps
// acknowledging acks=all during the outage. Restarted on the same database
// and address, the control plane sees every broker live again under the
// same broker epoch; no leader is elected and every partition keeps its 3
// in-sync replicas.
//
// Phase 2: SIGKILL the control plane and partition 0's leader together,
// restart both. The leader's partitions are unavailable meanwhile (nothing
// can elect), the others cannot shrink their ISR; after the restart a new
// leader is elected from the ISR, the old leader rejoins and every ISR
// grows back to 3.
//
// Then the cluster quiesces and the usual verification runs (nothing
// acknowledged lost, no duplicates, consistent offsets, byte-identical
// replicas), over the workload's history and the probes'.
func TestClusterControlPlaneRestart(t *testing.T) {
	t.Parallel()
	s := startScenario(t, testcluster.Options{})
	s.startWorkload(testcluster.WorkloadConfig{})
	s.waitAcked(3000, 60*time.Second)
	s.waitControllerGrace()
	lease := 3 * time.Second // testcluster.Options' default BrokerLease

	// Phase 1: the control plane alone, down past the broker lease.
	before := s.metadata()
	killed := time.Now()
	s.c.KillControlPlane()
	probes := s.probeLeadersUntil(before, killed.Add(lease+2*time.Second), "cp-down")
	s.c.RestartControlPlane()
	restarted := time.Now()
	s.c.WaitLive(s.c.BrokerIDs()...)
	t.Logf("control plane down %s; every broker live again %s after the restart",
		restarted.Sub(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	outage := append(s.w.Ops(), probes...)
	s.requireClearOutcomes(outage, killed, restarted, -1, "control plane down")
	for _, p := range partitions {
		// The interesting stretch is after every lease in the database ran
		// out: the brokers do not know and must not care.
		at, ok := testcluster.FirstAckAfter(outage, p, killed.Add(lease))
		require.True(t, ok && at.Before(restarted), "partition %d: no acks=all acknowledged while the control plane was down past the broker lease", p)
	}
	s.requireFullISR(30 * time.Second)
	s.waitHealthy(restarted)
	after := s.metadata()
	for _, p := range partitions {
		require.Equal(t, before[p].Leader, after[p].Leader, "partition %d: a control-plane restart moved leadership with every broker healthy: %+v → %+v", p, before[p], after[p])
		require.Equal(t, before[p].LeaderEpoch, after[p].LeaderEpoch, "partition %d: a control-plane restart elected a leader with every broker healthy: %+v → %+v", p, before[p], after[p])
	}
	s.waitAcked(s.w.Acked()+2000, 60*time.Second)

	// Phase 2: the control plane and a leader together.
	before = s.metadata()
	victim := before[0].Leader
	killed = time.Now()
	s.c.KillControlPlane()
	s.c.Kill(victim)
	var live []int32
	for _, id := range s.c.BrokerIDs() {
		if id != victim {
			live = append(live, id)
		}
	}
	probes = append(probes, s.probeLeadersUntil(onlyLedBy(before, live), killed.Add(lease+time.Second), "cp-and-leader-down")...)
	s.c.RestartControlPlane()
	s.c.Restart(victim, false)
	restarted = time.Now()
	s.c.WaitLive(s.c.BrokerIDs()...)
	t.Logf("control plane and broker %d down %s; every broker live again %s after the restart", victim,
		restarted.Sub(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	s.requireClearOutcomes(append(s.w.Ops(), probes...), killed, restarted, victim, fmt.Sprintf("control plane and broker %d down", victim))
	s.requireFullISR(30 * time.Second)
	s.waitHealthy(restarted)
	after = s.metadata()
	t.Logf("partition 0: leader %d epoch %d → leader %d epoch %d", before[0].Leader, before[0].LeaderEpoch, after[0].Leader, after[0].LeaderEpoch)
	s.waitAcked(s.w.Acked()+2000, 60*time.Second)

	s.verifyWith(probes)
}

// probeLeadersUntil sends one acks=all produce to the leader of each
// partition in leaders (as it was before the fault, no forwarding) every
// 100 ms until the deadline, and returns the outcomes.
func (s *scenario) probeLeadersUntil(leaders map[int32]testcluster.PartitionInfo, deadline time.Time, tag string) []testcluster.Op {
	var ops []testcluster.Op
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; time.Now().Before(deadline); i++ {
		for _, p := range slices.Sorted(maps.Keys(leaders)) {
			ops = append(ops, s.probeAcksAll(leaders[p].Leader, p, 1, fmt.Sprintf("%s-%d", tag, i))...)
		}
		<-tick.C
	}
	return ops
}

// onlyLedBy keeps the partitions whose leader is one of ids.
func onlyLedBy(md map[int32]testcluster.PartitionInfo, ids []int32) map[int32]testcluster.PartitionInfo {
	out := map[int32]testcluster.PartitionInfo{}
	for p, info := range md {
		if slices.Contains(ids, info.Leader) {
			out[p] = info
		}
	}
	return out
}

// requireClearOutcomes checks every produce started in [from, to): it was
// acknowledged, refused with an error that says why (NotEnoughReplicas,
// NotLeader, an offline partition), or failed with a retriable error that
// leaves the outcome open (Unavailable, DeadlineExceeded). Anything else —
// an authentication failure, Internal, Unknown — is not a clear answer,
// except from a broker SIGKILLed meanwhile (dead, or -1): a connection it
// drops mid-request can surface as anything the client library makes of
// the broken transport (connect-go reports ECONNRESET as Canceled), and
// the checker counts it as indefinite. It logs the tally.
func (s *scenario) requireClearOutcomes(ops []testcluster.Op, from, to time.Time, dead int32, what string) {
	s.t.Helper()
	tally := map[string]int{}
	for _, op := range ops {
		if op.Start.Before(from) || !op.Start.Before(to) {
			continue
		}
		if op.Outcome == testcluster.Acked {
			tally["acked"]++
			continue
		}
		var clear bool
		switch op.Code {
		case connect.CodeUnavailable.String(), connect.CodeDeadlineExceeded.String():
			clear = true
		case connect.CodeFailedPrecondition.String():
			clear = strings.Contains(op.Err, "not enough replicas") || strings.Contains(op.Err, "not the leader")
		default:
			clear = op.Broker == dead && op.Outcome == testcluster.Indefinite && transportFailure(op.Err)
		}
		require.True(s.t, clear, "%s: produce failed without a clear retriable or refusing error: %+v", what, op)
		tally[op.Outcome.String()+" "+op.Code]++
	}
	s.t.Logf("%s: produces started meanwhile: %v", what, tally)
}

// transportFailure reports whether a client error is the connection to the
// broker breaking rather than an answer from it.
func transportFailure(err string) bool {
	for _, m := range []string{"connection reset by peer", "broken pipe", "EOF", "connection refused"} {
		if strings.Contains(err, m) {
			return true
		}
	}
	return false
}

// requireFullISR waits until every broker's metadata shows every partition
// with a leader and all 3 replicas in sync.
func (s *scenario) requireFullISR(timeout time.Duration) {
	s.t.Helper()
	start := time.Now()
	require.True(s.t, s.waitFullISR(timeout), "every partition back to 3 in-sync replicas within %s", timeout)
	s.t.Logf("every partition has 3 in-sync replicas again (%s)", time.Since(start).Round(time.Millisecond))
}

// verifyWith is verify with extra produces (probes sent outside the
// workload) added to the history the checker reads.
func (s *scenario) verifyWith(extra []testcluster.Op) *testcluster.Report {
	s.t.Helper()
	s.w.Stop()
	start := time.Now()
	testcluster.WaitQuiesced(s.t, s.cl, partitions, 60*time.Second)
	testcluster.WaitReplicasIdentical(s.t, s.cl, partitions, 30*time.Second)
	final := testcluster.ReadFinal(s.t, s.cl, partitions)
	r := testcluster.Check(append(s.w.Ops(), extra...), s.w.Polls(), final)
	s.t.Logf("checker (quiesced in %s): %s", time.Since(start).Round(time.Millisecond), r)
	require.True(s.t, r.OK(), "checker found anomalies:\n%s", r)
	require.Empty(s.t, s.w.Anomalies(), "consumer anomalies")
	require.Positive(s.t, r.AckedRecords)
	return r
}
