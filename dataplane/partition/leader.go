package partition

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluicemq/sluice/dataplane/derr"
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

// replicaError maps the state machine's errors to domain errors for the
// replication and produce paths.
func (p *Replica) replicaError(err error) error {
	switch {
	case errors.Is(err, replica.ErrNotEnoughReplicas):
		return notEnoughReplicas(len(p.lead.ISR()), p.cfg.MinISR)
	case errors.Is(err, replica.ErrNotLeader):
		return p.notLeader(p.meta)
	case errors.Is(err, replica.ErrFencedLeaderEpoch):
		return derr.Wrap(derr.FencedLeaderEpoch, err)
	case errors.Is(err, replica.ErrStaleBrokerEpoch):
		return derr.Wrap(derr.StaleBrokerEpoch, err)
	case errors.Is(err, replica.ErrUnknownLeaderEpoch):
		return derr.Wrap(derr.UnknownLeaderEpoch, err)
	case errors.Is(err, replica.ErrNotReplica):
		return derr.Wrap(derr.NotReplica, err)
	case errors.Is(err, replica.ErrOffsetOutOfRange):
		return derr.Wrap(derr.OffsetOutOfRange, err)
	}
	return fmt.Errorf("replication state: %w", err)
}
