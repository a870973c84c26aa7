package broker

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

// newLeader starts the replication state machine for a leadership that pm
// gives this broker.
func (p *partition) newLeaderLocked(pm partMeta, cfg topicConfig, now time.Time) (*replica.Leader, error) {
	minISR := int(cfg.minISR)
	if minISR < 1 {
		minISR = 1
	}
	return replica.NewLeader(replica.LeaderParams{
		Self:           p.b.cfg.ID,
		Replicas:       pm.replicas,
		ISR:            pm.isr,
		LeaderEpoch:    pm.leaderEpoch,
		PartitionEpoch: pm.partitionEpoch,
		MinISR:         minISR,
		LagTimeMax:     p.b.cfg.ReplicaLagTimeMax,
		Log:            logState(p.log),
		HW:             min(p.roleHW, p.log.LEO()),
		Now:            now,
	})
}

// replicaError maps the state machine's errors to Connect codes for the
// replication and produce paths.
func (p *partition) replicaError(err error) error {
	switch {
	case errors.Is(err, replica.ErrNotEnoughReplicas):
		return toConnect(&notEnoughReplicasError{isr: len(p.lead.ISR()), min: p.cfg.minISR})
	case errors.Is(err, replica.ErrNotLeader):
		return toConnect(p.b.notLeader(p.meta))
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
