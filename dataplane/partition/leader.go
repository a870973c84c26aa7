package partition

import (
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/replica"
)

// logState is what the replication state machine needs of a local log.
func logState(l *log.Log) replica.LogState {
	es := l.Epochs()
	out := make([]replica.EpochEntry, len(es))
	for i, e := range es {
		out[i] = replica.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset}
	}
	leo := l.LEO() // before the durable end, which a sync may move up to it
	return replica.LogState{LEO: leo, Epochs: out, Durable: min(l.DurableOffset(), leo)}
}

// newLeaderLocked starts the replication state machine for a leadership
// that pm gives this broker.
func (p *Replica) newLeaderLocked(pm Assignment, cfg TopicConfig, now time.Time) (*replica.Leader, error) {
	minISR := int(cfg.MinISR)
	if minISR < 1 {
		minISR = 1
	}
	return replica.NewLeader(replica.LeaderParams{
		Self:           p.h.ID,
		Replicas:       pm.Replicas,
		ISR:            pm.ISR,
		LeaderEpoch:    pm.LeaderEpoch,
		PartitionEpoch: pm.PartitionEpoch,
		MinISR:         minISR,
		LagTimeMax:     p.h.ReplicaLagTimeMax,
		Log:            logState(p.log),
		HW:             min(p.roleHW, p.log.LEO()),
		Now:            now,
	})
}

// replicaError maps the state machine's errors to Connect codes for the
// replication and produce paths.
func (p *Replica) replicaError(err error) error {
	switch {
	case errors.Is(err, replica.ErrNotEnoughReplicas):
		return ToConnect(&notEnoughReplicasError{isr: len(p.lead.ISR()), min: p.cfg.MinISR})
	case errors.Is(err, replica.ErrNotLeader):
		return ToConnect(p.notLeader(p.meta))
	case errors.Is(err, replica.ErrFencedLeaderEpoch), errors.Is(err, replica.ErrStaleBrokerEpoch):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, replica.ErrUnknownLeaderEpoch):
		return connect.NewError(connect.CodeUnavailable, err)
	case errors.Is(err, replica.ErrNotReplica):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, replica.ErrOffsetOutOfRange):
		return connect.NewError(connect.CodeOutOfRange, err)
	}
	return fmt.Errorf("replication state: %w", err)
}
