package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicemq/sluice/internal/clock"
)

// ConsumeTransformProduce runs the exactly-once loop "read A, write B,
// commit the offset" until ctx ends (it then returns nil) or a fatal
// error. g reads A (a GroupConsumer with CommitTransactional; with
// WithConsumerOptions(WithIsolation(ReadCommitted)) when A is itself
// written in transactions); for each Poll it opens a transaction on tp,
// produces what transform returns for each record (nil or none: nothing),
// commits the records' next offsets for g's group in the same transaction
// (SendOffsets), and commits it. So B's records and A's offsets commit
// together or not at all: after a crash at any point the group resumes
// from the last committed offsets, and a ReadCommitted reader of B sees
// each input's outputs exactly once.
//
// When the transaction must abort (ErrTransactionAbortable: a record
// failed, the member lost a partition, the transaction timed out) it
// aborts and rewinds g to the group's committed offsets, and goes on: the
// records are read and transformed again. transform may thus run more than
// once for a record; only its outputs in B are exactly once, not its other
// effects (docs/sdk-transactions.md). An error from transform aborts the
// transaction, rewinds g, and is returned. A fatal error ends it (also
// one that the abort of a failed transaction meets): the error returned
// matches ErrTransactionFatal, and ErrProducerFenced when another instance
// with tp's transactional id took over; tp is closed then, and g is left
// for the caller to close.
func ConsumeTransformProduce(ctx context.Context, g *GroupConsumer, tp *TransactionalProducer, transform func(context.Context, *Record) ([]*Record, error)) error {
	if !g.cfg.commit.txn {
		return errors.New("sluice: ConsumeTransformProduce: the group consumer must use CommitTransactional, or it would commit offsets outside the transactions")
	}
	aborts := 0
	for {
		recs, err := g.Poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		err = transformOnce(ctx, g, tp, recs, transform)
		if err == nil {
			aborts = 0
			continue
		}
		if errors.Is(err, ErrTransactionFatal) {
			return err
		}
		var terr transformError
		isTransform := errors.As(err, &terr)
		if !isTransform && !errors.Is(err, ErrTransactionAbortable) && ctx.Err() != nil {
			// Stopped while ending the transaction: the next instance
			// aborts what is open, or finds it committed.
			return nil
		}
		if !isTransform && !errors.Is(err, ErrTransactionAbortable) {
			return err
		}
		actx := context.WithoutCancel(ctx)
		if aerr := tp.Abort(actx); aerr != nil {
			return errors.Join(err, aerr)
		}
		if rerr := g.RewindToCommitted(actx); rerr != nil {
			return errors.Join(err, rerr)
		}
		if isTransform {
			return terr.err
		}
		aborts++
		g.c.logger.Warn("transaction aborted; consuming again from the committed offsets", "group", g.group, "transactional_id", tp.id, "err", err)
		if serr := clock.Sleep(ctx, backoff(aborts)); serr != nil {
			return nil
		}
	}
}

// transformError carries an error of the caller's transform.
type transformError struct{ err error }

func (e transformError) Error() string { return fmt.Sprintf("transform: %v", e.err) }
func (e transformError) Unwrap() error { return e.err }

// transformOnce is one transaction of ConsumeTransformProduce.
func transformOnce(ctx context.Context, g *GroupConsumer, tp *TransactionalProducer, recs []*Record, transform func(context.Context, *Record) ([]*Record, error)) error {
	if err := tp.Begin(); err != nil {
		return err
	}
	for _, r := range recs {
		outs, err := transform(ctx, r)
		if err != nil {
			return transformError{err}
		}
		for _, o := range outs {
			tp.Produce(ctx, o, nil) // a failure fails the commit
		}
	}
	if err := tp.SendOffsets(ctx, g.Member(), NextOffsets(recs)); err != nil {
		return err
	}
	return tp.Commit(ctx)
}
