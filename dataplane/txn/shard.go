package txn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicemq/sluice/dataplane/runtime"
)

// Shard is the transaction coordinator's state machine on one
// transaction-state partition: the transactional ids' states, as their
// records hold them. It does no I/O: each operation returns the record to
// write, the markers to write (an effect) and the answer, and Replay
// applies a written record (dataplane/runtime hosts it; Coordinator is the
// hosted shard's API). Not safe for concurrent use: the runtime serialises
// its calls.
type Shard struct {
	cfg  ShardConfig
	txns map[Key]*Transaction
}

// ShardConfig configures a Shard.
type ShardConfig struct {
	// LeaderEpoch is the epoch of the partition's leadership the shard
	// serves: its markers carry it as their coordinator epoch.
	LeaderEpoch int32
	// DefaultTimeout is the transaction timeout of an InitProducer that
	// asks none (60 s when zero); MaxTimeout caps what one may ask (15
	// min when zero).
	DefaultTimeout, MaxTimeout time.Duration
	// IdleTimeout: a transactional id with no transaction open and no
	// change for that long is forgotten (a tombstone); zero never is.
	IdleTimeout time.Duration
	// Bounds are the most partitions and groups one transaction of the
	// tenant may hold (nil, or a zero field: no bound on it).
	Bounds func(tenantID string) Bounds
	// Metrics: nil counts nothing.
	Metrics *Metrics
}

// NewShard returns an empty shard (a partition with no records).
func NewShard(cfg ShardConfig) *Shard {
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = time.Minute
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 15 * time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = &Metrics{}
	}
	return &Shard{cfg: cfg, txns: map[Key]*Transaction{}}
}

// Producer is a producer id and epoch, as InitProducer and EndTransaction
// answer them.
type Producer struct {
	ID    int64
	Epoch int16
	// again: the operation ended the id's open transaction (its answer
	// waits for the markers); run it again for its own answer.
	again bool
}

// errNeedProducerID: the operation needs a new producer id; allocate one
// and run it again with it.
var errNeedProducerID = errors.New("a new producer id is needed")

// opKey is the runtime key of a transactional id's operations.
func opKey(k Key) string { return k.Tenant + "\x00" + k.TransactionalID }

// Replay applies one record of the partition: an id's state, or a
// tombstone forgetting it.
func (s *Shard) Replay(_ int64, r runtime.Record) error {
	k, t, err := decodeRecord(r)
	if err != nil {
		return err
	}
	if t == nil {
		delete(s.txns, k)
		return nil
	}
	s.txns[k] = t
	return nil
}

// Loaded resumes after a load: the markers of every end left unfinished
// (Prepare*), and every id's timer.
func (s *Shard) Loaded(now time.Time) runtime.Update {
	var u runtime.Update
	for k, t := range s.txns {
		if t.State.preparing() {
			u.Effects = append(u.Effects, s.finishEffect(k, t, false, time.Time{}))
		}
		if tm, ok := s.timer(k, t); ok {
			u.Timers = append(u.Timers, tm)
		}
	}
	return u
}

// record is the Update writing t as k's state (a tombstone when nil),
// with the timer its state calls for.
func (s *Shard) record(k Key, t *Transaction) (runtime.Update, error) {
	r, err := encodeRecord(k, t)
	if err != nil {
		return runtime.Update{}, err
	}
	u := runtime.Update{Records: []runtime.Record{r}}
	if t != nil {
		if tm, ok := s.timer(k, t); ok {
			u.Timers = []runtime.Timer{tm}
		}
	}
	return u, nil
}

// timer is k's timer in state t: its transaction's timeout while Ongoing,
// its idle expiry while Empty or Complete*.
func (s *Shard) timer(k Key, t *Transaction) (runtime.Timer, bool) {
	var at time.Time
	switch {
	case t.State == StateOngoing:
		at = t.StartTime.Add(t.Timeout)
	case s.cfg.IdleTimeout > 0 && (t.State == StateEmpty || t.State.complete()):
		at = t.UpdateTime.Add(s.cfg.IdleTimeout)
	default:
		return runtime.Timer{}, false
	}
	// Past it, not at it: the first millisecond after.
	return runtime.Timer{Key: opKey(k), At: at.Add(time.Millisecond), Op: func(now time.Time) (runtime.Update, error) { return s.expire(k, now) }}, true
}

// expire is k's timer: it aborts a transaction Ongoing past its timeout
// (EndedByTimeout: its producer's next call is told
// ErrTransactionAbortable) and forgets an id idle for IdleTimeout; else it
// arms the timer again.
func (s *Shard) expire(k Key, now time.Time) (runtime.Update, error) {
	t := s.txns[k]
	switch {
	case t == nil:
		return runtime.Update{}, nil
	case t.State == StateOngoing && now.Sub(t.StartTime) > t.Timeout:
		u, err := s.end(k, t, false, EndedByTimeout, BumpEpoch, 0, now)
		if err != nil {
			return runtime.Update{}, fmt.Errorf("abort timed-out transaction %q: %w", k.TransactionalID, err)
		}
		written := u.Written
		u.Written = func() {
			written()
			inc(s.cfg.Metrics.TimedOut)
		}
		return u, nil
	case s.cfg.IdleTimeout > 0 && (t.State == StateEmpty || t.State.complete()) && now.Sub(t.UpdateTime) > s.cfg.IdleTimeout:
		return s.record(k, nil)
	}
	if tm, ok := s.timer(k, t); ok {
		return runtime.Update{Timers: []runtime.Timer{tm}}, nil
	}
	return runtime.Update{}, nil
}

func (s *Shard) timeout(d time.Duration) (time.Duration, error) {
	if d == 0 {
		d = s.cfg.DefaultTimeout
	}
	if d < time.Millisecond || d > s.cfg.MaxTimeout {
		return 0, fmt.Errorf("%w: %v, allowed 1ms to %v", ErrInvalidTimeout, d, s.cfg.MaxTimeout)
	}
	return d, nil
}

// pending is the error of an operation on an id whose end is writing its
// markers: the runtime waits for them (or answers their failure).
func pending(k Key, t *Transaction) error {
	return fmt.Errorf("%w: transactional id %q is %v: %w", ErrConcurrentTransactions, k.TransactionalID, t.State, runtime.ErrEffectPending)
}

// InitProducer gives the transactional id's producer incarnation its
// producer id and epoch, fencing every older epoch: a new id gets a new
// producer id at epoch 0 (pid, allocated by the caller: with pid < 0 it
// answers errNeedProducerID); a known one first has an end in progress
// finished (ErrEffectPending: the runtime waits for its markers) and an
// open transaction aborted (its answer has again set: run it once more),
// then gets its epoch bumped, or a new producer id at epoch 0 when the
// bump would reach math.MaxInt16.
//
// With expect, the producer id and epoch the caller has (Kafka's
// InitProducerId v3+, KIP-360: a producer recovering from an abortable
// error, as a timeout's abort, asks for its next epoch), a known id's
// current producer must be it, and is bumped as above; if its epoch was
// bumped already, by a timeout's abort or by the abort of its open
// transaction (this same init's first pass, or a retry of it), the
// current epoch is its answer, with nothing written, as Kafka answers;
// any other producer is fenced (ErrProducerFenced), so that a zombie
// recovering cannot take the id back from its newer incarnation.
func (s *Shard) InitProducer(k Key, timeout time.Duration, expect *Producer, pid int64, now time.Time) (runtime.Result[Producer], error) {
	var none runtime.Result[Producer]
	timeout, err := s.timeout(timeout)
	if err != nil {
		return none, err
	}
	t := s.txns[k]
	n := &Transaction{Timeout: timeout, State: StateEmpty, LastProducerID: -1, LastEpoch: -1}
	if t != nil {
		if t.State.preparing() {
			return none, pending(k, t)
		}
		if expect != nil {
			switch {
			case expect.ID == t.ProducerID && expect.Epoch == t.Epoch:
			case expect.ID == t.LastProducerID && expect.Epoch == t.LastEpoch && t.State.complete() &&
				(t.EndedBy == EndedByTimeout || t.EndedBy == EndedByInit):
				return runtime.Result[Producer]{Response: Producer{ID: t.ProducerID, Epoch: t.Epoch}}, nil
			default:
				return none, fmt.Errorf("%w: transactional id %q is at producer %d epoch %d, not %d epoch %d", ErrProducerFenced, k.TransactionalID, t.ProducerID, t.Epoch, expect.ID, expect.Epoch)
			}
		}
		if t.State == StateOngoing {
			u, err := s.end(k, t, false, EndedByInit, BumpEpoch, pid, now)
			if err != nil {
				return none, err
			}
			return runtime.Result[Producer]{Update: u, Response: Producer{again: true}, Await: true}, nil
		}
		n.ProducerID, n.Epoch = t.ProducerID, t.Epoch+1
	}
	if t == nil || n.Epoch == math.MaxInt16 {
		if pid < 0 {
			return none, errNeedProducerID
		}
		n.ProducerID, n.Epoch = pid, 0
	}
	n.UpdateTime = now
	u, err := s.record(k, n)
	if err != nil {
		return none, err
	}
	return runtime.Result[Producer]{Update: u, Response: Producer{ID: n.ProducerID, Epoch: n.Epoch}}, nil
}

// fence checks that (producerID, epoch) is t's current producer, in a
// state that accepts a partition or group.
func fence(id string, t *Transaction, producerID int64, epoch int16) error {
	if t == nil {
		return fmt.Errorf("%w %q", ErrUnknownTransactionalID, id)
	}
	switch {
	case producerID == t.ProducerID && epoch == t.Epoch:
		if t.State.preparing() {
			return fmt.Errorf("%w: transactional id %q is %v", ErrConcurrentTransactions, id, t.State)
		}
		return nil
	case producerID == t.ProducerID && epoch > t.Epoch:
		return fmt.Errorf("%w: %d of producer %d (transactional id %q) is past its current %d", ErrInvalidProducerEpoch, epoch, producerID, id, t.Epoch)
	case producerID == t.LastProducerID && epoch == t.LastEpoch && t.EndedBy == EndedByTimeout:
		return fmt.Errorf("%w: transactional id %q, producer %d epoch %d", ErrTransactionAbortable, id, producerID, epoch)
	}
	return fmt.Errorf("%w: transactional id %q is at producer %d epoch %d, not %d epoch %d", ErrProducerFenced, id, t.ProducerID, t.Epoch, producerID, epoch)
}

// Add puts partitions and groups in the producer's current transaction,
// beginning one (Empty or Complete* → Ongoing, its timeout starting) when
// none is open; nothing to write when they all are in it already. Only the
// current producer id and epoch are accepted: an older one is fenced
// (ErrProducerFenced), or told its transaction timed out
// (ErrTransactionAbortable); during an end, ErrConcurrentTransactions at
// once (it does not wait for the markers). Partitions or groups that would
// take the transaction past its tenant's bounds are refused
// (*TooLargeError): none of them is added.
func (s *Shard) Add(k Key, producerID int64, epoch int16, partitions []TopicPartition, groups []string, now time.Time) (runtime.Result[struct{}], error) {
	var none runtime.Result[struct{}]
	t := s.txns[k]
	if err := fence(k.TransactionalID, t, producerID, epoch); err != nil {
		return none, err
	}
	var n *Transaction
	if t.State == StateOngoing {
		n = t.clone()
	} else { // Empty or Complete*: a transaction begins
		n = &Transaction{ProducerID: t.ProducerID, Epoch: t.Epoch, Timeout: t.Timeout, State: StateOngoing, StartTime: now, LastProducerID: -1, LastEpoch: -1}
	}
	grew := t.State != StateOngoing
	for _, tp := range partitions {
		if i, found := slices.BinarySearchFunc(n.Partitions, tp, compareTP); !found {
			n.Partitions = slices.Insert(n.Partitions, i, tp)
			grew = true
		}
	}
	for _, g := range groups {
		if i, found := slices.BinarySearch(n.Groups, g); !found {
			n.Groups = slices.Insert(n.Groups, i, g)
			grew = true
		}
	}
	if !grew {
		return none, nil
	}
	if err := s.checkBounds(k, len(n.Partitions), len(n.Groups)); err != nil {
		return none, err
	}
	n.UpdateTime = now
	u, err := s.record(k, n)
	return runtime.Result[struct{}]{Update: u}, err
}

// checkBounds refuses a transaction that would hold more partitions or
// groups than ShardConfig.Bounds allows its tenant.
func (s *Shard) checkBounds(k Key, partitions, groups int) error {
	if s.cfg.Bounds == nil {
		return nil
	}
	b := s.cfg.Bounds(k.Tenant)
	switch {
	case b.Partitions > 0 && partitions > b.Partitions:
		return &TooLargeError{Tenant: k.Tenant, TransactionalID: k.TransactionalID, What: "partitions", Count: partitions, Max: b.Partitions}
	case b.Groups > 0 && groups > b.Groups:
		return &TooLargeError{Tenant: k.Tenant, TransactionalID: k.TransactionalID, What: "groups", Count: groups, Max: b.Groups}
	}
	return nil
}

// Verify checks that the partitions and groups are all in the producer's
// current transaction, changing nothing: KIP-890 part 1's verification,
// for clients that add them themselves before writing (Kafka clients
// below Produce v12 and TxnOffsetCommit v5, whose ends keep the epoch:
// KeepEpoch). The fencing is Add's; a transaction that is not open, or
// lacks one of them, is ErrNotInTransaction: a write delayed past its
// transaction's end is refused unless the producer's next transaction has
// added its partition already (the window part 2's epoch bump closes).
func (s *Shard) Verify(k Key, producerID int64, epoch int16, partitions []TopicPartition, groups []string) error {
	t := s.txns[k]
	if err := fence(k.TransactionalID, t, producerID, epoch); err != nil {
		return err
	}
	if t.State != StateOngoing {
		return fmt.Errorf("%w: transactional id %q, producer %d epoch %d, has no transaction open (%v): add the partitions and groups first", ErrNotInTransaction, k.TransactionalID, producerID, epoch, t.State)
	}
	for _, tp := range partitions {
		if _, found := slices.BinarySearchFunc(t.Partitions, tp, compareTP); !found {
			return fmt.Errorf("%w: transactional id %q, producer %d epoch %d: partition %d of topic %s was not added to the transaction", ErrNotInTransaction, k.TransactionalID, producerID, epoch, tp.Partition, tp.TopicID)
		}
	}
	for _, g := range groups {
		if _, found := slices.BinarySearch(t.Groups, g); !found {
			return fmt.Errorf("%w: transactional id %q, producer %d epoch %d: group %q was not added to the transaction", ErrNotInTransaction, k.TransactionalID, producerID, epoch, g)
		}
	}
	return nil
}

// EndMode is how an end treats the producer's epoch.
type EndMode int

const (
	// BumpEpoch: the end bumps the epoch (KIP-890 part 2: Sluice's
	// clients, Kafka's EndTxn v5+), so a write delayed past the end is
	// fenced by its epoch.
	BumpEpoch EndMode = iota
	// KeepEpoch: the end keeps the producer's epoch, as Kafka clients
	// before KIP-890 part 2 (EndTxn v0-v4) expect: they go on with the
	// same epoch, their sequences continuing. Their writes are checked
	// with Verify instead.
	KeepEpoch
)

// EndTransaction commits or aborts the producer's current transaction: it
// writes PrepareCommit or PrepareAbort with the epoch bumped (a new
// producer id, nextPID from the caller, when the bump reaches
// math.MaxInt16: errNeedProducerID without one; with KeepEpoch the epoch
// stays), and asks for the markers
// (at that epoch) to every partition and group in it, whose
// follow-up writes CompleteCommit or CompleteAbort; the answer, the
// producer id and epoch to use next, waits for that (Await): a commit that
// answered is on every partition. An end with no transaction open still
// bumps the epoch. A retry of an end that was written (the same producer
// id, epoch and decision) answers the same, once its markers are written
// (ErrEffectPending while they are not); the other decision with that
// epoch is fenced (after a KeepEpoch end, whose producer is still current,
// ErrNotInTransaction), and so is any other epoch but the current one. After a
// timeout's abort: abort answers the new epoch, commit
// ErrTransactionAbortable. When the markers cannot be written the answer
// wraps ErrConcurrentTransactions and the transaction stays Prepare*
// while the runtime retries them.
func (s *Shard) EndTransaction(k Key, producerID int64, epoch int16, commit bool, mode EndMode, nextPID int64, now time.Time) (runtime.Result[Producer], error) {
	var none runtime.Result[Producer]
	t := s.txns[k]
	if t != nil && producerID == t.LastProducerID && epoch == t.LastEpoch && (t.State.preparing() || t.State.complete()) {
		committed := t.State == StatePrepareCommit || t.State == StateCompleteCommit
		switch {
		case t.EndedBy == EndedByTimeout && commit:
			return none, fmt.Errorf("%w: transactional id %q, producer %d epoch %d", ErrTransactionAbortable, k.TransactionalID, producerID, epoch)
		case t.EndedBy == EndedByTimeout, t.EndedBy == EndedByClient && committed == commit:
			// A retry of this end (or the abort of a timed-out one).
		case t.Epoch == epoch && t.ProducerID == producerID:
			// The end kept the epoch (KeepEpoch): the producer is
			// still current, and this end's decision is not the one
			// it asks about; Kafka answers INVALID_TXN_STATE.
			return none, fmt.Errorf("%w: transactional id %q: the transaction of producer %d epoch %d already ended (committed: %v), and no other is open", ErrNotInTransaction, k.TransactionalID, producerID, epoch, committed)
		default:
			return none, fmt.Errorf("%w: transactional id %q: the transaction of producer %d epoch %d already ended (committed: %v)", ErrProducerFenced, k.TransactionalID, producerID, epoch, committed)
		}
		if t.State.preparing() {
			return none, pending(k, t)
		}
		return runtime.Result[Producer]{Response: Producer{ID: t.ProducerID, Epoch: t.Epoch}}, nil
	}
	if err := fence(k.TransactionalID, t, producerID, epoch); err != nil {
		return none, err
	}
	u, err := s.end(k, t, commit, EndedByClient, mode, nextPID, now)
	if err != nil {
		return none, err
	}
	next := Producer{ID: t.ProducerID, Epoch: t.Epoch}
	if mode == BumpEpoch {
		next.Epoch++
		if next.Epoch == math.MaxInt16 {
			next = Producer{ID: nextPID, Epoch: 0}
		}
	}
	return runtime.Result[Producer]{Update: u, Response: next, Await: true}, nil
}

// end ends t (k's transaction, Empty, Ongoing or Complete* at its current
// epoch): the Prepare* record, and the effect writing its markers, then
// Complete*.
func (s *Shard) end(k Key, t *Transaction, commit bool, by EndedBy, mode EndMode, nextPID int64, now time.Time) (runtime.Update, error) {
	n := t.clone()
	n.State = StatePrepareAbort
	if commit {
		n.State = StatePrepareCommit
	}
	if t.State != StateOngoing { // nothing open: no partition to mark
		n.Partitions, n.Groups, n.StartTime = nil, nil, time.Time{}
	}
	n.LastProducerID, n.LastEpoch, n.EndedBy = t.ProducerID, t.Epoch, by
	n.NextProducerID = 0
	if mode == BumpEpoch {
		n.Epoch++
	}
	if n.Epoch == math.MaxInt16 {
		if nextPID < 0 {
			return runtime.Update{}, errNeedProducerID
		}
		n.NextProducerID = nextPID
	}
	n.UpdateTime = now
	u, err := s.record(k, n)
	if err != nil {
		return runtime.Update{}, err
	}
	u.Written = func() {}
	u.Effects = []runtime.Effect{s.finishEffect(k, n, by == EndedByInit, time.Now())}
	return u, nil
}

// finishEffect is the effect finishing t's end (Prepare*): its markers,
// then Complete*. started is when the end began (the zero time for an end
// resumed after a load, not observed); init: an InitProducer's abort.
func (s *Shard) finishEffect(k Key, t *Transaction, init bool, started time.Time) runtime.Effect {
	ms := s.markers(k, t)
	failed := started.IsZero()
	return runtime.Effect{
		Key: opKey(k),
		Do:  ms,
		Fail: func(err error) error {
			failed = true // the end is finished later: not observed
			err = fmt.Errorf("%w: transactional id %q: write %d markers: %w", ErrConcurrentTransactions, k.TransactionalID, len(ms), err)
			if init {
				err = fmt.Errorf("abort the open transaction of %q: %w", k.TransactionalID, err)
			}
			return err
		},
		Then: func(_ any, now time.Time) (runtime.Update, error) {
			return s.complete(k, t, now, !failed, started)
		},
	}
}

// complete writes Complete* after the markers of prep, k's end; nothing
// when k is no longer in that end (finished already).
func (s *Shard) complete(k Key, prep *Transaction, now time.Time, observe bool, started time.Time) (runtime.Update, error) {
	t := s.txns[k]
	if t == nil || !t.State.preparing() || t.Epoch != prep.Epoch || t.ProducerID != prep.ProducerID {
		return runtime.Update{}, nil
	}
	n := t.clone()
	n.State = StateCompleteAbort
	if t.State == StatePrepareCommit {
		n.State = StateCompleteCommit
	}
	if t.NextProducerID != 0 {
		n.ProducerID, n.Epoch, n.NextProducerID = t.NextProducerID, 0, 0
	}
	n.UpdateTime = now
	u, err := s.record(k, n)
	if err != nil {
		return runtime.Update{}, err
	}
	m := s.cfg.Metrics
	u.Written = func() {
		if n.State == StateCompleteCommit {
			inc(m.Commits)
		} else {
			inc(m.Aborts)
		}
		if observe {
			observeSince(m.EndLatency, started)
		}
	}
	return u, nil
}

// markers are the markers of t's end (Prepare*), written by this shard.
func (s *Shard) markers(k Key, t *Transaction) []Marker {
	commit := t.State == StatePrepareCommit || t.State == StateCompleteCommit
	kept := t.Epoch == t.LastEpoch && t.ProducerID == t.LastProducerID // a KeepEpoch end
	var out []Marker
	for _, tp := range t.Partitions {
		out = append(out, Marker{Tenant: k.Tenant, Partition: tp, Commit: commit, ProducerID: t.ProducerID, ProducerEpoch: t.Epoch, CoordinatorEpoch: s.cfg.LeaderEpoch, KeptEpoch: kept})
	}
	for _, g := range t.Groups {
		out = append(out, Marker{Tenant: k.Tenant, Group: g, Commit: commit, ProducerID: t.ProducerID, ProducerEpoch: t.Epoch, CoordinatorEpoch: s.cfg.LeaderEpoch, KeptEpoch: kept})
	}
	return out
}

// finishPending is an operation waiting for k's end in progress, if any
// (ErrEffectPending).
func (s *Shard) finishPending(k Key) (runtime.Result[struct{}], error) {
	if t := s.txns[k]; t != nil && t.State.preparing() {
		return runtime.Result[struct{}]{}, pending(k, t)
	}
	return runtime.Result[struct{}]{}, nil
}

// Describe returns a copy of the transactional id's state; ok is false for
// an id unknown here.
func (s *Shard) Describe(k Key) (Transaction, bool) {
	t := s.txns[k]
	if t == nil {
		return Transaction{}, false
	}
	return *t.clone(), true
}

// Transactions returns a copy of every transactional id's state.
func (s *Shard) Transactions() map[Key]Transaction {
	out := make(map[Key]Transaction, len(s.txns))
	for k, t := range s.txns {
		out[k] = *t.clone()
	}
	return out
}

// Open is the number of transactions open (Ongoing) or ending (Prepare*).
func (s *Shard) Open() int {
	n := 0
	for _, t := range s.txns {
		if t.State == StateOngoing || t.State.preparing() {
			n++
		}
	}
	return n
}

// IDsByTenant counts the transactional ids known, per tenant.
func (s *Shard) IDsByTenant() map[string]int {
	out := map[string]int{}
	for k := range s.txns {
		out[k.Tenant]++
	}
	return out
}

// Pending returns the markers of every end not finished (Prepare*).
func (s *Shard) Pending() map[Key][]Marker {
	out := map[Key][]Marker{}
	for k, t := range s.txns {
		if t.State.preparing() {
			out[k] = s.markers(k, t)
		}
	}
	return out
}
