package replica

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is a simulated partition for the scenario and model tests: one
// in-memory log per broker, a controller with compare-and-set on the
// partition epoch, a virtual clock, and a network that can isolate brokers.
// Commands are text (see cluster.run); every command is followed by an
// invariant check.

type entry struct {
	epoch int32
	val   string
}

func (e entry) String() string { return fmt.Sprintf("%d:%s", e.epoch, e.val) }

type broker struct {
	id          int32
	brokerEpoch int64
	log         []entry
	flushed     int64 // with sync=manual: the end of the synced prefix of log
	hw          int64 // the HW checkpoint used when the broker changes role
	up          bool
	isolated    bool // cut off from everyone
	ctlIsolated bool // cut off from the controller only
	damaged     bool // lost committed records in a restart; exempt until out of the ISR
	leader      *Leader
	follower    *Follower
	unsent      bool // its pending proposal never reached the controller
}

func (b *broker) logState() LogState {
	var eps []EpochEntry
	for i, e := range b.log {
		if len(eps) == 0 || eps[len(eps)-1].Epoch != e.epoch {
			eps = append(eps, EpochEntry{Epoch: e.epoch, StartOffset: int64(i)})
		}
	}
	return LogState{LEO: int64(len(b.log)), Epochs: eps, Durable: b.durable()}
}

// durable is the end of the broker's log that survives a crash: all of it,
// unless the cluster syncs by hand (sync=manual), then what the last sync
// covered.
func (b *broker) durable() int64 { return min(b.flushed, int64(len(b.log))) }

func (b *broker) currentHW() int64 {
	switch {
	case b.leader != nil:
		return b.leader.HW()
	case b.follower != nil:
		return b.follower.HW()
	}
	return b.hw
}

type submission struct {
	from int32
	p    Proposal
}

type notice struct {
	to             int32
	leaderEpoch    int32
	partitionEpoch int32 // ISR change
	isr            []int32
	rejected       uint64 // proposal id, for a rejection
	err            error
}

func (n notice) String() string {
	if n.rejected != 0 {
		return fmt.Sprintf("to %d: reject #%d (%s)", n.to, n.rejected, errCode(n.err))
	}
	return fmt.Sprintf("to %d: isr=%s partition-epoch=%d", n.to, FormatIDs(n.isr), n.partitionEpoch)
}

type controller struct {
	replicas       []int32
	leader         int32 // -1: none
	leaderIncarn   int64 // broker epoch of the leader when elected
	leaderEpoch    int32
	partitionEpoch int32
	isr            []int32
	minISR         int
	lagMax         time.Duration
	brokerEpochs   map[int32]int64
	manual         bool
	unclean        bool // the topic allows unclean leader election
	inbox          []submission
	outbox         []notice
}

type ackInfo struct {
	start, end int64
}

type cluster struct {
	now       time.Time
	brokers   []*broker
	ctl       controller
	out       strings.Builder
	acks      map[*Leader]map[AckID]ackInfo
	acked     map[int64]entry // records acknowledged with acks=all
	committed map[int64]entry // records ever below some leader's HW
	commitEnd int64
	shownHW   map[*Leader]int64
	seenHW    map[*Leader]int64
	seenISR   map[*Leader]int // confirmed ISR size at the last check
	nextVal   int
	// lossy: an unclean election happened, so committed and acknowledged
	// records may be gone; check no longer holds the history to them.
	lossy bool
	// manualSync (replicas ... sync=manual): appended records are durable
	// only after a "sync <broker>", and a restart loses the rest; otherwise
	// every append is durable at once (flush policy "os", or a sync that
	// never fails).
	manualSync bool
}

func newCluster() *cluster {
	return &cluster{
		now:       time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		acks:      map[*Leader]map[AckID]ackInfo{},
		acked:     map[int64]entry{},
		committed: map[int64]entry{},
		shownHW:   map[*Leader]int64{},
		seenHW:    map[*Leader]int64{},
		seenISR:   map[*Leader]int{},
	}
}

func (c *cluster) printf(format string, args ...any) {
	fmt.Fprintf(&c.out, format, args...)
	c.out.WriteByte('\n')
}

func (c *cluster) broker(id int32) *broker {
	for _, b := range c.brokers {
		if b.id == id {
			return b
		}
	}
	return nil
}

func (c *cluster) reachable(a, b *broker) bool {
	return a != nil && b != nil && a.up && b.up && !a.isolated && !b.isolated
}

// controlled reports whether b and the controller can talk.
func (b *broker) controlled() bool { return b.up && !b.isolated && !b.ctlIsolated }

// errCode names the sentinel behind err, as a wire error code would.
func errCode(err error) string {
	for _, s := range []struct {
		err  error
		code string
	}{
		{ErrNotEnoughReplicas, "not-enough-replicas"},
		{ErrNotLeader, "not-leader"},
		{ErrFencedLeaderEpoch, "fenced-leader-epoch"},
		{ErrUnknownLeaderEpoch, "unknown-leader-epoch"},
		{ErrStaleBrokerEpoch, "stale-broker-epoch"},
		{ErrNotReplica, "not-replica"},
		{ErrStalePartitionEpoch, "stale-partition-epoch"},
		{ErrOffsetOutOfRange, "offset-out-of-range"},
		{ErrTruncateBelowHW, "truncate-below-hw"},
		{ErrStaleResponse, "stale-response"},
		{ErrInvalid, "invalid"},
	} {
		if errors.Is(err, s.err) {
			return s.code
		}
	}
	return err.Error()
}

// args splits a command's arguments into positional ones and key=value ones.
type args struct {
	pos []string
	kv  map[string]string
}

func parseArgs(fields []string) args {
	a := args{kv: map[string]string{}}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else {
			a.pos = append(a.pos, f)
		}
	}
	return a
}

func (a args) int(key string, def int64) (int64, error) {
	v, ok := a.kv[key]
	if !ok {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

func parseID(s string) (int32, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	return int32(n), err
}

func parseIDs(ss []string) ([]int32, error) {
	var ids []int32
	for _, s := range ss {
		for _, p := range strings.Split(strings.Trim(s, "()"), ",") {
			if p == "" {
				continue
			}
			id, err := parseID(p)
			if err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// run executes one command line. Errors are script errors (bad syntax or
// impossible commands); protocol outcomes are printed.
func (c *cluster) run(line string) error {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}
	a := parseArgs(fields[1:])
	if fields[0] != "replicas" && len(c.brokers) == 0 {
		return fmt.Errorf("%s before replicas", fields[0])
	}
	var err error
	switch fields[0] {
	case "replicas":
		err = c.cmdReplicas(a)
	case "append", "produce":
		err = c.cmdProduce(fields[0], a)
	case "fetch":
		err = c.cmdFetch(a)
	case "tick":
		err = c.cmdTick(a)
	case "controller":
		err = c.cmdController(a)
	case "deliver":
		err = c.cmdDeliver(a)
	case "elect":
		err = c.cmdElect(a)
	case "crash", "restart", "isolate", "heal":
		err = c.cmdBroker(fields[0], a)
	case "sync":
		err = c.cmdSync(a)
	case "status":
		c.status()
	default:
		return fmt.Errorf("unknown command %q", fields[0])
	}
	if err != nil {
		return err
	}
	c.report()
	return c.check()
}

func (c *cluster) cmdReplicas(a args) error {
	if len(c.brokers) > 0 {
		return errors.New("replicas twice")
	}
	ids, err := parseIDs(a.pos)
	if err != nil || len(ids) == 0 {
		return fmt.Errorf("replicas %v: %v", a.pos, err)
	}
	leader, err := parseID(a.kv["leader"])
	if err != nil {
		return fmt.Errorf("leader: %w", err)
	}
	minISR, err := a.int("min-isr", 1)
	if err != nil {
		return err
	}
	lag := DefaultLagTimeMax
	if v, ok := a.kv["lag-max"]; ok {
		if lag, err = time.ParseDuration(v); err != nil {
			return err
		}
	}
	c.ctl = controller{replicas: ids, leader: leader, leaderEpoch: 1, partitionEpoch: 1,
		isr: slices.Clone(ids), minISR: int(minISR), lagMax: lag, brokerEpochs: map[int32]int64{},
		unclean: a.kv["unclean"] == "true"}
	c.manualSync = a.kv["sync"] == "manual"
	for _, id := range ids {
		c.brokers = append(c.brokers, &broker{id: id, brokerEpoch: 1, up: true})
		c.ctl.brokerEpochs[id] = 1
	}
	c.ctl.leaderIncarn = 1
	slices.SortFunc(c.brokers, func(x, y *broker) int { return int(x.id - y.id) })
	for _, b := range c.brokers {
		c.applyControllerState(b)
	}
	return nil
}

// cmdProduce: append|produce <broker> [acks=all] v1 v2 ...
func (c *cluster) cmdProduce(cmd string, a args) error {
	if len(a.pos) < 1 {
		return fmt.Errorf("%s: broker missing", cmd)
	}
	id, err := parseID(a.pos[0])
	if err != nil {
		return err
	}
	b := c.broker(id)
	if b == nil {
		return fmt.Errorf("no broker %d", id)
	}
	vals := a.pos[1:]
	if n, err := a.int("n", 0); err != nil {
		return err
	} else {
		for range n {
			c.nextVal++
			vals = append(vals, fmt.Sprintf("v%d", c.nextVal))
		}
	}
	acksAll := a.kv["acks"] == "all"
	switch {
	case !b.up:
		c.printf("%d: %s: down", id, cmd)
		return nil
	case b.leader == nil:
		c.printf("%d: %s: not-leader", id, cmd)
		return nil
	}
	l := b.leader
	if acksAll {
		if err := l.CanAcceptAcksAll(); err != nil {
			c.printf("%d: %s refused: %s", id, cmd, errCode(err))
			return nil
		}
	} else if err := l.CheckEpoch(l.LeaderEpoch()); err != nil {
		c.printf("%d: %s: %s", id, cmd, errCode(err))
		return nil
	}
	start := int64(len(b.log))
	for _, v := range vals {
		b.log = append(b.log, entry{epoch: l.LeaderEpoch(), val: v})
	}
	if err := l.Append(int64(len(b.log)), c.now); err != nil {
		return err
	}
	c.autoSync(b)
	line := fmt.Sprintf("%d: append [%d,%d) epoch=%d", id, start, len(b.log), l.LeaderEpoch())
	if acksAll {
		ack, err := l.WaitAcksAll(int64(len(b.log)))
		if err != nil {
			c.printf("%s ack: %s", line, errCode(err))
			return nil
		}
		if c.acks[l] == nil {
			c.acks[l] = map[AckID]ackInfo{}
		}
		c.acks[l][ack] = ackInfo{start: start, end: int64(len(b.log))}
		line += fmt.Sprintf(" ack #%d", ack)
	}
	c.printf("%s", line)
	return nil
}

// cmdFetch: fetch <follower> [max=N] [from=B] [leader-epoch=E] [broker-epoch=E]
// [offset=O] [last-epoch=E]. Without overrides it runs one full replication
// step of the follower: epoch queries and truncations as needed, then one
// fetch whose records (at most max) it appends. With an override it sends a
// single hand-made fetch and only prints the leader's answer.
func (c *cluster) cmdFetch(a args) error {
	if len(a.pos) != 1 {
		return errors.New("fetch: one follower")
	}
	id, err := parseID(a.pos[0])
	if err != nil {
		return err
	}
	b := c.broker(id)
	if b == nil {
		return fmt.Errorf("no broker %d", id)
	}
	maxRecords, err := a.int("max", -1)
	if err != nil {
		return err
	}
	if !b.up {
		c.printf("%d: fetch: down", id)
		return nil
	}
	if b.follower == nil {
		c.printf("%d: fetch: not a follower", id)
		return nil
	}
	f := b.follower
	raw := false
	for _, k := range []string{"from", "leader-epoch", "broker-epoch", "offset", "last-epoch"} {
		if _, ok := a.kv[k]; ok {
			raw = true
		}
	}
	if raw {
		return c.rawFetch(b, a)
	}
	for range 20 {
		q := f.Next(b.logState())
		lb := c.broker(f.Leader())
		if !c.reachable(b, lb) {
			c.printf("%d: fetch: leader %d unreachable", id, f.Leader())
			return nil
		}
		if lb.leader == nil {
			c.printf("%d: fetch %d: not-leader", id, lb.id)
			return nil
		}
		d, err := lb.leader.FollowerFetch(q, c.now)
		line := fmt.Sprintf("%d: fetch %d offset=%d last-epoch=%d", id, lb.id, q.FetchOffset, q.LastFetchedEpoch)
		if err != nil {
			c.printf("%s -> %s", line, errCode(err))
			return nil
		}
		if d.Diverging {
			c.printf("%s -> diverging epoch=%d end=%d", line, d.DivergingEpoch.Epoch, d.DivergingEpoch.EndOffset)
			to, err := f.HandleFetch(b.logState(), q, d)
			if err != nil {
				c.printf("%d: truncate refused: %s", id, errCode(err))
				return nil
			}
			c.truncate(b, to)
			continue
		}
		upto := d.LEO
		if maxRecords >= 0 {
			upto = min(upto, q.FetchOffset+maxRecords)
		}
		b.log = append(b.log, lb.log[q.FetchOffset:upto]...)
		c.autoSync(b)
		if _, err := f.HandleFetch(b.logState(), q, d); err != nil {
			return err
		}
		c.printf("%s -> +%d leo=%d hw=%d", line, upto-q.FetchOffset, len(b.log), f.HW())
		return nil
	}
	return errors.New("fetch: follower did not converge in 20 rounds")
}

func (c *cluster) rawFetch(b *broker, a args) error {
	req := FetchRequest{
		Replica:          b.id,
		BrokerEpoch:      b.brokerEpoch,
		LeaderEpoch:      b.follower.LeaderEpoch(),
		FetchOffset:      int64(len(b.log)),
		LastFetchedEpoch: b.logState().LatestEpoch(),
		Durable:          b.durable(),
	}
	to := b.follower.Leader()
	if v, ok := a.kv["from"]; ok {
		var err error
		if to, err = parseID(v); err != nil {
			return err
		}
	}
	for k, p := range map[string]*int64{"broker-epoch": &req.BrokerEpoch, "offset": &req.FetchOffset, "durable": &req.Durable} {
		v, err := a.int(k, *p)
		if err != nil {
			return err
		}
		*p = v
	}
	for k, p := range map[string]*int32{"leader-epoch": &req.LeaderEpoch, "last-epoch": &req.LastFetchedEpoch} {
		v, err := a.int(k, int64(*p))
		if err != nil {
			return err
		}
		*p = int32(v)
	}
	line := fmt.Sprintf("%d: fetch %d offset=%d last-epoch=%d leader-epoch=%d broker-epoch=%d",
		b.id, to, req.FetchOffset, req.LastFetchedEpoch, req.LeaderEpoch, req.BrokerEpoch)
	lb := c.broker(to)
	switch {
	case !c.reachable(b, lb):
		c.printf("%s -> unreachable", line)
	case lb.leader == nil:
		c.printf("%s -> not-leader", line)
	default:
		d, err := lb.leader.FollowerFetch(req, c.now)
		switch {
		case err != nil:
			c.printf("%s -> %s", line, errCode(err))
		case d.Diverging:
			c.printf("%s -> diverging epoch=%d end=%d", line, d.DivergingEpoch.Epoch, d.DivergingEpoch.EndOffset)
		default:
			c.printf("%s -> ok leo=%d hw=%d", line, d.LEO, d.HW)
		}
	}
	return nil
}

func (c *cluster) truncate(b *broker, to int64) {
	if to < int64(len(b.log)) {
		c.printf("%d: truncate %d -> %d", b.id, len(b.log), to)
		b.log = b.log[:to]
		b.flushed = min(b.flushed, to)
	}
}

// autoSync makes b's whole log durable unless the cluster syncs by hand.
func (c *cluster) autoSync(b *broker) {
	if !c.manualSync {
		c.syncLog(b)
	}
}

// syncLog makes b's whole log durable and tells its leadership.
func (c *cluster) syncLog(b *broker) {
	b.flushed = int64(len(b.log))
	if b.leader != nil {
		if err := b.leader.Flushed(b.flushed); err != nil && !errors.Is(err, ErrNotLeader) {
			panic(err)
		}
	}
}

// cmdSync: sync <broker>... fsyncs the brokers' logs (with sync=manual).
func (c *cluster) cmdSync(a args) error {
	ids, err := parseIDs(a.pos)
	if err != nil || len(ids) == 0 {
		return fmt.Errorf("sync %v: %v", a.pos, err)
	}
	for _, id := range ids {
		b := c.broker(id)
		if b == nil {
			return fmt.Errorf("no broker %d", id)
		}
		if !b.up {
			c.printf("%d: sync: down", id)
			continue
		}
		c.syncLog(b)
		c.printf("%d: synced to %d", id, b.flushed)
	}
	return nil
}

// cmdTick: tick [duration]. Advances the clock, then lets every leader
// propose an ISR change (or resend one that never reached the controller).
func (c *cluster) cmdTick(a args) error {
	if len(a.pos) > 0 {
		d, err := time.ParseDuration(a.pos[0])
		if err != nil {
			return err
		}
		c.now = c.now.Add(d)
	}
	for _, b := range c.brokers {
		if !b.up || b.leader == nil {
			continue
		}
		if p, ok := b.leader.Tick(c.now); ok {
			c.printf("%d: propose #%d %v partition-epoch=%d", b.id, p.ID, p, p.PartitionEpoch)
			c.submit(b, p)
		} else if p, ok := b.leader.Pending(); ok && b.unsent {
			c.printf("%d: resend #%d %v partition-epoch=%d", b.id, p.ID, p, p.PartitionEpoch)
			c.submit(b, p)
		}
	}
	return nil
}

func (c *cluster) submit(b *broker, p Proposal) {
	if !b.controlled() {
		c.printf("%d: controller unreachable", b.id)
		b.unsent = true
		return
	}
	b.unsent = false
	c.ctl.inbox = append(c.ctl.inbox, submission{from: b.id, p: p})
	if !c.ctl.manual {
		c.process()
		c.deliver(nil)
	}
}

// process applies the controller's compare-and-set to every queued
// proposal: leader epoch first, then partition epoch, then the broker
// epochs of added replicas.
func (c *cluster) process() {
	ctl := &c.ctl
	for _, s := range ctl.inbox {
		p := s.p
		var err error
		switch {
		case p.LeaderEpoch != ctl.leaderEpoch || s.from != ctl.leader:
			err = ErrFencedLeaderEpoch
		case p.PartitionEpoch != ctl.partitionEpoch:
			err = ErrStalePartitionEpoch
		default:
			for _, be := range p.BrokerEpochs {
				if nb := c.broker(be.Broker); !nb.up || ctl.brokerEpochs[be.Broker] != be.Epoch {
					err = ErrStaleBrokerEpoch
				}
			}
		}
		if err != nil {
			c.printf("controller: reject #%d %v: %s", p.ID, p, errCode(err))
			ctl.outbox = append(ctl.outbox, notice{to: s.from, leaderEpoch: p.LeaderEpoch, rejected: p.ID, err: err})
			continue
		}
		c.setISR(p.ISR)
		c.printf("controller: accept #%d %v partition-epoch=%d", p.ID, p, ctl.partitionEpoch)
		ctl.outbox = append(ctl.outbox, notice{to: s.from, leaderEpoch: ctl.leaderEpoch,
			partitionEpoch: ctl.partitionEpoch, isr: slices.Clone(ctl.isr)})
	}
	ctl.inbox = nil
}

// setISR changes the controller's ISR and bumps the partition epoch.
func (c *cluster) setISR(isr []int32) {
	c.ctl.isr = slices.Sorted(slices.Values(isr))
	c.ctl.partitionEpoch++
	for _, b := range c.brokers {
		if !slices.Contains(c.ctl.isr, b.id) {
			b.damaged = false
		}
	}
}

// deliver sends the queued notices with the given 0-based indexes, all in
// order when order is nil.
func (c *cluster) deliver(order []int) {
	box := c.ctl.outbox
	if order == nil {
		order = make([]int, len(box))
		for i := range order {
			order[i] = i
		}
	}
	var keep []notice
	for i, n := range box {
		if !slices.Contains(order, i) {
			keep = append(keep, n)
		}
	}
	c.ctl.outbox = keep
	for _, i := range order {
		n := box[i]
		b := c.broker(n.to)
		switch {
		case !b.controlled():
			c.printf("%d: dropped %v", n.to, n)
		case b.leader == nil || b.leader.LeaderEpoch() != n.leaderEpoch:
			c.printf("%d: ignored %v: not leader in epoch %d", n.to, n, n.leaderEpoch)
		case n.rejected != 0:
			b.leader.ProposalRejected(n.rejected, n.err)
			_, pending := b.leader.Pending()
			c.printf("%d: rejected #%d (%s) pending=%v", n.to, n.rejected, errCode(n.err), pending)
		default:
			if err := b.leader.ISRChanged(n.partitionEpoch, n.isr); err != nil {
				c.printf("%d: isr=%s partition-epoch=%d ignored: %s", n.to, FormatIDs(n.isr), n.partitionEpoch, errCode(err))
			} else {
				c.printf("%d: isr=%s partition-epoch=%d", n.to, FormatIDs(n.isr), n.partitionEpoch)
			}
		}
	}
}

// cmdController: controller manual|auto|process|isr <ids>
func (c *cluster) cmdController(a args) error {
	if len(a.pos) == 0 {
		return errors.New("controller: what?")
	}
	switch a.pos[0] {
	case "manual":
		c.ctl.manual = true
	case "auto":
		c.ctl.manual = false
		c.process()
		c.deliver(nil)
	case "process":
		c.process()
		for i, n := range c.ctl.outbox {
			c.printf("controller: outbox %d %v", i+1, n)
		}
	case "isr":
		ids, err := parseIDs(a.pos[1:])
		if err != nil {
			return err
		}
		c.setISR(ids)
		c.printf("controller: isr=%s partition-epoch=%d", FormatIDs(c.ctl.isr), c.ctl.partitionEpoch)
		if c.ctl.leader >= 0 {
			c.ctl.outbox = append(c.ctl.outbox, notice{to: c.ctl.leader, leaderEpoch: c.ctl.leaderEpoch,
				partitionEpoch: c.ctl.partitionEpoch, isr: slices.Clone(c.ctl.isr)})
		}
		if !c.ctl.manual {
			c.deliver(nil)
		}
	default:
		return fmt.Errorf("controller %s?", a.pos[0])
	}
	return nil
}

// cmdDeliver: deliver [all|reverse|N...] (1-based outbox positions).
func (c *cluster) cmdDeliver(a args) error {
	if len(a.pos) == 0 || a.pos[0] == "all" {
		c.deliver(nil)
		return nil
	}
	var order []int
	if a.pos[0] == "reverse" {
		for i := len(c.ctl.outbox) - 1; i >= 0; i-- {
			order = append(order, i)
		}
	} else {
		for _, s := range a.pos {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > len(c.ctl.outbox) {
				return fmt.Errorf("deliver %s: outbox has %d", s, len(c.ctl.outbox))
			}
			order = append(order, n-1)
		}
	}
	c.deliver(order)
	return nil
}

// cmdElect: elect <broker> [isr=1,2] [unclean]. The controller elects from
// the ISR only (unless unclean), bumps the leader and partition epochs, and
// drops an unreachable old leader from the ISR.
func (c *cluster) cmdElect(a args) error {
	if len(a.pos) < 1 {
		return errors.New("elect: broker missing")
	}
	id, err := parseID(a.pos[0])
	if err != nil {
		return err
	}
	b := c.broker(id)
	if b == nil {
		return fmt.Errorf("no broker %d", id)
	}
	ctl := &c.ctl
	unclean := slices.Contains(a.pos[1:], "unclean")
	switch {
	case !b.controlled():
		c.printf("controller: elect %d refused: unreachable", id)
		return nil
	case !slices.Contains(ctl.isr, id) && !unclean:
		c.printf("controller: elect %d refused: not in ISR %s", id, FormatIDs(ctl.isr))
		return nil
	}
	isr := slices.Clone(ctl.isr)
	if v, ok := a.kv["isr"]; ok {
		if isr, err = parseIDs([]string{v}); err != nil {
			return err
		}
	} else if old := c.broker(ctl.leader); old != nil && old.id != id && !old.controlled() {
		isr = slices.DeleteFunc(isr, func(x int32) bool { return x == old.id })
	}
	if unclean {
		isr = []int32{id}
		c.lossy = true
	}
	if !slices.Contains(isr, id) {
		isr = append(isr, id)
	}
	ctl.leader, ctl.leaderIncarn = id, b.brokerEpoch
	ctl.leaderEpoch++
	c.setISR(isr)
	c.printf("controller: leader=%d epoch=%d isr=%s partition-epoch=%d", id, ctl.leaderEpoch, FormatIDs(ctl.isr), ctl.partitionEpoch)
	for _, x := range c.brokers {
		if x.controlled() {
			c.applyControllerState(x)
		}
	}
	return nil
}

// applyControllerState makes a reachable broker act on the controller's
// current leadership, as it would on a metadata update.
func (c *cluster) applyControllerState(b *broker) {
	ctl := &c.ctl
	if b.leader != nil && (b.id != ctl.leader || b.leader.LeaderEpoch() < ctl.leaderEpoch) {
		c.resign(b)
	}
	if b.id == ctl.leader {
		if b.brokerEpoch != ctl.leaderIncarn {
			return // restarted since its election: it waits for a new one
		}
		if b.leader != nil {
			if b.leader.PartitionEpoch() < ctl.partitionEpoch {
				if err := b.leader.ISRChanged(ctl.partitionEpoch, ctl.isr); err == nil {
					c.printf("%d: isr=%s partition-epoch=%d", b.id, FormatIDs(ctl.isr), ctl.partitionEpoch)
				}
			}
			return
		}
		b.hw = min(b.currentHW(), int64(len(b.log)))
		b.follower = nil
		eps := map[int32]int64{}
		for _, x := range c.brokers {
			if x.up {
				eps[x.id] = ctl.brokerEpochs[x.id]
			}
		}
		l, err := NewLeader(LeaderParams{Self: b.id, Replicas: ctl.replicas, ISR: ctl.isr,
			LeaderEpoch: ctl.leaderEpoch, PartitionEpoch: ctl.partitionEpoch, MinISR: ctl.minISR,
			LagTimeMax: ctl.lagMax, Log: b.logState(), HW: b.hw, BrokerEpochs: eps, Now: c.now})
		if err != nil {
			c.printf("%d: become leader: %v", b.id, err)
			return
		}
		b.leader = l
		c.shownHW[l] = l.HW()
		c.printf("%d: leader epoch=%d leo=%d hw=%d isr=%s", b.id, l.LeaderEpoch(), l.LEO(), l.HW(), FormatIDs(l.ISR()))
		return
	}
	if ctl.leader < 0 || !slices.Contains(ctl.replicas, b.id) {
		return
	}
	if b.follower == nil {
		f, err := NewFollower(FollowerParams{Self: b.id, BrokerEpoch: b.brokerEpoch, Leader: ctl.leader,
			LeaderEpoch: ctl.leaderEpoch, HW: min(b.hw, int64(len(b.log))), Unclean: ctl.unclean})
		if err != nil {
			c.printf("%d: become follower: %v", b.id, err)
			return
		}
		b.follower = f
		c.printf("%d: follow %d epoch=%d", b.id, ctl.leader, ctl.leaderEpoch)
	} else if b.follower.LeaderEpoch() < ctl.leaderEpoch {
		if err := b.follower.BecomeFollower(ctl.leader, ctl.leaderEpoch); err != nil {
			c.printf("%d: follow: %v", b.id, errCode(err))
			return
		}
		c.printf("%d: follow %d epoch=%d", b.id, ctl.leader, ctl.leaderEpoch)
	}
}

func (c *cluster) resign(b *broker) {
	l := b.leader
	if err := l.Resign(c.ctl.leaderEpoch); err != nil {
		c.printf("%d: resign: %s", b.id, errCode(err))
	} else {
		c.printf("%d: resign epoch=%d -> %d", b.id, l.LeaderEpoch(), c.ctl.leaderEpoch)
	}
	c.drainAcks(b)
	b.hw = l.HW()
	b.leader = nil
}

// cmdBroker: crash|restart|isolate|heal <broker> [lose=N] [empty]
// [controller]. isolate cuts every link of the broker, or with "controller"
// only its link to the controller; heal restores them and delivers the
// controller's current state.
func (c *cluster) cmdBroker(cmd string, a args) error {
	if len(a.pos) < 1 {
		return fmt.Errorf("%s: broker missing", cmd)
	}
	id, err := parseID(a.pos[0])
	if err != nil {
		return err
	}
	b := c.broker(id)
	if b == nil {
		return fmt.Errorf("no broker %d", id)
	}
	switch cmd {
	case "crash":
		if b.leader != nil {
			c.drainAcks(b)
		}
		b.hw = min(b.currentHW(), int64(len(b.log)))
		b.up, b.leader, b.follower = false, nil, nil
		c.printf("%d: crashed", id)
	case "restart":
		if b.up {
			return fmt.Errorf("restart %d: it is up", id)
		}
		lose, err := a.int("lose", 0)
		if err != nil {
			return err
		}
		if slices.Contains(a.pos[1:], "empty") {
			lose = int64(len(b.log))
		}
		lose = min(lose, int64(len(b.log)))
		b.log = b.log[:int64(len(b.log))-lose]
		if c.manualSync {
			b.log = b.log[:b.durable()] // the crash took what was not synced
		}
		b.flushed = int64(len(b.log))
		if int64(len(b.log)) < c.commitEnd && slices.Contains(c.ctl.isr, b.id) {
			b.damaged = true
		}
		b.hw = min(b.hw, int64(len(b.log)))
		b.brokerEpoch++
		c.ctl.brokerEpochs[id] = b.brokerEpoch
		b.up = true
		c.printf("%d: restarted broker-epoch=%d leo=%d", id, b.brokerEpoch, len(b.log))
		if b.controlled() {
			c.applyControllerState(b)
		}
	case "isolate":
		if slices.Contains(a.pos[1:], "controller") {
			b.ctlIsolated = true
			c.printf("%d: isolated from the controller", id)
		} else {
			b.isolated = true
			c.printf("%d: isolated", id)
		}
	case "heal":
		b.isolated, b.ctlIsolated = false, false
		c.printf("%d: healed", id)
		if b.up {
			c.applyControllerState(b)
		}
	}
	return nil
}

func (c *cluster) drainAcks(b *broker) {
	l := b.leader
	for _, r := range l.TakeAcks() {
		info := c.acks[l][r.ID]
		delete(c.acks[l], r.ID)
		if r.Err != nil {
			c.printf("%d: ack #%d [%d,%d) failed: %s", b.id, r.ID, info.start, info.end, errCode(r.Err))
			continue
		}
		c.printf("%d: ack #%d [%d,%d) ok", b.id, r.ID, info.start, info.end)
		for o := info.start; o < info.end; o++ {
			c.acked[o] = b.log[o]
		}
	}
}

// report prints what changed on the leaders: the HW, then finished acks.
func (c *cluster) report() {
	for _, b := range c.brokers {
		if b.leader == nil {
			continue
		}
		if hw := b.leader.HW(); hw != c.shownHW[b.leader] {
			c.shownHW[b.leader] = hw
			c.printf("%d: hw=%d", b.id, hw)
		}
		c.drainAcks(b)
	}
}

func (c *cluster) status() {
	ctl := &c.ctl
	c.printf("controller: leader=%d epoch=%d isr=%s partition-epoch=%d", ctl.leader, ctl.leaderEpoch, FormatIDs(ctl.isr), ctl.partitionEpoch)
	for _, b := range c.brokers {
		var s strings.Builder
		fmt.Fprintf(&s, "%d:", b.id)
		switch {
		case !b.up:
			s.WriteString(" down")
		case b.leader != nil:
			l := b.leader
			fmt.Fprintf(&s, " leader epoch=%d isr=%s", l.LeaderEpoch(), FormatIDs(l.ISR()))
			if m := l.MaximalISR(); !slices.Equal(m, l.ISR()) {
				fmt.Fprintf(&s, " maximal=%s", FormatIDs(m))
			}
			fmt.Fprintf(&s, " partition-epoch=%d", l.PartitionEpoch())
			if l.Resigned() {
				s.WriteString(" resigned")
			}
		case b.follower != nil:
			fmt.Fprintf(&s, " follower of %d epoch=%d", b.follower.Leader(), b.follower.LeaderEpoch())
		}
		if b.isolated {
			s.WriteString(" isolated")
		} else if b.ctlIsolated {
			s.WriteString(" isolated-from-controller")
		}
		fmt.Fprintf(&s, " leo=%d hw=%d log=%v", len(b.log), b.currentHW(), b.log)
		c.printf("%s", s.String())
	}
}

// check verifies the invariants of doc.go against the simulated logs.
func (c *cluster) check() error {
	for _, b := range c.brokers {
		if f := b.follower; f != nil && f.HW() > int64(len(b.log)) {
			return fmt.Errorf("follower %d HW %d above its LEO %d", b.id, f.HW(), len(b.log))
		}
		l := b.leader
		if l == nil || l.Resigned() {
			continue
		}
		hw := l.HW()
		prev, seen := c.seenHW[l]
		switch {
		case seen && hw < prev:
			return fmt.Errorf("leader %d HW went back %d -> %d", b.id, prev, hw)
		case seen && hw > prev && len(l.ISR()) < c.ctl.minISR && c.seenISR[l] < c.ctl.minISR:
			return fmt.Errorf("leader %d HW advanced %d -> %d with ISR %s below min ISR", b.id, prev, hw, FormatIDs(l.ISR()))
		case hw > int64(len(b.log)) || l.LEO() != int64(len(b.log)):
			return fmt.Errorf("leader %d HW %d, LEO %d, log %d", b.id, hw, l.LEO(), len(b.log))
		}
		c.seenHW[l], c.seenISR[l] = hw, len(l.ISR())
		for _, m := range l.ISR() {
			mb := c.broker(m)
			if mb.damaged {
				continue
			}
			if int64(len(mb.log)) < hw {
				return fmt.Errorf("leader %d HW %d above LEO %d of ISR member %d", b.id, hw, len(mb.log), m)
			}
			if mb.up && mb.durable() < hw {
				return fmt.Errorf("leader %d HW %d above the durable end %d of ISR member %d", b.id, hw, mb.durable(), m)
			}
			for o := range hw {
				if mb.log[o] != b.log[o] {
					return fmt.Errorf("ISR member %d has %v at %d below HW %d, leader %d has %v", m, mb.log[o], o, hw, b.id, b.log[o])
				}
			}
		}
		for o := range hw {
			if c.lossy {
				break
			}
			if e, ok := c.committed[o]; ok && e != b.log[o] {
				return fmt.Errorf("offset %d committed as %v, leader %d has %v below its HW", o, e, b.id, b.log[o])
			}
			c.committed[o] = b.log[o]
		}
		c.commitEnd = max(c.commitEnd, hw)
	}
	for o, e := range c.acked {
		if c.lossy {
			break
		}
		for _, m := range c.ctl.isr {
			mb := c.broker(m)
			if mb.damaged {
				continue
			}
			if o >= int64(len(mb.log)) || mb.log[o] != e {
				return fmt.Errorf("acknowledged %v at %d missing on ISR member %d (log %v)", e, o, m, mb.log)
			}
		}
	}
	return nil
}
