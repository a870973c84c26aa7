package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicemq/sluice/dataplane/runtime"
)

// Partition is the transaction-state partition a Coordinator serves, as its
// broker provides it (runtime.Partition, the contract every coordinator's
// partition has).
type Partition = runtime.Partition

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
	// KeptEpoch: the end kept the producer's epoch (KeepEpoch), so
	// ProducerEpoch is the ended transaction's own rather than its + 1 (a
	// group's pending offsets at that epoch are the transaction's).
	KeptEpoch bool
}

// MarkerWriter writes transaction markers: the broker's, to the leaders of
// the partitions named (acks=all).
type MarkerWriter interface {
	// WriteMarkers returns nil once every marker is written with acks=all
	// to its partition; an error leaves some unwritten, and the runtime
	// calls it again with the same markers later, so writing a marker a
	// partition already has must be harmless.
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
	// broker's, from the control plane's blocks). Required. Called with
	// none of the coordinator's locks held.
	AllocateProducerID func(context.Context) (int64, error)
	// Markers writes the markers of ending transactions (the runtime's
	// effects, retried until written). Required.
	Markers MarkerWriter
	// DefaultTimeout is the transaction timeout of an InitProducer that
	// asks none (60 s when zero); MaxTimeout caps what one may ask (15
	// min when zero).
	DefaultTimeout, MaxTimeout time.Duration
	// IdleTimeout: a transactional id with no transaction open and no
	// change for that long is forgotten (a tombstone); zero never is.
	IdleTimeout time.Duration
	// Now is the clock of update and start times and of the timeouts
	// (time.Now when nil).
	Now func() time.Time
	// Tick is the longest Run waits before it checks the timeouts and
	// retries unwritten markers (runtime.Config.Tick; it wakes earlier
	// for those due).
	Tick time.Duration
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
	// Nil admits everything. Called with none of the coordinator's locks
	// held.
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
	// the aborts the timeouts started.
	Commits, Aborts, TimedOut prometheus.Counter
	// EndLatency observes each end whose markers were written at the first
	// attempt, from its Prepare* operation to its Complete* write, markers
	// included; an end finished later (a retry) is not observed.
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

func observeSince(o prometheus.Observer, since time.Time) {
	if o != nil {
		o.Observe(time.Since(since).Seconds())
	}
}

// Coordinator is the transaction coordinator of one transaction-state
// partition its broker leads, at one leader epoch: a Shard hosted by the
// runtime. Call Load before anything else (and again after it failed); the
// other methods answer ErrNotCoordinator until it is done.
type Coordinator struct {
	h   *runtime.Hosted[*Shard]
	cfg Config
}

// New returns the coordinator of p at cfg.LeaderEpoch, not loaded yet.
func New(p Partition, cfg Config) *Coordinator {
	name := fmt.Sprintf("transaction state partition %d", cfg.Partition)
	shard := NewShard(ShardConfig{LeaderEpoch: cfg.LeaderEpoch, DefaultTimeout: cfg.DefaultTimeout, MaxTimeout: cfg.MaxTimeout,
		IdleTimeout: cfg.IdleTimeout, Bounds: cfg.Bounds, Metrics: cfg.Metrics})
	var write prometheus.Observer
	if cfg.Metrics != nil {
		write = cfg.Metrics.WriteLatency
	}
	c := &Coordinator{cfg: cfg}
	c.h = runtime.New(p, shard, runtime.Config{
		Name: name, LeaderEpoch: cfg.LeaderEpoch, Fence: true, Now: cfg.Now, Tick: cfg.Tick,
		Logger: cfg.Logger, WriteLatency: write,
		Exec: func(ctx context.Context, do any) (any, error) {
			ms := do.([]Marker)
			if len(ms) == 0 {
				return nil, nil
			}
			return nil, cfg.Markers.WriteMarkers(ctx, ms)
		},
		Refusal: func(err error) error { return fmt.Errorf("%w: %w", ErrNotCoordinator, err) },
	})
	return c
}

// Epoch is the leader epoch the coordinator serves.
func (c *Coordinator) Epoch() int32 { return c.h.Epoch() }

// Partition is the partition it is hosted on.
func (c *Coordinator) Partition() Partition { return c.h.Partition() }

// Current reports whether its broker still leads the partition at the
// epoch the coordinator serves.
func (c *Coordinator) Current() bool { return c.h.Current() }

// Load rebuilds the coordinator's state from its partition, once (the last
// record of each transactional id winning), and resumes the ends left in
// Prepare* (their markers). It fails, to be called again, while the
// partition is not ready or when ctx ends.
func (c *Coordinator) Load(ctx context.Context) error { return c.h.Load(ctx) }

// Run runs the coordinator's timers (transaction timeouts, idle ids) and
// retries unwritten markers until ctx ends or Close.
func (c *Coordinator) Run(ctx context.Context) { c.h.Run(ctx) }

// RunDue aborts the transactions past their timeout and forgets the idle
// ids at Config.Now, and starts the retries of unwritten markers that are
// due: what Run does at every tick. An abort's markers are written in the
// background (FinishPending waits for them).
func (c *Coordinator) RunDue(ctx context.Context) { c.h.RunDue(ctx) }

// Close stops the coordinator's timers and marker writes (its partition
// moved).
func (c *Coordinator) Close() { c.h.Close() }

// write runs op under k, allocating a producer id and running it again
// when it needs one, and running it again when it asks to (an abort it
// had to finish first).
func (c *Coordinator) write(ctx context.Context, k Key, op func(s *Shard, pid int64, now time.Time) (runtime.Result[Producer], error)) (Producer, error) {
	pid := int64(-1)
	for {
		p, err := runtime.Write(ctx, c.h, opKey(k), func(s *Shard, now time.Time) (runtime.Result[Producer], error) { return op(s, pid, now) })
		switch {
		case errors.Is(err, errNeedProducerID):
			if pid, err = c.cfg.AllocateProducerID(ctx); err != nil {
				return Producer{}, fmt.Errorf("allocate a producer id: %w", err)
			}
		case err != nil:
			return Producer{}, err
		case !p.again:
			return p, nil
		}
	}
}

// InitProducer gives the transactional id's producer incarnation its
// producer id and epoch, fencing every older epoch: a new id gets a new
// producer id at epoch 0; a known one first has an end in progress
// finished (its markers) and an open transaction aborted (Ongoing), then
// gets its epoch bumped, or a new producer id at epoch 0 when the bump
// would reach math.MaxInt16 (the last epoch is kept for an end's bump).
// timeout 0 is Config.DefaultTimeout. It answers once written. A new id is
// created only when Config.Admit admits it. With expect, only that
// producer may ask (Shard.InitProducer: KIP-360's recovery).
func (c *Coordinator) InitProducer(ctx context.Context, tenantID, transactionalID string, timeout time.Duration, expect *Producer) (producerID int64, epoch int16, err error) {
	k := Key{tenantID, transactionalID}
	if !c.Current() {
		return 0, 0, fmt.Errorf("%w: transaction state partition %d moved from leader epoch %d", ErrNotCoordinator, c.cfg.Partition, c.cfg.LeaderEpoch)
	}
	type check struct {
		known bool
		err   error
	}
	ck, err := runtime.Read(c.h, func(s *Shard) check {
		_, err := s.timeout(timeout)
		return check{s.txns[k] != nil, err}
	})
	if err == nil {
		err = ck.err
	}
	if err != nil {
		return 0, 0, err
	}
	if c.cfg.Admit != nil {
		if !ck.known {
			done, err := c.cfg.Admit(ctx, tenantID, transactionalID)
			if err != nil {
				return 0, 0, err
			}
			if done != nil {
				defer done()
			}
		}
	}
	p, err := c.write(ctx, k, func(s *Shard, pid int64, now time.Time) (runtime.Result[Producer], error) {
		return s.InitProducer(k, timeout, expect, pid, now)
	})
	return p.ID, p.Epoch, err
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
	return c.Add(ctx, tenantID, transactionalID, producerID, epoch, partitions, nil)
}

// AddOffsets puts a group in the producer's current transaction (its
// offsets committed in the transaction get its markers), as AddPartitions
// does partitions.
func (c *Coordinator) AddOffsets(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, group string) error {
	return c.Add(ctx, tenantID, transactionalID, producerID, epoch, nil, []string{group})
}

// Add is AddPartitions and AddOffsets in one: the partitions and groups
// join the producer's current transaction with one write.
func (c *Coordinator) Add(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, partitions []TopicPartition, groups []string) error {
	k := Key{tenantID, transactionalID}
	_, err := runtime.Write(ctx, c.h, opKey(k), func(s *Shard, now time.Time) (runtime.Result[struct{}], error) {
		return s.Add(k, producerID, epoch, partitions, groups, now)
	})
	return err
}

// EndTransaction commits or aborts the producer's current transaction:
// it writes PrepareCommit or PrepareAbort with the epoch bumped (a new
// producer id when the bump reaches math.MaxInt16; kept with KeepEpoch),
// then the markers (at that epoch) to every partition and group in it,
// then CompleteCommit or CompleteAbort, and answers after that with the
// producer id and epoch to use next: a commit that returned is on every
// partition. No lock is held while the markers are written: the id's
// other calls meanwhile are answered from its Prepare* state (Shard.Add,
// ErrConcurrentTransactions; a retry of the end, or InitProducer, waits
// for the markers). An end with no transaction open still bumps the
// epoch. A retry of an end that was written (the same producer id, epoch
// and decision) finishes it if needed and answers the same; the other
// decision with that epoch is fenced, and so is any other epoch but the
// current one. After a timeout's abort: abort answers the new epoch,
// commit ErrTransactionAbortable. When the markers cannot all be written
// the transaction stays Prepare* and the error wraps
// ErrConcurrentTransactions: the runtime retries them, and a retry of the
// end or InitProducer waits for that.
func (c *Coordinator) EndTransaction(ctx context.Context, tenantID, transactionalID string, producerID int64, epoch int16, commit bool, mode EndMode) (int64, int16, error) {
	k := Key{tenantID, transactionalID}
	p, err := c.write(ctx, k, func(s *Shard, pid int64, now time.Time) (runtime.Result[Producer], error) {
		return s.EndTransaction(k, producerID, epoch, commit, mode, pid, now)
	})
	return p.ID, p.Epoch, err
}

// Verify checks that the partitions and groups are in the producer's
// current transaction (Shard.Verify), writing nothing.
func (c *Coordinator) Verify(tenantID, transactionalID string, producerID int64, epoch int16, partitions []TopicPartition, groups []string) error {
	if !c.Current() { // a deposed coordinator's state may be stale
		return fmt.Errorf("%w: transactional id %q", ErrNotCoordinator, transactionalID)
	}
	k := Key{tenantID, transactionalID}
	err, rerr := runtime.Read(c.h, func(s *Shard) error { return s.Verify(k, producerID, epoch, partitions, groups) })
	if rerr != nil {
		return rerr
	}
	return err
}

// FinishPending writes now the markers of every end not finished
// (Prepare*: loaded so after a takeover, or left so by a failed marker
// write) and waits for them, as the runtime's retries would later.
func (c *Coordinator) FinishPending(ctx context.Context) error {
	keys, err := runtime.Read(c.h, func(s *Shard) []Key { return slices.Collect(maps.Keys(s.Pending())) })
	if err != nil {
		return err
	}
	slices.SortFunc(keys, func(a, b Key) int { return strings.Compare(opKey(a), opKey(b)) })
	var errs []error
	for _, k := range keys {
		_, err := runtime.Write(ctx, c.h, opKey(k), func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) { return s.finishPending(k) })
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// read runs fn against the shard; zero before it is loaded.
func read[R any](c *Coordinator, fn func(s *Shard) R) R {
	r, _ := runtime.Read(c.h, fn)
	return r
}

// Open is the number of transactions open (Ongoing) or ending (Prepare*).
func (c *Coordinator) Open() int { return read(c, (*Shard).Open) }

// Describe returns a copy of the transactional id's state; ok is false
// for an id unknown here.
func (c *Coordinator) Describe(tenantID, transactionalID string) (t Transaction, ok bool) {
	type described struct {
		t  Transaction
		ok bool
	}
	d := read(c, func(s *Shard) described {
		t, ok := s.Describe(Key{tenantID, transactionalID})
		return described{t, ok}
	})
	return d.t, d.ok
}

// Transactions returns a copy of every transactional id's state.
func (c *Coordinator) Transactions() map[Key]Transaction {
	if m := read(c, (*Shard).Transactions); m != nil {
		return m
	}
	return map[Key]Transaction{}
}

// IDsByTenant counts the transactional ids this coordinator knows, per
// tenant.
func (c *Coordinator) IDsByTenant() map[string]int {
	if m := read(c, (*Shard).IDsByTenant); m != nil {
		return m
	}
	return map[string]int{}
}

// Pending returns the markers of every end not finished (Prepare*), as
// this coordinator writes them.
func (c *Coordinator) Pending() map[Key][]Marker {
	if m := read(c, (*Shard).Pending); m != nil {
		return m
	}
	return map[Key][]Marker{}
}
