package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/log"
	"github.com/sluicemq/sluice/record"
)

// Partition is the transaction-state partition a Coordinator serves, as its
// broker provides it (the same contract as coordinator.Partition): the
// local replica's log to rebuild from, and the replicated write path.
// Every method may be called concurrently.
type Partition interface {
	// LogStartOffset, LEO and Read read the local replica's log, as
	// dataplane/log.Log does.
	LogStartOffset() int64
	LEO() int64
	Read(offset int64, maxBytes int) ([]byte, error)
	// CheckLeader returns nil when this replica leads the partition and
	// its high watermark has reached the start of its leader epoch, and
	// otherwise the error to answer, which a caller may retry.
	CheckLeader() error
	// AppendAcksAll appends batch as the leader at leader epoch epoch and
	// returns its base offset once every ISR member has it. It fails, and
	// the records count as not written, when this replica does not lead
	// at epoch or the ISR does not acknowledge them in time.
	AppendAcksAll(ctx context.Context, epoch int32, batch log.ValidBatch) (base int64, err error)
	// Leads reports whether this replica still leads at leader epoch epoch.
	Leads(epoch int32) bool
}

// Marker is one transaction marker to write: a control batch ending the
// transaction of ProducerID on one partition, committing or aborting its
// batches there. Exactly one of Partition (a data partition, TopicID set)
// and Group (a group whose offsets are in the transaction: the marker
// goes to the group's offsets partition) names where.
type Marker struct {
	Tenant        string
	Partition     TopicPartition
	Group         string
	Commit        bool
	ProducerID    int64
	ProducerEpoch int16
	// CoordinatorEpoch is the leader epoch of the coordinator writing the
	// marker (record.ControlRecord's), so that a partition can refuse the
	// markers of a coordinator that was replaced.
	CoordinatorEpoch int32
}

// MarkerWriter writes transaction markers: the broker's, to the leaders of
// the partitions named (acks=all).
type MarkerWriter interface {
	// WriteMarkers returns nil once every marker is written with acks=all
	// to its partition; an error leaves some unwritten, and the
	// coordinator calls it again with the same markers later, so writing
	// a marker a partition already has must be harmless.
	WriteMarkers(ctx context.Context, markers []Marker) error
}

// Config configures one Coordinator.
type Config struct {
	// Partition is the transaction-state partition's number (for logs
	// and errors).
	Partition int32
	// LeaderEpoch is the leader epoch the coordinator serves: it loads
	// the log led at it, and its writes are fenced at it.
	LeaderEpoch int32
	// AllocateProducerID returns a producer id never given before (the
	// broker's, from the control plane's blocks). Required.
	AllocateProducerID func(context.Context) (int64, error)
	// Markers writes the markers of ending transactions. Required.
	Markers MarkerWriter
	// DefaultTimeout is the transaction timeout of an InitProducer that
	// asks none (60 s when zero); MaxTimeout caps what one may ask (15
	// min when zero).
	DefaultTimeout, MaxTimeout time.Duration
	// IdleTimeout: Expire forgets a transactional id (a tombstone) with
	// no transaction open and no change for that long; zero never does.
	IdleTimeout time.Duration
	// Now is the clock of update and start times (time.Now when nil).
	Now func() time.Time
	// Logger: nil discards.
	Logger *slog.Logger
	// Metrics: nil counts nothing.
	Metrics *Metrics
	// Admit decides an InitProducer that would create a transactional id
	// this coordinator does not know: a non-nil error refuses it,
	// returned as is, and nothing is created. When it admits, done is
	// called once InitProducer has created the id or failed to (nil done:
	// nothing to call). Known ids are not asked about. It is the one
	// admission point of transactional-id creation, whichever front door
	// the call came through (the broker's quotas: max_transactional_ids).
	// Nil admits everything. Called while the id's operation is held
	// (concurrent calls for the same id wait), without Coordinator.mu.
	Admit func(ctx context.Context, tenantID, transactionalID string) (done func(), err error)
	// Bounds are the most partitions and groups one transaction of the
	// tenant may hold (nil, or a zero field: no bound on it).
	Bounds func(tenantID string) Bounds
}

// Bounds bound one transaction: the partitions it writes to and the
// groups whose offsets it commits (its end writes a marker to each). Zero
// is no bound.
type Bounds struct{ Partitions, Groups int }

// Metrics are what coordinators count, shared by every coordinator of a
// broker; any field may be nil. The caller registers them.
type Metrics struct {
	// Commits and Aborts count finished ends (Complete* written), TimedOut
	// the aborts Expire started.
	Commits, Aborts, TimedOut prometheus.Counter
	// EndLatency observes each end finished by the call that began it
	// (EndTransaction, InitProducer's abort, Expire), from its Prepare*
	// write's start to its Complete* write, markers included; an end
	// finished later (a retry, FinishPending) is not observed.
	EndLatency prometheus.Observer
	// WriteLatency observes each write to the transaction-state
	// partition (acks=all).
	WriteLatency prometheus.Observer
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

func observe(o prometheus.Observer, since time.Time) {
	if o != nil {
		o.Observe(time.Since(since).Seconds())
	}
}

// entry is one transactional id at this coordinator.
type entry struct {
	// op is held (a token in it) by the one operation that may change t,
	// across its writes; taken before Coordinator.mu, never while
	// holding it.
	op chan struct{}
	// t is the id's state as last written (nil: none, or forgotten).
	// Written under Coordinator.mu by op's holder.
	t *Transaction
}

func newEntry(t *Transaction) *entry { return &entry{op: make(chan struct{}, 1), t: t} }

// Coordinator serves the transactional ids of one transaction-state
// partition its broker leads, loaded at one leader epoch. Call Load before
// anything else (and again after it failed); the other methods answer
// ErrNotCoordinator until it is done.
type Coordinator struct {
	p   Partition
	cfg Config

	// loadMu serialises Load; it is not held with mu, so the state's
	// readers (Open, Describe, ...) never wait for a load's reads.
	loadMu sync.Mutex
	mu     sync.Mutex
	txns   map[Key]*entry // nil until loaded
}

// New returns the coordinator of p at cfg.LeaderEpoch, not loaded yet.
func New(p Partition, cfg Config) *Coordinator {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultTimeout == 0 {
		cfg.DefaultTimeout = time.Minute
	}
	if cfg.MaxTimeout == 0 {
		cfg.MaxTimeout = 15 * time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = &Metrics{}
	}
	return &Coordinator{p: p, cfg: cfg}
}

// Epoch is the leader epoch the coordinator serves.
func (c *Coordinator) Epoch() int32 { return c.cfg.LeaderEpoch }

// Current reports whether its broker still leads the partition at the
// epoch the coordinator serves.
func (c *Coordinator) Current() bool { return c.p.Leads(c.cfg.LeaderEpoch) }

// Load rebuilds the coordinator's state from its partition, once: every
// record from the log start to the log end, the last record of each
// transactional id winning. Transactions whose last record is Prepare*
// are pending: FinishPending writes their markers. It fails, to be called
// again, while the partition is not ready (Partition.CheckLeader's error)
// or when ctx ends.
func (c *Coordinator) Load(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	c.mu.Lock()
	loaded := c.txns != nil
	c.mu.Unlock()
	if loaded {
		return nil
	}
	if err := c.p.CheckLeader(); err != nil {
		return err
	}
	start := time.Now()
	txns := map[Key]*entry{}
	end := c.p.LEO()
	n := 0
	for off := c.p.LogStartOffset(); off < end; {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := c.p.Read(off, 1<<20)
		if err != nil {
			return fmt.Errorf("load transaction state partition %d at %d: %w", c.cfg.Partition, off, err)
		}
		if len(data) == 0 {
			break
		}
		for len(data) > 0 {
			b, rest, err := record.ReadBatch(data)
			if err != nil {
				return fmt.Errorf("load transaction state partition %d: %w", c.cfg.Partition, err)
			}
			data = rest
			h := b.Header()
			if h.LastOffset() < off {
				continue
			}
			if err := eachRecord(b, func(_ int64, k Key, t *Transaction) {
				n++
				if t == nil {
					delete(txns, k)
					return
				}
				txns[k] = newEntry(t)
			}); err != nil {
				return fmt.Errorf("load transaction state partition %d at %d: %w", c.cfg.Partition, h.BaseOffset, err)
			}
			off = h.LastOffset() + 1
		}
	}
	pending := 0
	for _, e := range txns {
		if e.t.State.preparing() {
			pending++
		}
	}
	c.mu.Lock()
	c.txns = txns
	c.mu.Unlock()
	lvl := slog.LevelInfo
	if n == 0 {
		lvl = slog.LevelDebug
	}
	c.cfg.Logger.Log(context.Background(), lvl, "loaded transactional ids", "txn_partition", c.cfg.Partition, "leader_epoch", c.cfg.LeaderEpoch,
		"ids", len(txns), "pending_ends", pending, "records", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// lock takes k's entry (creating it) for one operation; unlock gives it
// back. An entry Expire removed while the caller waited for it is left for
// the id's current one.
func (c *Coordinator) lock(ctx context.Context, k Key) (*entry, error) {
	if err := c.checkCurrent(); err != nil {
		return nil, err
	}
	for {
		c.mu.Lock()
		if c.txns == nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: transaction state partition %d not loaded", ErrNotCoordinator, c.cfg.Partition)
		}
		e := c.txns[k]
		if e == nil {
			e = newEntry(nil)
			c.txns[k] = e
		}
		c.mu.Unlock()
		select {
		case e.op <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		current := c.txns[k] == e
		c.mu.Unlock()
		if current {
			return e, nil
		}
		unlock(e)
	}
}

// tryLock takes e if no operation holds it.
func tryLock(e *entry) bool {
	select {
	case e.op <- struct{}{}:
		return true
	default:
		return false
	}
}

func unlock(e *entry) { <-e.op }

// checkCurrent answers ErrNotCoordinator when the broker no longer leads
// the partition at the coordinator's epoch.
func (c *Coordinator) checkCurrent() error {
	if !c.Current() {
		return fmt.Errorf("%w: partition %d moved from leader epoch %d", ErrNotCoordinator, c.cfg.Partition, c.cfg.LeaderEpoch)
	}
	return nil
}

// write appends t as k's state (a tombstone when nil) with acks=all, then
// applies it. The caller holds e.op.
func (c *Coordinator) write(ctx context.Context, k Key, e *entry, t *Transaction) error {
	if err := c.checkCurrent(); err != nil {
		return err
	}
	batch, err := encodeRecord(k, t, c.cfg.Now())
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = c.p.AppendAcksAll(ctx, c.cfg.LeaderEpoch, batch)
	observe(c.cfg.Metrics.WriteLatency, start)
	if err != nil {
		if !c.Current() {
			return fmt.Errorf("%w: write to transaction state partition %d: %w", ErrNotCoordinator, c.cfg.Partition, err)
		}
		return fmt.Errorf("write to transaction state partition %d: %w", c.cfg.Partition, err)
	}
	c.mu.Lock()
	e.t = t
	c.mu.Unlock()
	return nil
}

func (c *Coordinator) timeout(d time.Duration) (time.Duration, error) {
	if d == 0 {
		d = c.cfg.DefaultTimeout
	}
	if d < time.Millisecond || d > c.cfg.MaxTimeout {
		return 0, fmt.Errorf("%w: %v, allowed 1ms to %v", ErrInvalidTimeout, d, c.cfg.MaxTimeout)
	}
	return d, nil
}

// InitProducer gives the transactional id's producer incarnation its
// producer id and epoch, fencing every older epoch: a new id gets a new
// producer id at epoch 0; a known one first finishes an end in progress
// (its markers) and aborts an open transaction (Ongoing), then gets its
// epoch bumped, or a new producer id at epoch 0 when the bump would reach
// math.MaxInt16 (the last epoch is kept for an end's bump). timeout 0 is
// Config.DefaultTimeout. It answers once written. A new id is created only
// when Config.Admit admits it.
func (c *Coordinator) InitProducer(ctx context.Context, tenantID, transactionalID string, timeout time.Duration) (producerID int64, epoch int16, err error) {
	timeout, err = c.timeout(timeout)
	if err != nil {
		return 0, 0, err
	}
	k := Key{tenantID, transactionalID}
	e, err := c.lock(ctx, k)
	if err != nil {
		return 0, 0, err
	}
	defer unlock(e)
	t := e.t
	if t == nil && c.cfg.Admit != nil {
		done, err := c.cfg.Admit(ctx, tenantID, transactionalID)
		if err != nil {
			return 0, 0, err
		}
		if done != nil {
			defer done()
		}
	}
	n := &Transaction{Timeout: timeout, State: StateEmpty, LastProducerID: -1, LastEpoch: -1}
	if t != nil {
		if t.State.preparing() {
			if err := c.finish(ctx, k, e); err != nil {
				return 0, 0, err
			}
		}
		if e.t.State == StateOngoing {
			if err := c.end(ctx, k, e, false, EndedByInit); err != nil {
				return 0, 0, fmt.Errorf("abort the open transaction of %q: %w", transactionalID, err)
			}
		}
		t = e.t
		n.ProducerID, n.Epoch = t.ProducerID, t.Epoch+1
	}
	if t == nil || n.Epoch == math.MaxInt16 {
		pid, err := c.cfg.AllocateProducerID(ctx)
		if err != nil {
			return 0, 0, fmt.Errorf("allocate a producer id: %w", err)
		}
		n.ProducerID, n.Epoch = pid, 0
	}
	n.UpdateTime = c.cfg.Now()
	if err := c.write(ctx, k, e, n); err != nil {
		return 0, 0, err
	}
	return n.ProducerID, n.Epoch, nil
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

// AddPartitions puts partitions in the producer's current transaction,
// beginning one (Empty or Complete* → Ongoing, its timeout starting) when
// none is open, and answers once written (at once when they all are in it
// already): the verification a partition leader asks before it appends
// the producer's first transactional batch since its last marker. Only the
// current producer id and epoch are accepted: an older one is fenced
// (ErrProducerFenced), or told its transaction timed out
// (ErrTransactionAbortable); during an end, ErrConcurrentTransactions. So a
// batch of an ended transaction never joins the next one: that one has a
// newer epoch. Partitions that would take the transaction past its
// tenant's Config.Bounds are refused (*TooLargeError): none of them is
// added.
func (c *Coordinator) AddPartitions(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, partitions []TopicPartition) error {
	return c.add(ctx, Key{tenantID, transactionalID}, producerID, epoch, partitions, nil)
}

// AddOffsets puts a group in the producer's current transaction (its
// offsets committed in the transaction get its markers), as AddPartitions
// does partitions.
func (c *Coordinator) AddOffsets(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, group string) error {
	return c.add(ctx, Key{tenantID, transactionalID}, producerID, epoch, nil, []string{group})
}

// Add is AddPartitions and AddOffsets in one: the partitions and groups
// join the producer's current transaction with one write.
func (c *Coordinator) Add(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, partitions []TopicPartition, groups []string) error {
	return c.add(ctx, Key{tenantID, transactionalID}, producerID, epoch, partitions, groups)
}

func (c *Coordinator) add(ctx context.Context, k Key, producerID int64, epoch int16, partitions []TopicPartition, groups []string) error {
	e, err := c.lock(ctx, k)
	if err != nil {
		return err
	}
	defer unlock(e)
	t := e.t
	if err := fence(k.TransactionalID, t, producerID, epoch); err != nil {
		return err
	}
	now := c.cfg.Now()
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
		return nil
	}
	if err := c.checkBounds(k, len(n.Partitions), len(n.Groups)); err != nil {
		return err
	}
	n.UpdateTime = now
	return c.write(ctx, k, e, n)
}

// checkBounds refuses a transaction that would hold more partitions or
// groups than Config.Bounds allows its tenant.
func (c *Coordinator) checkBounds(k Key, partitions, groups int) error {
	if c.cfg.Bounds == nil {
		return nil
	}
	b := c.cfg.Bounds(k.Tenant)
	switch {
	case b.Partitions > 0 && partitions > b.Partitions:
		return &TooLargeError{Tenant: k.Tenant, TransactionalID: k.TransactionalID, What: "partitions", Count: partitions, Max: b.Partitions}
	case b.Groups > 0 && groups > b.Groups:
		return &TooLargeError{Tenant: k.Tenant, TransactionalID: k.TransactionalID, What: "groups", Count: groups, Max: b.Groups}
	}
	return nil
}

// EndTransaction commits or aborts the producer's current transaction:
// it writes PrepareCommit or PrepareAbort with the epoch bumped (a new
// producer id when the bump reaches math.MaxInt16), then the markers (at
// the bumped epoch) to every partition and group in it, then
// CompleteCommit or CompleteAbort, and answers after that with the
// producer id and epoch to use next: a commit that returned is on every
// partition. An end with no transaction open still bumps the epoch. A
// retry of an end that was written (the same producer id, epoch and
// decision) finishes it if needed and answers the same; the other decision
// with that epoch is fenced, and so is any other epoch but the current
// one. After a timeout's abort: abort answers the new epoch, commit
// ErrTransactionAbortable. When the markers cannot all be written the
// transaction stays Prepare* and the error wraps ErrConcurrentTransactions:
// a retry, InitProducer or FinishPending finishes it.
func (c *Coordinator) EndTransaction(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, commit bool) (int64, int16, error) {
	k := Key{tenantID, transactionalID}
	e, err := c.lock(ctx, k)
	if err != nil {
		return 0, 0, err
	}
	defer unlock(e)
	t := e.t
	if t != nil && producerID == t.LastProducerID && epoch == t.LastEpoch && (t.State.preparing() || t.State.complete()) {
		committed := t.State == StatePrepareCommit || t.State == StateCompleteCommit
		switch {
		case t.EndedBy == EndedByTimeout && commit:
			return 0, 0, fmt.Errorf("%w: transactional id %q, producer %d epoch %d", ErrTransactionAbortable, transactionalID, producerID, epoch)
		case t.EndedBy == EndedByTimeout, t.EndedBy == EndedByClient && committed == commit:
			// A retry of this end (or the abort of a timed-out one).
		default:
			return 0, 0, fmt.Errorf("%w: transactional id %q: the transaction of producer %d epoch %d already ended (committed: %v)", ErrProducerFenced, transactionalID, producerID, epoch, committed)
		}
		if t.State.preparing() {
			if err := c.finish(ctx, k, e); err != nil {
				return 0, 0, err
			}
		}
		return e.t.ProducerID, e.t.Epoch, nil
	}
	if err := fence(transactionalID, t, producerID, epoch); err != nil {
		return 0, 0, err
	}
	if err := c.end(ctx, k, e, commit, EndedByClient); err != nil {
		return 0, 0, err
	}
	return e.t.ProducerID, e.t.Epoch, nil
}

// end ends e's transaction (Empty, Ongoing or Complete* at its current
// epoch): Prepare*, the markers, Complete*. The caller holds e.op.
func (c *Coordinator) end(ctx context.Context, k Key, e *entry, commit bool, by EndedBy) error {
	t := e.t
	n := t.clone()
	n.State = StatePrepareAbort
	if commit {
		n.State = StatePrepareCommit
	}
	if t.State != StateOngoing { // nothing open: no partition to mark
		n.Partitions, n.Groups, n.StartTime = nil, nil, time.Time{}
	}
	n.LastProducerID, n.LastEpoch, n.EndedBy = t.ProducerID, t.Epoch, by
	n.Epoch, n.NextProducerID = t.Epoch+1, 0
	if n.Epoch == math.MaxInt16 {
		pid, err := c.cfg.AllocateProducerID(ctx)
		if err != nil {
			return fmt.Errorf("allocate a producer id: %w", err)
		}
		n.NextProducerID = pid
	}
	n.UpdateTime = c.cfg.Now()
	start := time.Now()
	if err := c.write(ctx, k, e, n); err != nil {
		return err
	}
	if by == EndedByTimeout {
		inc(c.cfg.Metrics.TimedOut)
	}
	if err := c.finish(ctx, k, e); err != nil {
		return err
	}
	observe(c.cfg.Metrics.EndLatency, start)
	return nil
}

// markers are the markers of t's end (Prepare*), written by this
// coordinator.
func (c *Coordinator) markers(k Key, t *Transaction) []Marker {
	commit := t.State == StatePrepareCommit || t.State == StateCompleteCommit
	var out []Marker
	for _, tp := range t.Partitions {
		out = append(out, Marker{Tenant: k.Tenant, Partition: tp, Commit: commit, ProducerID: t.ProducerID, ProducerEpoch: t.Epoch, CoordinatorEpoch: c.cfg.LeaderEpoch})
	}
	for _, g := range t.Groups {
		out = append(out, Marker{Tenant: k.Tenant, Group: g, Commit: commit, ProducerID: t.ProducerID, ProducerEpoch: t.Epoch, CoordinatorEpoch: c.cfg.LeaderEpoch})
	}
	return out
}

// finish writes the markers of e's end (Prepare*), then Complete*. The
// caller holds e.op.
func (c *Coordinator) finish(ctx context.Context, k Key, e *entry) error {
	t := e.t
	if err := c.checkCurrent(); err != nil {
		return err // a deposed coordinator writes no markers: the new one does
	}
	if ms := c.markers(k, t); len(ms) > 0 {
		if err := c.cfg.Markers.WriteMarkers(ctx, ms); err != nil {
			return fmt.Errorf("%w: transactional id %q: write %d markers: %w", ErrConcurrentTransactions, k.TransactionalID, len(ms), err)
		}
	}
	n := t.clone()
	n.State = StateCompleteAbort
	if t.State == StatePrepareCommit {
		n.State = StateCompleteCommit
	}
	if t.NextProducerID != 0 {
		n.ProducerID, n.Epoch, n.NextProducerID = t.NextProducerID, 0, 0
	}
	n.UpdateTime = c.cfg.Now()
	if err := c.write(ctx, k, e, n); err != nil {
		return err
	}
	if n.State == StateCompleteCommit {
		inc(c.cfg.Metrics.Commits)
	} else {
		inc(c.cfg.Metrics.Aborts)
	}
	return nil
}

// Open is the number of transactions open (Ongoing) or ending (Prepare*).
func (c *Coordinator) Open() int {
	return len(c.entries(func(t *Transaction) bool { return t.State == StateOngoing || t.State.preparing() }))
}

// Expire aborts every transaction Ongoing for longer than its timeout at
// now (the epoch bumped: its producer's next call is told
// ErrTransactionAbortable), and forgets ids idle for Config.IdleTimeout
// (a tombstone each). Ids another operation is changing are left to the
// next call. It returns the aborted ids and the errors met.
func (c *Coordinator) Expire(ctx context.Context, now time.Time) ([]Key, error) {
	var aborted []Key
	var errs []error
	for k, e := range c.entries(func(t *Transaction) bool {
		return t.State == StateOngoing && now.Sub(t.StartTime) > t.Timeout ||
			c.cfg.IdleTimeout > 0 && (t.State == StateEmpty || t.State.complete()) && now.Sub(t.UpdateTime) > c.cfg.IdleTimeout
	}) {
		if !tryLock(e) {
			continue
		}
		t := e.t
		switch {
		case t == nil:
		case t.State == StateOngoing && now.Sub(t.StartTime) > t.Timeout:
			if err := c.end(ctx, k, e, false, EndedByTimeout); err != nil {
				errs = append(errs, fmt.Errorf("abort timed-out transaction %q: %w", k.TransactionalID, err))
			} else {
				aborted = append(aborted, k)
				c.cfg.Logger.Info("transaction timed out: aborted", "tenant", k.Tenant, "transactional_id", k.TransactionalID, "timeout", t.Timeout)
			}
		case c.cfg.IdleTimeout > 0 && (t.State == StateEmpty || t.State.complete()) && now.Sub(t.UpdateTime) > c.cfg.IdleTimeout:
			if err := c.write(ctx, k, e, nil); err != nil {
				errs = append(errs, fmt.Errorf("forget idle transactional id %q: %w", k.TransactionalID, err))
			} else {
				c.mu.Lock()
				delete(c.txns, k) // a caller waiting for e retries with a new entry (lock)
				c.mu.Unlock()
			}
		}
		unlock(e)
	}
	return aborted, errors.Join(errs...)
}

// FinishPending finishes every end whose markers are not all written
// (Prepare*: loaded so after a takeover, or left so by a failed marker
// write) and no operation is busy with. The broker calls it after Load
// and then periodically.
func (c *Coordinator) FinishPending(ctx context.Context) error {
	var errs []error
	for k, e := range c.entries(func(t *Transaction) bool { return t.State.preparing() }) {
		if !tryLock(e) {
			continue
		}
		if e.t != nil && e.t.State.preparing() {
			if err := c.finish(ctx, k, e); err != nil {
				errs = append(errs, err)
			}
		}
		unlock(e)
	}
	return errors.Join(errs...)
}

// entries returns the entries whose state matches.
func (c *Coordinator) entries(match func(*Transaction) bool) map[Key]*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Key]*entry{}
	for k, e := range c.txns {
		if e.t != nil && match(e.t) {
			out[k] = e
		}
	}
	return out
}

// Describe returns a copy of the transactional id's state; ok is false
// for an id unknown here.
func (c *Coordinator) Describe(tenantID, transactionalID string) (t Transaction, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.txns[Key{tenantID, transactionalID}]
	if e == nil || e.t == nil {
		return Transaction{}, false
	}
	return *e.t.clone(), true
}

// Transactions returns a copy of every transactional id's state.
func (c *Coordinator) Transactions() map[Key]Transaction {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[Key]Transaction, len(c.txns))
	for k, e := range c.txns {
		if e.t != nil {
			out[k] = *e.t.clone()
		}
	}
	return out
}

// IDsByTenant counts the transactional ids this coordinator knows, per
// tenant.
func (c *Coordinator) IDsByTenant() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, e := range c.txns {
		if e.t != nil {
			out[k.Tenant]++
		}
	}
	return out
}

// Pending returns the markers of every end not finished (Prepare*), as
// this coordinator writes them.
func (c *Coordinator) Pending() map[Key][]Marker {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[Key][]Marker{}
	for k, e := range c.txns {
		if e.t != nil && e.t.State.preparing() {
			out[k] = c.markers(k, e.t)
		}
	}
	return out
}
