package txns

import (
	"context"
	"errors"

	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/partition"
	"github.com/sluicemq/sluice/dataplane/txn"
)

// Verification names the producer whose transaction a partition leader
// (before a transactional produce) or a group coordinator (before a
// transactional offset commit) verifies at the transactional id's
// coordinator (KIP-890), and the client's credential, which a coordinator
// on another broker is called with.
type Verification struct {
	TenantID, TransactionalID string
	ProducerID                int64
	ProducerEpoch             int16
	// Authorization is the client's credential as it presented it (the
	// Authorization header of a Connect request).
	Authorization string
	// VerifyOnly checks that the partition or group is in the producer's
	// transaction already (KIP-890 part 1, for a Kafka client that added
	// it itself: Produce below v12, TxnOffsetCommit below v5) instead of
	// adding it (part 2).
	VerifyOnly bool
}

// VerifyPartition asks the transaction coordinator of v's transactional id
// to put the partition (topicID, of v's tenant) in the producer's current
// transaction (AddPartitions; with v.VerifyOnly, to check it is in it), before a partition leader appends the
// producer's first transactional batch of this epoch. It returns nil once
// the coordinator has the partition in the transaction, or the error to
// answer the produce with: the coordinator's refusals with their reasons,
// and never the transaction-state partition's NotLeader (a coordinator
// that cannot be reached is CoordinatorNotAvailable); one NotLeader
// answer of a remote coordinator is followed.
func (s *Service) VerifyPartition(ctx context.Context, v Verification, topicID string, partition int32) error {
	t, ok := s.deps.View().ByID[topicID]
	if !ok || t.TenantID != v.TenantID {
		return derr.New(derr.UnknownTopicOrPartition, "topic %s not found", topicID)
	}
	return s.addToTransaction(ctx, v, []txn.TopicPartition{{TopicID: topicID, Partition: partition}}, nil,
		AddRequest{Topics: []TopicPartitions{{Topic: t.Name, Partitions: []int32{partition}}}})
}

// VerifyGroup is VerifyPartition for a group whose offsets the producer
// commits in its transaction (the coordinator's AddOffsets), before the
// group's coordinator accepts them.
func (s *Service) VerifyGroup(ctx context.Context, v Verification, group string) error {
	return s.addToTransaction(ctx, v, nil, []string{group}, AddRequest{Groups: []string{group}})
}

// addToTransaction adds partitions and groups to the producer's
// transaction at its coordinator: here, or with req (its topics and groups
// set) at the coordinator's broker. Its errors answer a produce to a data
// partition or an offset commit to a group, so they never carry the
// transaction-state partition's NotLeader (coordinatorUnavailable).
func (s *Service) addToTransaction(ctx context.Context, v Verification, tps []txn.TopicPartition, groups []string, req AddRequest) error {
	if err := validTransactionalID(v.TransactionalID); err != nil {
		return err
	}
	c, _, err := s.coordinatorFor(ctx, v.TenantID, v.TransactionalID)
	if err == nil {
		if v.VerifyOnly {
			return txnError(c.Verify(v.TenantID, v.TransactionalID, v.ProducerID, v.ProducerEpoch, tps, groups))
		}
		return txnError(c.Add(ctx, v.TenantID, v.TransactionalID, v.ProducerID, v.ProducerEpoch, tps, groups))
	}
	var nl *partition.NotLeaderError
	if !errors.As(err, &nl) || nl.Leader < 0 || nl.Self {
		return coordinatorUnavailable(err)
	}
	req.TenantID, req.TransactionalID, req.ProducerID, req.ProducerEpoch = v.TenantID, v.TransactionalID, v.ProducerID, int32(v.ProducerEpoch)
	req.VerifyOnly = v.VerifyOnly
	leader := nl.Leader
	for hop := 0; ; hop++ {
		err := s.deps.Peers.AddToTransaction(ctx, leader, v.Authorization, req)
		if err == nil {
			return nil
		}
		var next *partition.NotLeaderError
		if !errors.As(err, &next) || hop > 0 || next.Leader < 0 || next.Leader == leader || next.Leader == s.cfg.BrokerID {
			var answered derr.Kinded
			if errors.As(err, &answered) {
				return coordinatorUnavailable(err)
			}
			return derr.New(derr.CoordinatorNotAvailable, "transaction coordinator %d: %w", leader, err)
		}
		leader = next.Leader // the coordinator moved: follow it once
	}
}
