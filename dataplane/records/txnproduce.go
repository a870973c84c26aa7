package records

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluicemq/sluice/dataplane/cluster"
	"github.com/sluicemq/sluice/dataplane/derr"
	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/dataplane/partition"
)

// txnProduce is a produce request's transactional part: the producer of
// its transactional batches and the transactional id they belong to.
type txnProduce struct {
	transactionalID string
	producerID      int64
	epoch           int16
	// verifyOnly: the client added the partition to its transaction
	// itself (ProduceManyRequest.VerifyOnly).
	verifyOnly bool
}

// transactionalBatches checks the transactional batches of a produce
// request: none (nil, nil: an ordinary produce, whatever transactionalID
// says), or every batch transactional, of one producer id (>= 0) and
// epoch, with the request's transactional id set. Anything else is
// InvalidRequest, nothing of the request written.
func transactionalBatches(batches []log.ValidBatch, transactionalID string) (*txnProduce, error) {
	var txn *txnProduce
	for i, b := range batches {
		h := b.Header()
		switch {
		case !h.Attributes.Transactional() && txn == nil:
			continue
		case !h.Attributes.Transactional():
			return nil, derr.New(derr.InvalidRequest, "batches: batch %d is not transactional, the batches before it are: a request is all transactional or not at all", i+1)
		case transactionalID == "":
			return nil, derr.New(derr.InvalidRequest, "batches: batch %d has the transactional attribute: transactional_id must be set (the producer's, from InitProducerId)", i+1)
		case h.ProducerID < 0 || h.ProducerEpoch < 0:
			return nil, derr.New(derr.InvalidRequest, "batches: batch %d is transactional without a producer id and epoch", i+1)
		case i > 0 && txn == nil:
			return nil, derr.New(derr.InvalidRequest, "batches: batch %d is transactional, the batches before it are not: a request is all transactional or not at all", i+1)
		case txn == nil:
			txn = &txnProduce{transactionalID: transactionalID, producerID: h.ProducerID, epoch: h.ProducerEpoch}
		case h.ProducerID != txn.producerID || h.ProducerEpoch != txn.epoch:
			return nil, derr.New(derr.InvalidRequest, "batches: batch %d is of producer %d epoch %d, batch 1 of producer %d epoch %d: a transactional request carries one producer's batches", i+1, h.ProducerID, h.ProducerEpoch, txn.producerID, txn.epoch)
		}
	}
	return txn, nil
}

// verifier is the partition's Verifier for a transactional request's
// batches to partition of t (nil without txn): the transaction
// coordinator's verification that the partition is in the producer's
// current transaction (Deps.VerifyTransaction), with the request's
// headers (header is called only then: it may allocate).
func (s *Service) verifier(txn *txnProduce, header Headers, t *cluster.Topic, partition int32) partition.Verifier {
	if txn == nil {
		return nil
	}
	return func(ctx context.Context, pid int64, epoch int16) error {
		if pid != txn.producerID || epoch != txn.epoch {
			return errors.New("verifier called for another producer than the request's") // the partition asks for the request's first batch
		}
		var h http.Header
		if header != nil {
			h = header()
		}
		if h == nil {
			h = http.Header{}
		}
		return s.d.VerifyTransaction(ctx, h, Verification{TenantID: t.TenantID, TransactionalID: txn.transactionalID, TopicID: t.ID,
			Partition: partition, ProducerID: pid, Epoch: epoch, VerifyOnly: txn.verifyOnly})
	}
}
