package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
	"github.com/sluicemq/sluice/internal/clock"
	"github.com/sluicemq/sluice/internal/endpoint"
)

// Delivery says when a group consumer commits relative to processing.
type Delivery int

const (
	// AtLeastOnce commits a record's position only after it was processed:
	// a crash replays what was processed but not yet committed (the commit
	// window), and loses nothing. Default.
	AtLeastOnce Delivery = iota
	// AtMostOnce commits a record's position before it is processed: a
	// crash skips what was committed but not yet processed, and never
	// replays.
	AtMostOnce
)

// CommitMode says how often a group consumer commits.
type CommitMode struct {
	every    int           // commit after this many records (1: each)
	interval time.Duration // or every interval
	txn      bool          // never: a TransactionalProducer commits (SendOffsets)
}

// CommitInterval commits every d (Kafka's auto-commit; the default is 5 s),
// also while no new record arrives (a member that caught up commits what
// it processed within d). A crash replays (at-least-once) or skips
// (at-most-once) up to d of records.
func CommitInterval(d time.Duration) CommitMode { return CommitMode{interval: d} }

// CommitEach commits after every record: no replay beyond the record being
// processed, at the cost of a round trip to the coordinator per record.
func CommitEach() CommitMode { return CommitMode{every: 1} }

// CommitEvery commits after every n records: a crash replays at most n.
func CommitEvery(n int) CommitMode { return CommitMode{every: n} }

// CommitManual never commits by itself: call GroupConsumer.Commit.
func CommitManual() CommitMode { return CommitMode{} }

// CommitTransactional never commits at all, not even when partitions are
// revoked or at Close: the member's offsets are committed inside
// transactions by a TransactionalProducer (SendOffsets with Member), so
// that they commit together with the records produced from them
// (consume-transform-produce; see ConsumeTransformProduce). Commit is
// refused. After an aborted transaction, RewindToCommitted moves the
// member back to what the group committed. It needs AtLeastOnce.
func CommitTransactional() CommitMode { return CommitMode{txn: true} }

// GroupOption configures a GroupConsumer.
type GroupOption func(*groupConfig)

type groupConfig struct {
	instanceID string
	assignor   string
	commit     CommitMode
	delivery   Delivery
	reset      Offset
	onAssign   func([]TopicPartition)
	onRevoke   func([]TopicPartition)
	consumer   []ConsumerOption
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// WithInstanceID makes the member static (Kafka's group.instance.id): a
// process that joins with the same id (a pod name) within the session
// timeout gets the partitions of the previous one back with no rebalance,
// whether the previous one closed or crashed. If the previous process is
// still running (paused, or a second copy), it is fenced: its Run and Poll
// fail with ErrInstanceFenced and it never rejoins. Give each live member
// its own id.
func WithInstanceID(id string) GroupOption { return func(c *groupConfig) { c.instanceID = id } }

// WithAssignor chooses the group's assignor when the group is created:
// "uniform" (default, sticky) or "range".
func WithAssignor(name string) GroupOption { return func(c *groupConfig) { c.assignor = name } }

// WithCommitMode sets how often positions are committed (default
// CommitInterval(5 * time.Second)).
func WithCommitMode(m CommitMode) GroupOption { return func(c *groupConfig) { c.commit = m } }

// WithDelivery chooses at-least-once (default) or at-most-once.
func WithDelivery(d Delivery) GroupOption { return func(c *groupConfig) { c.delivery = d } }

// WithStartOffset says where a partition without a committed offset starts
// (default Earliest; Kafka's auto.offset.reset).
func WithStartOffset(o Offset) GroupOption { return func(c *groupConfig) { c.reset = o } }

// WithOnAssigned and WithOnRevoked are called (on the consumer's goroutine
// that calls Run or Poll) when partitions are assigned or revoked.
func WithOnAssigned(fn func([]TopicPartition)) GroupOption {
	return func(c *groupConfig) { c.onAssign = fn }
}

// WithOnRevoked: see WithOnAssigned. Positions are committed before it is
// called.
func WithOnRevoked(fn func([]TopicPartition)) GroupOption {
	return func(c *groupConfig) { c.onRevoke = fn }
}

// WithConsumerOptions passes fetch options to the underlying consumer.
func WithConsumerOptions(opts ...ConsumerOption) GroupOption {
	return func(c *groupConfig) { c.consumer = opts }
}

// GroupConsumer consumes topics as a member of a consumer group: the
// group's coordinator assigns it partitions (cooperatively: it keeps
// consuming the partitions it keeps during a rebalance), and it commits
// positions as its CommitMode and Delivery say. Use it from one goroutine.
type GroupConsumer struct {
	c      *Client
	cfg    groupConfig
	group  string
	topics []string
	cs     *Consumer

	mu          sync.Mutex
	memberID    string
	epoch       int32
	interval    time.Duration
	owned       map[TopicPartition]bool
	assigned    map[TopicPartition]bool     // what the last heartbeat response allows
	starting    map[TopicPartition]bool     // being started in the background
	newlyOwned  []TopicPartition            // started, not yet told to onAssign
	stashed     []*Record                   // fetched for a partition still starting
	processed   map[TopicPartition]position // next offset to commit
	committed   map[TopicPartition]int64
	sinceCommit int
	lastCommit  time.Time
	commitDue   bool             // commit the pending positions now (a rejoin after commits were refused)
	assign      []TopicPartition // to start, from the last heartbeat
	revoke      []TopicPartition // to give up, from the last heartbeat
	hbErr       error
	fenced      bool // another process took over the instance id: stopped for good
	coord       sluicev1connect.GroupServiceClient
	inflight    chan struct{} // closed when the background commit ends; nil when none
	asyncErr    error         // a background commit's failure, for the next maybeCommit

	wake   chan struct{}
	life   context.Context // ends at Close
	stop   context.CancelFunc
	done   chan struct{}
	starts sync.WaitGroup // background partition starts
	closed bool
}

type position struct {
	offset int64
	epoch  int32
}

// NewGroupConsumer joins group, subscribed to topics. It returns once the
// member has joined; partitions arrive with the following heartbeats.
func (c *Client) NewGroupConsumer(ctx context.Context, group string, topics []string, opts ...GroupOption) (*GroupConsumer, error) {
	cfg := groupConfig{commit: CommitInterval(5 * time.Second), reset: Earliest()}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case group == "":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("group: must not be empty"))
	case len(topics) == 0:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("topics: subscribe to at least one"))
	case cfg.commit.every < 0 || cfg.commit.interval < 0:
		return nil, errors.New("sluice: commit mode: counts and intervals must be positive")
	case cfg.delivery != AtLeastOnce && cfg.delivery != AtMostOnce:
		return nil, errors.New("sluice: delivery: choose AtLeastOnce or AtMostOnce")
	case cfg.commit.txn && cfg.delivery != AtLeastOnce:
		return nil, errors.New("sluice: CommitTransactional commits with the transaction's records: it needs AtLeastOnce")
	}
	for _, t := range topics {
		if _, err := c.topic(ctx, t); err != nil {
			return nil, err
		}
	}
	cs, err := c.NewConsumer(cfg.consumer...)
	if err != nil {
		return nil, err
	}
	g := &GroupConsumer{
		c: c, cfg: cfg, group: group, topics: slices.Clone(topics), cs: cs,
		owned: map[TopicPartition]bool{}, starting: map[TopicPartition]bool{},
		processed: map[TopicPartition]position{}, committed: map[TopicPartition]int64{},
		lastCommit: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	// Join, retrying while the cluster is unavailable (a coordinator
	// moving, the offsets topic not created yet) and ctx lasts.
	for attempt := 1; ; attempt++ {
		err := g.heartbeat(ctx)
		if err == nil {
			break
		}
		if !retriable(err) || ErrorDetailReason(err) != 0 {
			cs.Close()
			return nil, fmt.Errorf("sluice: join group %q: %w", group, err)
		}
		if serr := clock.Sleep(ctx, retryWait(err, attempt)); serr != nil {
			cs.Close()
			return nil, fmt.Errorf("sluice: join group %q: %w (last error: %v)", group, serr, err)
		}
	}
	hctx, cancel := context.WithCancel(context.Background())
	g.life, g.stop = hctx, cancel
	go g.heartbeatLoop(hctx)
	return g, nil
}

// coordinator returns a client for the group's coordinator, finding it
// when unknown.
func (g *GroupConsumer) coordinator(ctx context.Context) (sluicev1connect.GroupServiceClient, error) {
	g.mu.Lock()
	gc := g.coord
	g.mu.Unlock()
	if gc != nil {
		return gc, nil
	}
	var last error
	for _, b := range g.c.brokerList() {
		gs := sluicev1connect.NewGroupServiceClient(g.c.hc, endpoint.URL(b.address, g.c.scheme), connect.WithInterceptors(g.c.bearer()))
		res, err := gs.FindCoordinator(ctx, connect.NewRequest(&sluicev1.FindCoordinatorRequest{Group: g.group}))
		if err = normalize(ctx, err); err != nil {
			last = err
			if !retriable(err) {
				return nil, err
			}
			continue
		}
		gc = sluicev1connect.NewGroupServiceClient(g.c.hc, endpoint.URL(res.Msg.GetAddress(), g.c.scheme), connect.WithInterceptors(g.c.bearer(), noForward{}))
		g.mu.Lock()
		g.coord = gc
		g.mu.Unlock()
		return gc, nil
	}
	if last == nil {
		last = connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
	}
	return nil, last
}

// forgetCoordinator drops a coordinator that moved.
func (g *GroupConsumer) forgetCoordinator(err error) {
	if notLeaderOf(err) != nil || connect.CodeOf(err) == connect.CodeUnavailable {
		g.mu.Lock()
		g.coord = nil
		g.mu.Unlock()
	}
}

// heartbeat sends one heartbeat and records the assignment it returns.
func (g *GroupConsumer) heartbeat(ctx context.Context) error {
	gc, err := g.coordinator(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	req := &sluicev1.GroupHeartbeatRequest{
		Group: g.group, MemberId: g.memberID, InstanceId: g.cfg.instanceID, MemberEpoch: g.epoch,
		Assignor: g.cfg.assignor, OwnedSet: true, Owned: toTPs(g.owned),
	}
	joining := g.memberID == "" || g.epoch == 0
	if joining {
		req.SubscriptionSet, req.SubscribedTopics = true, g.topics
	}
	g.mu.Unlock()
	res, err := gc.GroupHeartbeat(ctx, connect.NewRequest(req))
	err = normalize(ctx, err)
	if err != nil {
		g.forgetCoordinator(err)
		ge, _ := ErrorDetail[*sluicev1.GroupError](err)
		g.mu.Lock()
		defer g.mu.Unlock()
		switch ge.GetReason() {
		case sluicev1.GroupError_REASON_FENCED_INSTANCE_ID:
			g.fenceLocked(err)
		case sluicev1.GroupError_REASON_UNKNOWN_MEMBER:
			// The coordinator forgot us (it moved, or our session
			// expired): rejoin reporting what we own, and keep it if
			// nobody else has it.
			g.memberID, g.epoch = "", 0
		case sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH:
			// Give up everything and rejoin.
			g.epoch = 0
			for tp := range g.owned {
				g.revoke = append(g.revoke, tp)
			}
		}
		return err
	}
	assigned := map[TopicPartition]bool{}
	for _, tp := range res.Msg.GetAssignment() {
		for _, p := range tp.GetPartitions() {
			assigned[TopicPartition{tp.GetTopic(), p}] = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.assigned = assigned
	g.memberID, g.epoch = res.Msg.GetMemberId(), res.Msg.GetMemberEpoch()
	g.interval = time.Duration(res.Msg.GetHeartbeatIntervalMs()) * time.Millisecond
	g.assign, g.revoke = nil, nil
	for tp := range g.owned {
		if !assigned[tp] {
			g.revoke = append(g.revoke, tp)
		}
	}
	for tp := range assigned {
		if !g.owned[tp] && !g.starting[tp] {
			g.assign = append(g.assign, tp)
		}
	}
	// Back in the group (after the coordinator moved, say): what was
	// processed meanwhile could not be committed; commit it now rather
	// than with the next record, which may be long in coming.
	rejoined := joining && g.pendingLocked()
	if rejoined {
		g.commitDue = true
	}
	if len(g.assign)+len(g.revoke) > 0 || rejoined {
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// fenceLocked stops the member for good after err said another process
// joined with its instance id: Run and Poll fail from now on, it sends no
// more heartbeats or commits, and its partitions are given up (the other
// process consumes them).
func (g *GroupConsumer) fenceLocked(err error) {
	if g.fenced {
		return
	}
	g.fenced = true
	g.hbErr = fmt.Errorf("%w: another process joined with instance id %q and took over this member's partitions: %w", ErrInstanceFenced, g.cfg.instanceID, err)
	g.assign, g.revoke, g.assigned = nil, nil, map[TopicPartition]bool{}
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// noteFenced stops the member when err (of any group call) says it was
// fenced.
func (g *GroupConsumer) noteFenced(err error) {
	if ErrorDetailReason(err) != sluicev1.GroupError_REASON_FENCED_INSTANCE_ID {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fenceLocked(err)
}

func toTPs(owned map[TopicPartition]bool) []*sluicev1.TopicPartitions {
	by := map[string][]int32{}
	for tp := range owned {
		by[tp.Topic] = append(by[tp.Topic], tp.Partition)
	}
	out := make([]*sluicev1.TopicPartitions, 0, len(by))
	for t, ps := range by {
		slices.Sort(ps)
		out = append(out, &sluicev1.TopicPartitions{Topic: t, Partitions: ps})
	}
	return out
}

func (g *GroupConsumer) heartbeatLoop(ctx context.Context) {
	defer close(g.done)
	attempt := 0
	var last error
	for {
		g.mu.Lock()
		d := g.interval
		g.mu.Unlock()
		if d <= 0 {
			d = time.Second
		}
		if delay, ok := throttleOf(last); ok {
			d = jitterUp(delay) // the coordinator's rate refusal: not sooner
		} else if attempt > 0 {
			d = min(d, backoff(attempt))
		}
		if clock.Sleep(ctx, d) != nil {
			return
		}
		last = g.heartbeat(ctx)
		if err := last; err != nil {
			if ctx.Err() != nil {
				return
			}
			attempt++
			g.c.logger.Debug("group heartbeat failed", "group", g.group, "err", err)
			g.mu.Lock()
			fenced := g.fenced
			if !fenced && !retriable(err) && connect.CodeOf(err) != connect.CodeNotFound && ErrorDetailReason(err) == 0 {
				g.hbErr = err
			}
			g.mu.Unlock()
			if fenced {
				g.c.logger.Warn("group member fenced: another process joined with its instance id; stopping", "group", g.group, "instance_id", g.cfg.instanceID)
				return // Kafka's FENCED_INSTANCE_ID is fatal: never rejoin
			}
			continue
		}
		attempt = 0
	}
}

// ErrorDetailReason returns the GroupError reason of err (0 when none).
func ErrorDetailReason(err error) sluicev1.GroupError_Reason {
	ge, _ := ErrorDetail[*sluicev1.GroupError](err)
	return ge.GetReason()
}

// reconcile applies the last heartbeat's changes. Revoked partitions are
// committed (at-least-once: what was processed) and stopped, on the
// caller's goroutine between records, before the next heartbeat reports
// them released. Assigned ones start in the background at their committed
// offset (or the start offset): a member gaining partitions keeps
// consuming the ones it has while it resolves where the new ones start.
func (g *GroupConsumer) reconcile(ctx context.Context) error {
	g.mu.Lock()
	if g.fenced {
		owned := g.owned
		g.owned, g.processed, g.stashed = map[TopicPartition]bool{}, map[TopicPartition]position{}, nil
		g.mu.Unlock()
		// Stop fetching; nothing is committed (the coordinator refuses
		// it) and the other process resumes from the last commit.
		for tp := range owned {
			g.cs.Unassign(tp.Topic, tp.Partition)
		}
		return g.pollErr()
	}
	assign := g.assign
	// A heartbeat answered while the last revocation was being committed
	// lists those partitions again: revoke only what is still owned.
	revoke := slices.DeleteFunc(g.revoke, func(tp TopicPartition) bool { return !g.owned[tp] })
	g.assign, g.revoke = nil, nil
	for _, tp := range assign {
		g.starting[tp] = true
	}
	g.mu.Unlock()
	g.deliverAssigned()
	if len(revoke) > 0 {
		if g.cfg.commit.txn {
			// Committed by the transactions that processed them, if at all.
		} else if err := g.commitPartitions(ctx, revoke); err != nil {
			g.c.logger.Debug("commit on revoke failed", "group", g.group, "err", err)
		}
		for _, tp := range revoke {
			g.cs.Unassign(tp.Topic, tp.Partition)
		}
		g.mu.Lock()
		for _, tp := range revoke {
			delete(g.owned, tp)
			delete(g.processed, tp)
		}
		g.mu.Unlock()
		if g.cfg.onRevoke != nil {
			g.cfg.onRevoke(revoke)
		}
	}
	if len(assign) > 0 {
		g.starts.Go(func() { g.start(assign) })
	}
	return nil
}

// start starts fetching newly assigned partitions, concurrently (each may
// take a round trip to resolve its start offset), and then owns those the
// latest heartbeat still allows: a member must never claim a partition it
// was not given, or two members would own it. A partition that fails to
// start is offered again by the next heartbeat.
func (g *GroupConsumer) start(assign []TopicPartition) {
	ctx := g.life
	var (
		mu      sync.Mutex
		started []TopicPartition
		wg      sync.WaitGroup
		sem     = make(chan struct{}, 16)
	)
	todo := assign
	starts, err := g.committedOffsets(ctx, assign)
	for throttled(err) && clock.Sleep(ctx, retryWait(err, 1)) == nil {
		starts, err = g.committedOffsets(ctx, assign)
	}
	if err != nil {
		g.c.logger.Debug("fetch committed offsets failed", "group", g.group, "err", err)
		todo = nil
	}
	for _, tp := range todo {
		from := g.cfg.reset
		if off, ok := starts[tp]; ok && off >= 0 {
			from = At(off)
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := g.cs.Assign(ctx, tp.Topic, tp.Partition, from); err != nil {
				g.c.logger.Debug("start partition failed", "group", g.group, "topic", tp.Topic, "partition", tp.Partition, "err", err)
				return
			}
			mu.Lock()
			started = append(started, tp)
			mu.Unlock()
		})
	}
	wg.Wait()
	var dropped []TopicPartition
	g.mu.Lock()
	for _, tp := range started {
		if !g.assigned[tp] || g.closed {
			dropped = append(dropped, tp)
			continue
		}
		g.owned[tp] = true
		g.newlyOwned = append(g.newlyOwned, tp)
		if off, ok := starts[tp]; ok && off >= 0 {
			g.committed[tp] = off
		}
	}
	for _, tp := range assign {
		delete(g.starting, tp)
	}
	g.mu.Unlock()
	for _, tp := range dropped {
		g.cs.Unassign(tp.Topic, tp.Partition)
	}
	select { // tell the poller, so onAssign runs now
	case g.wake <- struct{}{}:
	default:
	}
}

// deliverAssigned calls onAssign with the partitions started since the last
// call, on the consumer's goroutine.
func (g *GroupConsumer) deliverAssigned() {
	g.mu.Lock()
	tps := g.newlyOwned
	g.newlyOwned = nil
	g.mu.Unlock()
	if len(tps) > 0 && g.cfg.onAssign != nil {
		slices.SortFunc(tps, compareTP)
		g.cfg.onAssign(tps)
	}
}

func (g *GroupConsumer) committedOffsets(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	gc, err := g.coordinator(ctx)
	if err != nil {
		return nil, err
	}
	by := map[string][]int32{}
	for _, tp := range tps {
		by[tp.Topic] = append(by[tp.Topic], tp.Partition)
	}
	req := &sluicev1.FetchOffsetsRequest{Group: g.group}
	for t, ps := range by {
		req.Partitions = append(req.Partitions, &sluicev1.TopicPartitions{Topic: t, Partitions: ps})
	}
	res, err := gc.FetchOffsets(ctx, connect.NewRequest(req))
	if err = normalize(ctx, err); err != nil {
		g.forgetCoordinator(err)
		return nil, err
	}
	out := map[TopicPartition]int64{}
	for _, o := range res.Msg.GetOffsets() {
		out[TopicPartition{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
	}
	return out, nil
}

// Poll returns the next records of the member's partitions, waiting until
// some arrive or ctx ends. With AtLeastOnce the records count as processed
// once Poll is called again (their positions are committed then, or later,
// as the CommitMode says); with AtMostOnce their positions are committed
// before Poll returns them (unless CommitManual). For per-record commits
// (CommitEach, CommitEvery) use Run.
func (g *GroupConsumer) Poll(ctx context.Context) ([]*Record, error) {
	recs, err := g.poll(ctx)
	if err != nil {
		return nil, err
	}
	g.MarkProcessed(recs...)
	if g.cfg.delivery == AtMostOnce && g.cfg.commit != (CommitMode{}) {
		if err := g.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// Run calls fn for each record of the member's partitions, in order per
// partition, until ctx ends (it then commits what was processed, with
// AtLeastOnce, waiting up to 30 s, and returns the commit's error or nil)
// or fn fails (it
// returns that error without committing the failed record). With
// AtMostOnce and CommitManual it never commits: call Commit.
// With AtLeastOnce a record's position is committed after fn returns, as
// the CommitMode says: CommitEach after every record, CommitEvery(n) after
// every n, CommitInterval(d) every d (in the background, one commit at a
// time, so processing goes on while it is in flight). With AtMostOnce the positions of the
// records fetched together are committed before fn sees the first of them.
func (g *GroupConsumer) Run(ctx context.Context, fn func(context.Context, *Record) error) error {
	err := g.run(ctx, fn)
	if ctx.Err() == nil {
		return err
	}
	if g.cfg.delivery == AtLeastOnce && !g.cfg.commit.txn {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second) // Kafka close()'s default
		defer cancel()
		return g.Commit(cctx)
	}
	return nil
}

func (g *GroupConsumer) run(ctx context.Context, fn func(context.Context, *Record) error) error {
	for {
		recs, err := g.poll(ctx)
		if err != nil {
			return err
		}
		if g.cfg.delivery == AtMostOnce {
			g.MarkProcessed(recs...)
			if g.cfg.commit != (CommitMode{}) {
				if err := g.Commit(ctx); err != nil {
					return err
				}
			}
		}
		for i, r := range recs {
			if err := fn(ctx, r); err != nil {
				// The records after the failed one were not processed:
				// the next Run or Poll starts with them, and with the
				// failed one too with at-least-once (at-most-once never
				// hands a record out twice).
				if g.cfg.delivery == AtLeastOnce {
					g.requeue(recs[i:])
				} else {
					g.requeue(recs[i+1:])
				}
				return err
			}
			if g.cfg.delivery == AtLeastOnce {
				g.MarkProcessed(r)
				if err := g.maybeCommit(ctx); err != nil {
					g.requeue(recs[i+1:])
					return err
				}
			}
			if g.isFenced() {
				// Another process owns these partitions now: stop at
				// once rather than process the rest of the fetch.
				return g.pollErr()
			}
		}
	}
}

// requeue puts records fetched but not processed back in front of the
// next ones, so that a Run that returns early skips nothing.
func (g *GroupConsumer) requeue(recs []*Record) {
	if len(recs) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stashed = append(slices.Clone(recs), g.stashed...)
}

// poll returns the next records, reconciling the assignment first.
func (g *GroupConsumer) poll(ctx context.Context) ([]*Record, error) {
	for {
		if err := g.pollErr(); err != nil {
			if g.isFenced() {
				_ = g.reconcile(ctx) // give the partitions up
			}
			return nil, err
		}
		if err := g.maybeCommit(ctx); err != nil {
			return nil, err
		}
		if err := g.reconcile(ctx); err != nil {
			return nil, err
		}
		if recs := g.ownedOnly(nil); len(recs) > 0 {
			return recs, nil
		}
		pctx, cancel := context.WithCancel(ctx)
		if d := g.commitWait(); d > 0 {
			// An idle member commits at its interval too (Kafka's
			// auto-commit runs in poll, which returns at its timeout).
			pctx, cancel = context.WithTimeout(ctx, d)
		}
		go func() {
			select {
			case <-g.wake:
				cancel()
			case <-pctx.Done():
			}
		}()
		recs, err := g.cs.Poll(pctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				continue // a rebalance, or a commit due: reconcile and commit first
			}
			return nil, err
		}
		if recs = g.ownedOnly(recs); len(recs) > 0 {
			g.deliverAssigned()
			return recs, nil
		}
	}
}

// commitWait is how long poll may wait for records before an interval
// commit of processed positions is due (at least 50 ms, so that a commit
// still in flight is not polled for in a loop); 0 when no commit is
// pending or the member cannot commit now (it is rejoining: the rejoin
// wakes the poller).
func (g *GroupConsumer) commitWait() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cfg.commit.interval <= 0 || g.fenced || g.memberID == "" || g.epoch <= 0 || !g.pendingLocked() {
		return 0
	}
	return max(time.Until(g.lastCommit.Add(g.cfg.commit.interval)), 50*time.Millisecond)
}

// pendingLocked reports whether an owned partition has processed positions
// not committed yet.
func (g *GroupConsumer) pendingLocked() bool {
	for tp, pos := range g.processed {
		if g.owned[tp] && pos.offset != g.committed[tp] {
			return true
		}
	}
	return false
}

func (g *GroupConsumer) isFenced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fenced
}

func (g *GroupConsumer) pollErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.hbErr != nil {
		return fmt.Errorf("sluice: group %q: %w", g.group, g.hbErr)
	}
	return nil
}

// ownedOnly returns the records of owned partitions: first those stashed
// earlier, then recs. Records of a partition still starting (its fetch may
// begin before the member owns it) are stashed until it is owned; those of
// partitions given up since they were fetched are dropped. Stashed are
// also records a Run returned before processing (requeue).
func (g *GroupConsumer) ownedOnly(recs []*Record) []*Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out, stash []*Record
	for _, r := range append(g.stashed, recs...) {
		tp := TopicPartition{r.Topic, r.Partition}
		switch {
		case g.owned[tp]:
			out = append(out, r)
		case g.starting[tp]:
			stash = append(stash, r)
		}
	}
	g.stashed = stash
	return out
}

// MarkProcessed records that records were processed: their positions are
// committed by the CommitMode (or by Commit).
func (g *GroupConsumer) MarkProcessed(recs ...*Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range recs {
		tp := TopicPartition{r.Topic, r.Partition}
		if !g.owned[tp] {
			continue
		}
		if cur, ok := g.processed[tp]; !ok || r.Offset+1 > cur.offset {
			g.processed[tp] = position{offset: r.Offset + 1, epoch: r.LeaderEpoch}
		}
		g.sinceCommit++
	}
}

// maybeCommit commits when the CommitMode says it is time. Interval
// commits with at-least-once go in the background, one at a time (Kafka's
// auto-commit), so a slow coordinator does not stall processing; counted
// commits (CommitEach, CommitEvery) wait, since their replay bound is the
// point of them. A commit the coordinator refuses because a rebalance moved
// things under it (a partition no longer owned, a stale member epoch, a
// forgotten member) is not an error here: the assignment is reconciled
// next, and the partition's new owner resumes from the last commit that
// succeeded (a replay, never a loss, with at-least-once).
func (g *GroupConsumer) maybeCommit(ctx context.Context) error {
	g.mu.Lock()
	if err := g.asyncErr; err != nil {
		g.asyncErr = nil
		g.mu.Unlock()
		return err
	}
	m := g.cfg.commit
	if m.txn {
		g.mu.Unlock()
		return nil
	}
	due := (m.every > 0 && g.sinceCommit >= m.every) || (m.interval > 0 && time.Since(g.lastCommit) >= m.interval) ||
		(g.commitDue && m != CommitMode{})
	if g.memberID == "" || g.epoch <= 0 || g.fenced {
		// Rejoining (the coordinator moved, or fenced us): a commit now
		// would not name a member. The positions wait for the next one.
		due = false
	}
	background := m.every == 0 && g.cfg.delivery == AtLeastOnce
	if !due || (background && g.inflight != nil) {
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	if background {
		g.commitInBackground()
		return nil
	}
	return rebalanceRefusalOK(g.Commit(ctx))
}

// rebalanceRefusalOK drops a commit refusal caused by a rebalance.
func rebalanceRefusalOK(err error) error {
	switch ErrorDetailReason(err) {
	case sluicev1.GroupError_REASON_NOT_OWNED, sluicev1.GroupError_REASON_FENCED_MEMBER_EPOCH, sluicev1.GroupError_REASON_UNKNOWN_MEMBER:
		return nil
	}
	return err
}

func (g *GroupConsumer) commitInBackground() {
	req := g.commitRequest(g.ownedList())
	if req == nil {
		return
	}
	done := make(chan struct{})
	g.mu.Lock()
	g.inflight = done
	g.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(g.life, 30*time.Second)
		err := rebalanceRefusalOK(g.sendCommit(ctx, req))
		cancel()
		g.mu.Lock()
		if err != nil && g.life.Err() == nil {
			g.asyncErr = err
		}
		g.inflight = nil
		g.mu.Unlock()
		close(done)
	}()
}

// Commit commits the positions of processed records of every owned
// partition. It waits for a background commit first, so commits land in
// order.
func (g *GroupConsumer) Commit(ctx context.Context) error {
	if g.cfg.commit.txn {
		return errors.New("sluice: Commit: this member's offsets are committed in transactions (CommitTransactional): use TransactionalProducer.SendOffsets")
	}
	return g.commitPartitions(ctx, g.ownedList())
}

// Member returns the member's identity in its group as of now, for
// TransactionalProducer.SendOffsets: the coordinator refuses offsets of
// a member that lost its partitions or was replaced.
func (g *GroupConsumer) Member() GroupMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	return GroupMember{Group: g.group, MemberID: g.memberID, MemberEpoch: g.epoch, InstanceID: g.cfg.instanceID}
}

// RewindToCommitted moves every owned partition back to the group's
// committed offset (the start offset where none is), dropping what was
// fetched past it: after an aborted transaction, the records it consumed
// are read again. The records already returned by Poll are not undone;
// the next Poll starts at the committed offsets.
func (g *GroupConsumer) RewindToCommitted(ctx context.Context) error {
	tps := g.ownedList()
	if len(tps) == 0 {
		return nil
	}
	var starts map[TopicPartition]int64
	var err error
	for attempt := 1; ; attempt++ {
		if starts, err = g.committedOffsets(ctx, tps); err == nil {
			break
		}
		if throttled(err) {
			attempt-- // throttling is waited out, not counted
		}
		if !retriable(err) || attempt >= 10 {
			return fmt.Errorf("sluice: group %q: fetch committed offsets: %w", g.group, err)
		}
		if serr := clock.Sleep(ctx, retryWait(err, max(attempt, 1))); serr != nil {
			return fmt.Errorf("sluice: group %q: fetch committed offsets: %w (last error: %v)", g.group, serr, err)
		}
	}
	g.mu.Lock()
	g.stashed = slices.DeleteFunc(g.stashed, func(r *Record) bool { return g.owned[TopicPartition{r.Topic, r.Partition}] })
	for _, tp := range tps {
		delete(g.processed, tp)
	}
	g.mu.Unlock()
	for _, tp := range tps {
		from := g.cfg.reset
		if off, ok := starts[tp]; ok && off >= 0 {
			from = At(off)
		}
		if err := g.cs.Assign(ctx, tp.Topic, tp.Partition, from); err != nil {
			return fmt.Errorf("sluice: group %q: rewind %s:%d to %s: %w", g.group, tp.Topic, tp.Partition, from, err)
		}
		g.mu.Lock()
		if off, ok := starts[tp]; ok && off >= 0 {
			g.committed[tp] = off
		}
		g.mu.Unlock()
	}
	return nil
}

func (g *GroupConsumer) ownedList() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	tps := make([]TopicPartition, 0, len(g.owned))
	for tp := range g.owned {
		tps = append(tps, tp)
	}
	return tps
}

func (g *GroupConsumer) commitPartitions(ctx context.Context, tps []TopicPartition) error {
	g.mu.Lock()
	inflight := g.inflight
	g.mu.Unlock()
	if inflight != nil {
		select {
		case <-inflight:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := g.waitMember(ctx); err != nil {
		return err
	}
	req := g.commitRequest(tps)
	if req == nil {
		return nil
	}
	return g.sendCommit(ctx, req)
}

// waitMember waits (up to 5 s) while the member rejoins the group: a
// commit must name a member of the group, or the coordinator takes it for
// an outsider's.
func (g *GroupConsumer) waitMember(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.mu.Lock()
		ok, closed := g.memberID != "" && g.epoch > 0, g.life != nil && g.life.Err() != nil
		fenced := g.fenced
		g.mu.Unlock()
		switch {
		case fenced:
			return g.pollErr()
		case ok:
			return nil
		case closed || time.Now().After(deadline):
			return connect.NewError(connect.CodeUnavailable, fmt.Errorf("sluice: group %q: not a member right now (rejoining); commit again later", g.group))
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// commitRequest is the commit of tps' processed positions not committed
// yet; nil when there is none. It restarts the commit clock and count.
func (g *GroupConsumer) commitRequest(tps []TopicPartition) *sluicev1.CommitOffsetsRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.memberID == "" || g.epoch <= 0 || g.fenced {
		return nil // rejoining (see waitMember), or fenced for good
	}
	req := &sluicev1.CommitOffsetsRequest{Group: g.group, MemberId: g.memberID, MemberEpoch: g.epoch, InstanceId: g.cfg.instanceID}
	for _, tp := range tps {
		pos, ok := g.processed[tp]
		if !ok || pos.offset == g.committed[tp] {
			continue
		}
		req.Offsets = append(req.Offsets, &sluicev1.PartitionOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: pos.offset, LeaderEpoch: pos.epoch})
	}
	g.sinceCommit, g.commitDue = 0, false
	g.lastCommit = time.Now()
	if len(req.Offsets) == 0 {
		return nil
	}
	return req
}

// sendCommit sends a commit, retrying while the coordinator is unavailable.
func (g *GroupConsumer) sendCommit(ctx context.Context, req *sluicev1.CommitOffsetsRequest) error {
	for attempt := 1; ; attempt++ {
		gc, err := g.coordinator(ctx)
		if err == nil {
			_, err = gc.CommitOffsets(ctx, connect.NewRequest(req))
			err = normalize(ctx, err)
		}
		if err == nil {
			g.mu.Lock()
			for _, o := range req.Offsets {
				g.committed[TopicPartition{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
			}
			g.mu.Unlock()
			return nil
		}
		g.forgetCoordinator(err)
		g.noteFenced(err)
		if throttled(err) {
			attempt-- // throttling is waited out, not counted
		}
		if !retriable(err) || ErrorDetailReason(err) != 0 || attempt >= 10 {
			if g.isFenced() {
				return g.pollErr()
			}
			return fmt.Errorf("sluice: commit offsets of group %q: %w", g.group, err)
		}
		if serr := clock.Sleep(ctx, retryWait(err, max(attempt, 1))); serr != nil {
			return serr
		}
	}
}

// Assignment returns the partitions the member consumes now.
func (g *GroupConsumer) Assignment() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]TopicPartition, 0, len(g.owned))
	for tp := range g.owned {
		out = append(out, tp)
	}
	slices.SortFunc(out, compareTP)
	return out
}

func compareTP(a, b TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// Close commits processed positions (at-least-once), leaves the group (a
// static member leaves temporarily, keeping its partitions for the session
// timeout) and stops. A member fenced by another process with its instance
// id (ErrInstanceFenced) commits nothing and does not leave: the group is
// the other process's now.
func (g *GroupConsumer) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	var errs []error
	if g.cfg.delivery == AtLeastOnce && !g.cfg.commit.txn && !g.isFenced() {
		errs = append(errs, g.Commit(ctx))
	}
	g.stop()
	<-g.done
	g.starts.Wait()
	if g.isFenced() {
		return g.cs.Close()
	}
	g.mu.Lock()
	req := &sluicev1.GroupHeartbeatRequest{Group: g.group, MemberId: g.memberID, InstanceId: g.cfg.instanceID, MemberEpoch: -1}
	if g.cfg.instanceID != "" {
		req.MemberEpoch = -2
	}
	g.mu.Unlock()
	// A rate refusal of the leave is waited out (within ctx), as every
	// other call's is: throttling slows a client down, it does not fail
	// it.
	for {
		gc, err := g.coordinator(ctx)
		if err != nil {
			break
		}
		_, err = gc.GroupHeartbeat(ctx, connect.NewRequest(req))
		if throttled(err) && clock.Sleep(ctx, retryWait(err, 1)) == nil {
			continue
		}
		errs = append(errs, err)
		break
	}
	errs = append(errs, g.cs.Close())
	return errors.Join(errs...)
}

// GroupAdmin returns a GroupService client for administration (ListGroups,
// DescribeGroup, ResetOffsets, DeleteGroup, FetchOffsets): it talks to one
// of the brokers, which forwards each call to the group's coordinator.
func (c *Client) GroupAdmin() (sluicev1connect.GroupServiceClient, error) {
	bs := c.brokerList()
	if len(bs) == 0 {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no broker is known"))
	}
	return sluicev1connect.NewGroupServiceClient(c.hc, endpoint.URL(bs[0].address, c.scheme), connect.WithInterceptors(c.bearer())), nil
}
