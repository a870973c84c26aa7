package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/endpoint"
)

// Errors of a TransactionalProducer. The errors of Begin, SendOffsets,
// Commit and Abort, and of Produce when the transaction cannot take a
// record, match one of ErrTransactionAbortable (abort the transaction and
// run it again), ErrTransactionFatal (the producer is closed;
// ErrProducerFenced comes with it when fenced) or ErrTransactionState (a
// call out of order: nothing happened), except for an end whose outcome is
// unknown (see Commit), ErrProducerClosed after Close, and bad input
// (InvalidArgument). A record's own failure reaches its callback as a
// *DeliveryError, as from a Producer, and makes the transaction abortable.
var (
	// ErrTransactionAbortable: the transaction cannot commit (a record
	// failed, its offsets were refused, the coordinator aborted it after
	// its timeout). Call Abort, then run the transaction again from
	// Begin; the producer stays usable.
	ErrTransactionAbortable = errors.New("transaction must be aborted")
	// ErrTransactionFatal: the transactional producer cannot go on and is
	// closed: another instance took over its transactional id
	// (ErrProducerFenced, which comes with it), or the coordinator
	// refused the producer for good. Make a new one to go on; what this
	// one's open transaction wrote is aborted (by the new instance's
	// NewTransactionalProducer, or by the coordinator at its timeout).
	ErrTransactionFatal = errors.New("transactional producer cannot continue")
	// ErrTransactionState: the call does not fit the producer's state (a
	// Begin while a transaction is open, a Commit without one, a Produce
	// outside one, any call while Commit or Abort runs). Nothing was done.
	ErrTransactionState = errors.New("transactional producer: call out of order")
	// ErrTransactionAborted: the record was still buffered when its
	// transaction aborted; it was not written.
	ErrTransactionAborted = errors.New("transaction aborted")
)

// WithTransactionTimeout sets how long a transaction of a transactional
// producer may stay open before its coordinator aborts it (default 60 s,
// at most the plan's maximum; Kafka's transaction.timeout.ms). After a
// timeout the producer's next call fails with ErrTransactionAbortable.
func WithTransactionTimeout(d time.Duration) ProducerOption {
	return func(c *producerConfig) { c.txnTimeout = d }
}

type txnPhase int

const (
	txnReady   txnPhase = iota // no transaction open
	txnOpen                    // Begin was called
	txnFailed                  // the open transaction must abort (txnErr)
	txnEnding                  // Commit or Abort runs
	txnUnknown                 // an end's outcome is unknown: retry that end (pendingCommit)
	txnFatal                   // fenced or refused for good: closed
	txnClosed
)

// TransactionalProducer writes records to any partitions of any topics,
// and optionally a consumer group's offsets, in transactions: a
// transaction's records and offsets all become visible (to ReadCommitted
// consumers, and as the group's committed offsets) when Commit returns
// nil, or none of them ever does. It is idempotent and acks=all, with the
// batching, retries and ordering of a Producer (its ProducerOptions apply,
// except acks and idempotence).
//
// One transaction is open at a time: Begin, then Produce (from any number
// of goroutines) and SendOffsets, then Commit or Abort. Commit first
// waits for every record of the transaction; if one failed, the commit
// does not happen and Commit returns ErrTransactionAbortable: Abort and
// run the transaction again. Every end of a transaction moves the
// producer to a new epoch (KIP-890), so a late write of an ended
// transaction is refused by the cluster, never added to the next one.
//
// A transactional id names one logical producer across restarts:
// NewTransactionalProducer with the same id fences the previous instance
// (its calls fail with ErrProducerFenced, and it closes) and aborts the
// transaction it left open. Give each concurrent producer its own id (for
// consume-transform-produce, one per input partition set or per
// instance).
type TransactionalProducer struct {
	p     *Producer
	c     *Client
	id    string
	coord txnCoordinator

	mu            sync.Mutex
	phase         txnPhase
	txnErr        error // first failure of the open transaction
	fatalErr      error
	touched       bool // something of the open transaction may have reached the cluster
	pendingCommit bool // with txnUnknown: the end that must be retried
	producing     int  // Produce calls between their state check and their enqueue
	idle          chan struct{}
}

// NewTransactionalProducer makes a transactional producer for
// transactionalID (scoped to the client's tenant): it asks the id's
// transaction coordinator for a producer id and epoch, which fences every
// older instance with that id and aborts (or finishes) a transaction one
// left open. It retries while the coordinator is unavailable or still
// ending the previous transaction, with backoff, up to 40 attempts (about
// half a minute) within ctx.
func (c *Client) NewTransactionalProducer(ctx context.Context, transactionalID string, opts ...ProducerOption) (*TransactionalProducer, error) {
	if transactionalID == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("transactional id: must not be empty"))
	}
	cfg := producerDefaults(opts)
	switch {
	case cfg.acks != AcksAll:
		return nil, fmt.Errorf("sluice: a transactional producer needs acks=all (acks is %s)", cfg.acks)
	case cfg.idempotence != nil && !*cfg.idempotence:
		return nil, errors.New("sluice: a transactional producer is idempotent: WithIdempotence(false) does not apply")
	case cfg.txnTimeout < 0:
		return nil, fmt.Errorf("sluice: transaction timeout %s: must not be negative", cfg.txnTimeout)
	}
	p, err := c.newProducer(cfg)
	if err != nil {
		return nil, err
	}
	p.txnID = transactionalID
	tp := &TransactionalProducer{p: p, c: c, id: transactionalID, coord: txnCoordinator{c: c, id: transactionalID}, idle: make(chan struct{})}
	pid, epoch, err := tp.coord.initProducerID(ctx, cfg.txnTimeout)
	if err != nil {
		return nil, err
	}
	p.pid, p.epoch = pid, epoch
	return tp, nil
}

// TransactionalID returns the producer's transactional id.
func (tp *TransactionalProducer) TransactionalID() string { return tp.id }

// ProducerID returns the producer id and epoch the current (or next)
// transaction's batches carry.
func (tp *TransactionalProducer) ProducerID() (int64, int16) {
	tp.p.mu.Lock()
	defer tp.p.mu.Unlock()
	return tp.p.pid, tp.p.epoch
}

// stateErrLocked is the error for a call that needs an open transaction
// (or, with ready, no transaction) in the current phase; nil when it fits.
func (tp *TransactionalProducer) stateErrLocked(call string, want txnPhase) error {
	if tp.phase == want {
		return nil
	}
	switch tp.phase {
	case txnFatal:
		return tp.fatalErr
	case txnClosed:
		return fmt.Errorf("%w: %s after Close", ErrProducerClosed, call)
	case txnFailed:
		if want == txnOpen {
			return tp.txnErr
		}
		return fmt.Errorf("%w: %s: the open transaction failed (%v): call Abort first", ErrTransactionState, call, tp.txnErr)
	case txnEnding:
		return fmt.Errorf("%w: %s while Commit or Abort runs", ErrTransactionState, call)
	case txnUnknown:
		end := "Abort"
		if tp.pendingCommit {
			end = "Commit"
		}
		return fmt.Errorf("%w: %s: the last %s's outcome is unknown: call %s again", ErrTransactionState, call, end, end)
	case txnOpen:
		return fmt.Errorf("%w: %s: a transaction is open: Commit or Abort it first", ErrTransactionState, call)
	}
	return fmt.Errorf("%w: %s: no transaction is open: call Begin first", ErrTransactionState, call)
}

// Begin opens a transaction. It is local: the cluster learns of the
// transaction with its first record or offsets.
func (tp *TransactionalProducer) Begin() error {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if err := tp.stateErrLocked("Begin", txnReady); err != nil {
		return err
	}
	tp.phase, tp.txnErr, tp.touched = txnOpen, nil, false
	return nil
}

// Produce buffers r for sending in the open transaction and calls cb
// (which may be nil) exactly once with its fate, as Producer.Produce does.
// A record that fails makes the transaction fail: Commit then returns
// ErrTransactionAbortable. Without an open transaction cb gets a
// *DeliveryError wrapping ErrTransactionState (or the producer's fatal
// error), and the record is not sent.
func (tp *TransactionalProducer) Produce(ctx context.Context, r *Record, cb func(*Record, error)) {
	if cb == nil {
		cb = func(*Record, error) {}
	}
	tp.mu.Lock()
	if err := tp.stateErrLocked("Produce", txnOpen); err != nil {
		tp.mu.Unlock()
		cb(r, &DeliveryError{Err: err})
		return
	}
	tp.producing++
	tp.touched = true
	tp.mu.Unlock()
	defer tp.doneProducing()
	tp.p.Produce(ctx, r, func(r *Record, err error) {
		if err != nil {
			tp.fail(err)
		}
		cb(r, err)
	})
}

// ProduceSync produces records in the open transaction and waits for all
// of them, as Producer.ProduceSync does.
func (tp *TransactionalProducer) ProduceSync(ctx context.Context, rs ...*Record) error {
	return tp.p.produceSync(ctx, tp.Produce, rs)
}

func (tp *TransactionalProducer) doneProducing() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.producing--; tp.producing == 0 {
		close(tp.idle)
		tp.idle = make(chan struct{})
	}
}

// waitProducingLocked waits (releasing tp.mu) until no Produce call is
// between its state check and its enqueue, so that the phase the caller
// set is seen by every later record.
func (tp *TransactionalProducer) waitProducingLocked() {
	for tp.producing > 0 {
		ch := tp.idle
		tp.mu.Unlock()
		<-ch
		tp.mu.Lock()
	}
}

// fail records a failure of the open transaction: fatal ones close the
// producer, others make the transaction abortable.
func (tp *TransactionalProducer) fail(err error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if errors.Is(err, ErrTransactionFatal) {
		tp.setFatalLocked(err)
		return
	}
	if tp.txnErr == nil {
		if !errors.Is(err, ErrTransactionAbortable) {
			err = fmt.Errorf("%w: %w", ErrTransactionAbortable, err)
		}
		tp.txnErr = err
	}
	if tp.phase == txnOpen {
		tp.phase = txnFailed
	}
}

// setFatalLocked closes the producer for good after err.
func (tp *TransactionalProducer) setFatalLocked(err error) {
	if tp.phase == txnFatal || tp.phase == txnClosed {
		return
	}
	tp.phase, tp.fatalErr = txnFatal, err
	tp.c.logger.Warn("transactional producer stopped", "transactional_id", tp.id, "err", err)
	// Nothing more of this instance may reach the cluster: fail what is
	// buffered, and stop (in the background: a callback may be running
	// this).
	tp.p.poisonAll(err)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // give up at once on whatever is still in flight
		_ = tp.p.Close(ctx)
	}()
}

// SendOffsets commits offsets of group in the open transaction (Kafka's
// sendOffsetsToTransaction, KIP-447): they become the group's committed
// offsets when the transaction commits, and are dropped when it aborts.
// offsets are the next offsets to read (a processed record's offset + 1;
// NextOffsets computes them); member is the consumer's membership
// (GroupConsumer.Member), so that a member that lost its partitions is
// refused (ErrTransactionAbortable) rather than commit over their new
// owner. A consumer whose offsets are committed this way uses
// CommitTransactional. Any failure makes the transaction abortable,
// except a fatal one.
func (tp *TransactionalProducer) SendOffsets(ctx context.Context, member GroupMember, offsets []PartitionOffset) error {
	tp.mu.Lock()
	if err := tp.stateErrLocked("SendOffsets", txnOpen); err != nil {
		tp.mu.Unlock()
		return err
	}
	if member.Group == "" {
		tp.mu.Unlock()
		return connect.NewError(connect.CodeInvalidArgument, errors.New("group: must not be empty"))
	}
	if len(offsets) == 0 {
		tp.mu.Unlock()
		return nil
	}
	tp.touched = true
	tp.mu.Unlock()
	pid, epoch := tp.ProducerID()
	req := &sluicev1.TxnCommitOffsetsRequest{
		Group: member.Group, TransactionalId: tp.id, ProducerId: pid, ProducerEpoch: int32(epoch),
		MemberId: member.MemberID, MemberEpoch: member.MemberEpoch, InstanceId: member.InstanceID,
	}
	for _, o := range offsets {
		req.Offsets = append(req.Offsets, &sluicev1.PartitionOffset{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, LeaderEpoch: o.LeaderEpoch})
	}
	err := tp.coord.txnCommitOffsets(ctx, req)
	if err != nil {
		err = classifyTxnErr(err)
		if !errors.Is(err, ErrTransactionFatal) && !errors.Is(err, ErrTransactionAbortable) {
			// The offsets may or may not have joined the transaction,
			// or were refused by the group: it cannot commit as is.
			err = fmt.Errorf("%w: commit offsets of group %q in the transaction: %w", ErrTransactionAbortable, member.Group, err)
		}
		tp.fail(err)
	}
	return err
}

// Commit commits the open transaction. It waits for every record produced
// in it first (as Flush does): if one failed, nothing is committed and
// Commit returns an error wrapping ErrTransactionAbortable (call Abort).
// Otherwise the coordinator writes commit markers to every partition and
// group of the transaction, and Commit returns nil once all of them have
// theirs: the records and offsets are then visible to ReadCommitted
// consumers. Errors: ErrTransactionAbortable (Abort and run the
// transaction again), ErrTransactionFatal (the producer is closed), or,
// when ctx ends before the coordinator answered (or the end failed
// otherwise, not retriably), an error saying the outcome is unknown:
// then only Commit may be called again (it retries the same end and
// tells the outcome).
func (tp *TransactionalProducer) Commit(ctx context.Context) error {
	return tp.end(ctx, true)
}

// Abort aborts the open transaction (also one that failed): the records
// still buffered fail with ErrTransactionAborted, the coordinator writes
// abort markers to every partition and group of the transaction, and
// nothing of it is ever visible to ReadCommitted consumers. The producer
// is then ready for Begin. Abort returns ErrProducerFenced when another
// instance took over meanwhile (also the cause of a record failing with
// a fenced epoch), and ctx's error when it ended before the coordinator
// answered: call Abort again then.
func (tp *TransactionalProducer) Abort(ctx context.Context) error {
	return tp.end(ctx, false)
}

func (tp *TransactionalProducer) end(ctx context.Context, commit bool) error {
	call := "Abort"
	if commit {
		call = "Commit"
	}
	tp.mu.Lock()
	switch {
	case tp.phase == txnUnknown && tp.pendingCommit == commit:
		// Retry the end whose outcome is unknown.
	case tp.phase == txnFailed && !commit:
	case commit && tp.phase == txnFailed:
		err := tp.txnErr
		tp.mu.Unlock()
		return err
	default:
		if err := tp.stateErrLocked(call, txnOpen); err != nil {
			tp.mu.Unlock()
			return err
		}
	}
	retry := tp.phase == txnUnknown
	tp.phase = txnEnding
	tp.waitProducingLocked()
	tp.mu.Unlock()

	if !retry {
		if !commit {
			tp.p.poisonAll(fmt.Errorf("%w: transactional id %q", ErrTransactionAborted, tp.id))
		} else if err := tp.p.Flush(ctx); err != nil {
			tp.reopen(commit)
			return err
		}
		if err := tp.p.waitIdle(ctx); err != nil {
			tp.reopen(commit)
			return err
		}
	}

	tp.mu.Lock()
	if tp.phase == txnFatal {
		err := tp.fatalErr
		tp.mu.Unlock()
		return err
	}
	if commit && tp.txnErr != nil {
		tp.phase = txnFailed
		err := fmt.Errorf("%w: not committed: %w", ErrTransactionAbortable, tp.txnErr)
		tp.mu.Unlock()
		return err
	}
	touched := tp.touched
	tp.mu.Unlock()

	if !touched {
		// Nothing of the transaction left this process: there is
		// nothing to end at the coordinator.
		tp.reset(0, 0, false)
		return nil
	}
	pid, epoch := tp.ProducerID()
	npid, nepoch, err := tp.coord.endTransaction(ctx, pid, epoch, commit)
	if err == nil {
		tp.reset(npid, nepoch, true)
		return nil
	}
	err = classifyTxnErr(err)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch {
	case errors.Is(err, ErrTransactionFatal):
		tp.setFatalLocked(err)
	case errors.Is(err, ErrTransactionAbortable) && commit:
		// The coordinator aborted it (its timeout): abort is the way on.
		tp.phase, tp.txnErr = txnFailed, err
	default:
		// The end may or may not have happened: only the same end,
		// retried, can tell (the coordinator answers a retry alike).
		tp.phase, tp.pendingCommit = txnUnknown, commit
		err = fmt.Errorf("sluice: %s of transactional id %q: outcome unknown, call %s again: %w", call, tp.id, call, err)
	}
	return err
}

// reopen goes back to the open transaction after an end gave up before
// reaching the coordinator (ctx ended while records were pending): open
// after a Commit, failed after an Abort (its records fail: abort again).
func (tp *TransactionalProducer) reopen(commit bool) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.phase != txnEnding {
		return
	}
	if !commit && tp.txnErr == nil {
		tp.txnErr = fmt.Errorf("%w: an Abort gave up before it ended: call Abort again", ErrTransactionAbortable)
	}
	tp.phase = txnOpen
	if tp.txnErr != nil {
		tp.phase = txnFailed
	}
}

// reset makes the producer ready for the next transaction, with the
// producer id and epoch the coordinator gave (when bump).
func (tp *TransactionalProducer) reset(pid int64, epoch int16, bump bool) {
	if bump {
		tp.p.resetTxn(pid, epoch)
	} else {
		cur, e := tp.ProducerID()
		tp.p.resetTxn(cur, e)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.phase == txnEnding {
		tp.phase = txnReady
	}
	tp.txnErr, tp.touched, tp.pendingCommit = nil, false, false
}

// Close aborts a transaction left open (waiting up to ctx for that) and
// stops the producer. A transaction that ctx does not leave time to abort
// is aborted by the coordinator at its timeout, or by the next instance
// with the same transactional id.
func (tp *TransactionalProducer) Close(ctx context.Context) error {
	tp.mu.Lock()
	phase := tp.phase
	tp.mu.Unlock()
	var err error
	if phase == txnOpen || phase == txnFailed || (phase == txnUnknown && !tp.pendingCommit) {
		err = tp.Abort(ctx)
	}
	tp.mu.Lock()
	fatal := tp.phase == txnFatal
	if !fatal {
		tp.phase = txnClosed
	}
	tp.mu.Unlock()
	cerr := tp.p.Close(ctx)
	if fatal {
		return nil // closed when it became fatal; its calls returned why
	}
	return errors.Join(err, cerr)
}

// GroupMember names a member of a consumer group, for SendOffsets.
type GroupMember struct {
	Group       string
	MemberID    string
	MemberEpoch int32
	InstanceID  string
}

// PartitionOffset is an offset of a partition to commit: the next one to
// read.
type PartitionOffset struct {
	Topic       string
	Partition   int32
	Offset      int64
	LeaderEpoch int32 // of the record before Offset, as consumed; 0 when unknown
}

// NextOffsets returns, per partition of recs, the offset after its last
// record: what to commit once recs are processed.
func NextOffsets(recs []*Record) []PartitionOffset {
	var out []PartitionOffset
	at := map[TopicPartition]int{}
	for _, r := range recs {
		tp := TopicPartition{r.Topic, r.Partition}
		i, ok := at[tp]
		if !ok {
			at[tp] = len(out)
			out = append(out, PartitionOffset{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset + 1, LeaderEpoch: r.LeaderEpoch})
			continue
		}
		if r.Offset+1 > out[i].Offset {
			out[i].Offset, out[i].LeaderEpoch = r.Offset+1, r.LeaderEpoch
		}
	}
	return out
}

// ---- errors ----

// txnErrorOf returns the TransactionError detail of err, if any.
func txnErrorOf(err error) *sluicev1.TransactionError {
	te, _ := ErrorDetail[*sluicev1.TransactionError](err)
	return te
}

// classifyTxnErr wraps a server refusal of a transactional call with the
// sentinel its TransactionError reason calls for: fatal (fenced, unknown
// id, bad epoch or state, bad timeout) or abortable. Errors without that
// detail, and retriable ones, come back as they are.
func classifyTxnErr(err error) error {
	if err == nil || errors.Is(err, ErrTransactionFatal) || errors.Is(err, ErrTransactionAbortable) {
		return err
	}
	te := txnErrorOf(err)
	if te == nil {
		if ge, ok := ErrorDetail[*sluicev1.GroupError](err); ok && ge.GetReason() != 0 {
			// The group refused the member (it lost its partitions, or
			// another instance took over): the offsets cannot commit.
			return fmt.Errorf("%w: the group refused the offsets: %w", ErrTransactionAbortable, err)
		}
		return err
	}
	switch te.GetReason() {
	case sluicev1.TransactionError_REASON_PRODUCER_FENCED:
		return fmt.Errorf("%w (%w): another instance took over the transactional id: %w", ErrProducerFenced, ErrTransactionFatal, err)
	case sluicev1.TransactionError_REASON_TRANSACTION_ABORTABLE:
		return fmt.Errorf("%w: %w", ErrTransactionAbortable, err)
	case sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS:
		return err // retriable
	}
	return fmt.Errorf("%w: %w", ErrTransactionFatal, err)
}

// txnRetriable reports whether a transactional call may succeed if sent
// again: routing and availability errors, and the previous transaction
// still writing its markers; never one that says what the producer must
// do.
func txnRetriable(err error) bool {
	if te := txnErrorOf(err); te != nil {
		return te.GetReason() == sluicev1.TransactionError_REASON_CONCURRENT_TRANSACTIONS
	}
	if ErrorDetailReason(err) != 0 {
		return false // a GroupError: the group's answer
	}
	return retriable(err) || notLeaderOf(err) != nil
}

// ---- routing ----

// txnCoordinator sends a transactional id's calls to its coordinator (the
// leader of its partition of __transaction_state) and a group's offsets to
// the group's coordinator, finding them with FindTransactionCoordinator
// and FindCoordinator and sending with Sluice-No-Forward, as a
// GroupConsumer does; NotLeader and Unavailable send it looking again.
type txnCoordinator struct {
	c  *Client
	id string

	mu     sync.Mutex
	addr   string            // the transaction coordinator's; "" when unknown
	groups map[string]string // group → its coordinator's address
}

// maxTxnAttempts bounds the retries of one transactional call (with
// backoff up to 1 s each, about half a minute), within its ctx.
const maxTxnAttempts = 40

// coordinatorAddr returns the transaction coordinator's address, finding
// it when unknown.
func (tc *txnCoordinator) coordinatorAddr(ctx context.Context) (string, error) {
	tc.mu.Lock()
	addr := tc.addr
	tc.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	var last error
	for _, b := range tc.c.brokerList() {
		ts := sluicev1connect.NewTransactionServiceClient(tc.c.hc, endpoint.URL(b.address, tc.c.scheme), connect.WithInterceptors(tc.c.bearer()))
		res, err := ts.FindTransactionCoordinator(ctx, connect.NewRequest(&sluicev1.FindTransactionCoordinatorRequest{TransactionalId: tc.id}))
		if err = normalize(ctx, err); err != nil {
			last = err
			if !txnRetriable(err) {
				return "", err
			}
			continue
		}
		tc.mu.Lock()
		tc.addr = res.Msg.GetAddress()
		tc.mu.Unlock()
		return res.Msg.GetAddress(), nil
	}
	if last == nil {
		last = connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
	}
	return "", last
}

// observe updates the coordinator's address after err: a NotLeader detail
// names the new one; Unavailable forgets it.
func (tc *txnCoordinator) observe(err error) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if nl := notLeaderOf(err); nl != nil {
		tc.addr = nl.GetLeaderAddress()
		return
	}
	if connect.CodeOf(err) == connect.CodeUnavailable && txnErrorOf(err) == nil {
		tc.addr = ""
	}
}

// call runs fn against the transaction coordinator's address, retrying
// retriable errors with backoff while ctx lasts.
func (tc *txnCoordinator) call(ctx context.Context, what string, fn func(addr string) error) error {
	var last error
	for attempt := 1; attempt <= maxTxnAttempts; attempt++ {
		addr, err := tc.coordinatorAddr(ctx)
		if err == nil {
			err = normalize(ctx, fn(addr))
			if err == nil {
				return nil
			}
			tc.observe(err)
		}
		if !txnRetriable(err) {
			return fmt.Errorf("sluice: %s: %w", what, err)
		}
		last = err
		tc.c.logger.Debug("transactional call failed; retrying", "call", what, "transactional_id", tc.id, "err", err)
		if throttled(err) {
			attempt-- // throttling is waited out, not counted
		}
		if serr := clock.Sleep(ctx, retryWait(err, max(attempt, 1))); serr != nil {
			return fmt.Errorf("sluice: %s: %w (last error: %w)", what, serr, last)
		}
	}
	return fmt.Errorf("sluice: %s: gave up after %d attempts: %w", what, maxTxnAttempts, last)
}

func (tc *txnCoordinator) recordClient(addr string) sluicev1connect.RecordServiceClient {
	return sluicev1connect.NewRecordServiceClient(tc.c.hc, endpoint.URL(addr, tc.c.scheme), connect.WithInterceptors(tc.c.bearer(), noForward{}))
}

func (tc *txnCoordinator) txnClient(addr string) sluicev1connect.TransactionServiceClient {
	return sluicev1connect.NewTransactionServiceClient(tc.c.hc, endpoint.URL(addr, tc.c.scheme), connect.WithInterceptors(tc.c.bearer(), noForward{}))
}

// initProducerID asks the coordinator for the id's producer id and epoch.
func (tc *txnCoordinator) initProducerID(ctx context.Context, timeout time.Duration) (int64, int16, error) {
	var res *connect.Response[sluicev1.InitProducerIdResponse]
	err := tc.call(ctx, fmt.Sprintf("init transactional id %q", tc.id), func(addr string) error {
		var err error
		res, err = tc.recordClient(addr).InitProducerId(ctx, connect.NewRequest(&sluicev1.InitProducerIdRequest{
			TransactionalId: tc.id, TransactionTimeoutMs: timeout.Milliseconds(),
		}))
		return err
	})
	if err != nil {
		return 0, 0, classifyTxnErr(err)
	}
	return res.Msg.GetProducerId(), int16(res.Msg.GetProducerEpoch()), nil
}

// endTransaction commits or aborts the producer's transaction and returns
// the producer id and epoch of the next one.
func (tc *txnCoordinator) endTransaction(ctx context.Context, pid int64, epoch int16, commit bool) (int64, int16, error) {
	what := "abort"
	if commit {
		what = "commit"
	}
	var res *connect.Response[sluicev1.EndTransactionResponse]
	err := tc.call(ctx, fmt.Sprintf("%s the transaction of %q", what, tc.id), func(addr string) error {
		var err error
		res, err = tc.txnClient(addr).EndTransaction(ctx, connect.NewRequest(&sluicev1.EndTransactionRequest{
			TransactionalId: tc.id, ProducerId: pid, ProducerEpoch: int32(epoch), Commit: commit,
		}))
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return res.Msg.GetProducerId(), int16(res.Msg.GetProducerEpoch()), nil
}

// groupAddr returns the address of group's coordinator.
func (tc *txnCoordinator) groupAddr(ctx context.Context, group string) (string, error) {
	tc.mu.Lock()
	addr := tc.groups[group]
	tc.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	var last error
	for _, b := range tc.c.brokerList() {
		gs := sluicev1connect.NewGroupServiceClient(tc.c.hc, endpoint.URL(b.address, tc.c.scheme), connect.WithInterceptors(tc.c.bearer()))
		res, err := gs.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: group}))
		if err = normalize(ctx, err); err != nil {
			last = err
			if !retriable(err) {
				return "", err
			}
			continue
		}
		tc.mu.Lock()
		if tc.groups == nil {
			tc.groups = map[string]string{}
		}
		tc.groups[group] = res.Msg.GetAddress()
		tc.mu.Unlock()
		return res.Msg.GetAddress(), nil
	}
	if last == nil {
		last = connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
	}
	return "", last
}

// txnCommitOffsets sends req to its group's coordinator, retrying
// routing and availability errors.
func (tc *txnCoordinator) txnCommitOffsets(ctx context.Context, req *sluicev1.TxnCommitOffsetsRequest) error {
	var last error
	for attempt := 1; attempt <= maxTxnAttempts; attempt++ {
		addr, err := tc.groupAddr(ctx, req.GetGroup())
		if err == nil {
			gs := sluicev1connect.NewGroupServiceClient(tc.c.hc, endpoint.URL(addr, tc.c.scheme), connect.WithInterceptors(tc.c.bearer(), noForward{}))
			_, err = gs.TxnCommitOffsets(ctx, connect.NewRequest(req))
			if err = normalize(ctx, err); err == nil {
				return nil
			}
			if nl := notLeaderOf(err); nl != nil || (connect.CodeOf(err) == connect.CodeUnavailable && txnErrorOf(err) == nil) {
				tc.mu.Lock()
				delete(tc.groups, req.GetGroup())
				if nl != nil && nl.GetLeaderAddress() != "" && tc.groups != nil {
					tc.groups[req.GetGroup()] = nl.GetLeaderAddress()
				}
				tc.mu.Unlock()
			}
		}
		if !txnRetriable(err) {
			return err
		}
		last = err
		if throttled(err) {
			attempt-- // throttling is waited out, not counted
		}
		if serr := clock.Sleep(ctx, retryWait(err, max(attempt, 1))); serr != nil {
			return fmt.Errorf("%w (last error: %w)", serr, last)
		}
	}
	return fmt.Errorf("gave up after %d attempts: %w", maxTxnAttempts, last)
}

// TransactionAdmin returns a TransactionService client for administration
// (ListTransactions, DescribeTransaction): it talks to one of the brokers,
// which forwards each call to the transactional id's coordinator.
func (c *Client) TransactionAdmin() (sluicev1connect.TransactionServiceClient, error) {
	bs := c.brokerList()
	if len(bs) == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
	}
	return sluicev1connect.NewTransactionServiceClient(c.hc, endpoint.URL(bs[0].address, c.scheme), connect.WithInterceptors(c.bearer())), nil
}
