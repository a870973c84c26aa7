package replica

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// DefaultLagTimeMax is Kafka's default replica.lag.time.max.ms.
const DefaultLagTimeMax = 30 * time.Second

// Config holds the broker-wide replication settings.
type Config struct {
	// LagTimeMax is replica.lag.time.max: a follower whose fetches have not
	// caught up to the leader's LEO for longer than this leaves the ISR
	// (one that stopped fetching too, whatever LEO it last reported).
	LagTimeMax time.Duration
}

// Validate names the bad field and the allowed range.
func (c Config) Validate() error {
	if c.LagTimeMax <= 0 {
		return fmt.Errorf("replication lag time max %v: must be positive: %w", c.LagTimeMax, ErrInvalid)
	}
	return nil
}

// LeaderParams describe the partition at the moment this broker becomes its
// leader, as assigned by the controller, and the local log at that moment.
type LeaderParams struct {
	Self           int32
	Replicas       []int32 // every replica, including Self
	ISR            []int32 // the controller's ISR; must contain Self
	LeaderEpoch    int32
	PartitionEpoch int32
	MinISR         int // min.insync.replicas, at least 1
	LagTimeMax     time.Duration
	// Log is the local log: its LEO becomes the leader epoch start offset
	// and its epoch cache (plus LeaderEpoch at that offset) answers
	// followers' end offset queries; its Durable is the leader's own
	// durable end until Flushed reports more. A leader never truncates.
	Log LogState
	// HW is the local high watermark (at most Log.LEO).
	HW int64
	// BrokerEpochs optionally holds the registered broker epochs of the
	// replicas; fetches from older incarnations are refused.
	BrokerEpochs map[int32]int64
	Now          time.Time
}

// ProposalKind says whether a proposal removes or adds ISR members.
type ProposalKind int

const (
	// Shrink removes followers that lag or lost data.
	Shrink ProposalKind = iota + 1
	// Expand adds followers that caught up.
	Expand
)

func (k ProposalKind) String() string {
	switch k {
	case Shrink:
		return "isr-shrink"
	case Expand:
		return "isr-expand"
	}
	return fmt.Sprintf("ProposalKind(%d)", int(k))
}

// BrokerEpoch names one incarnation of a broker.
type BrokerEpoch struct {
	Broker int32
	Epoch  int64
}

// Proposal is an ISR change the leader asks the controller to make. The
// controller applies it with compare-and-set: only if the partition is still
// at PartitionEpoch under LeaderEpoch, and, for an expansion, each added
// broker is still at the given broker epoch (KIP-903).
type Proposal struct {
	ID             uint64
	Kind           ProposalKind
	LeaderEpoch    int32
	PartitionEpoch int32   // the partition epoch the change is based on
	From           []int32 // the ISR it replaces
	ISR            []int32 // the proposed ISR
	BrokerEpochs   []BrokerEpoch
}

func (p Proposal) String() string {
	return fmt.Sprintf("%v %s -> %s", p.Kind, FormatIDs(p.From), FormatIDs(p.ISR))
}

// FetchRequest is a follower's fetch. FetchOffset is the follower's LEO,
// LastFetchedEpoch the epoch of its last batch (UndefinedEpoch for an empty
// log) and Durable the end of its durable prefix (LogState.Durable, at most
// FetchOffset): the leader counts the follower toward the HW only up to
// Durable, and toward ISR membership up to FetchOffset.
type FetchRequest struct {
	Replica          int32
	BrokerEpoch      int64
	LeaderEpoch      int32 // the requester's view of the current leader epoch
	FetchOffset      int64
	LastFetchedEpoch int32
	Durable          int64
}

// FetchDecision is the leader's answer to a fetch. When Diverging is set the
// follower's log disagrees with the leader's at or before FetchOffset: the
// leader sends no records and the follower truncates (see
// Follower.HandleFetch) before fetching again. Otherwise the caller sends
// records from FetchOffset up to LEO.
type FetchDecision struct {
	HW             int64
	LEO            int64
	Diverging      bool
	DivergingEpoch EpochEndOffset
}

// AckID identifies an acks=all registration.
type AckID uint64

// AckResult reports the end of an acks=all wait: Err is nil when every ISR
// member holds the records below End and the ISR had at least
// min.insync.replicas members, ErrNotEnoughReplicas when the ISR shrank
// below min.insync.replicas first, ErrNotLeader when leadership was lost.
type AckResult struct {
	ID  AckID
	End int64
	Err error
}

type pendingAck struct {
	id  AckID
	end int64
}

// remote is the leader's view of one follower.
type remote struct {
	brokerEpoch        int64 // -1: unknown
	leo                int64 // -1: unknown in this leader epoch
	durable            int64 // end of its durable prefix; -1: unknown in this leader epoch
	lastCaughtUp       time.Time
	lastFetchLeaderLEO int64
	lastFetch          time.Time
	lostData           bool // an ISR member reported a LEO below the HW
	// fetchedSinceOut: it fetched since it last left the ISR or was last
	// refused entry. Only such a follower may be proposed for expansion,
	// so a dead one is not proposed again and again on its old position,
	// and a refused one at most once per fetch.
	fetchedSinceOut bool
}

// Leader is the replication state machine of a partition's leader. It is
// not safe for concurrent use: its owner serialises calls. It does no I/O
// and reads no clock; every time is an argument.
type Leader struct {
	self           int32
	replicas       []int32
	isr            []int32
	pending        *Proposal
	leaderEpoch    int32
	partitionEpoch int32
	minISR         int
	lagMax         time.Duration
	epochs         []EpochEntry
	epochStart     int64
	leo, hw        int64
	durable        int64 // end of the local log's durable prefix (≤ leo)
	followers      map[int32]*remote
	acks           []pendingAck
	done           []AckResult
	nextAck        AckID
	nextProposal   uint64
	resigned       bool
}

// NewLeader returns the state machine of a new leader. Followers' LEOs are
// unknown until they fetch, so the HW does not advance before every ISR
// member has fetched in this leader epoch; ISR members count as caught up at
// p.Now.
func NewLeader(p LeaderParams) (*Leader, error) {
	replicas, err := idSet("replicas", p.Replicas)
	if err != nil {
		return nil, err
	}
	isr, err := idSet("ISR", p.ISR)
	if err != nil {
		return nil, err
	}
	switch {
	case !slices.Contains(replicas, p.Self):
		return nil, fmt.Errorf("leader %d not among replicas %s: %w", p.Self, FormatIDs(replicas), ErrInvalid)
	case !slices.Contains(isr, p.Self):
		return nil, fmt.Errorf("leader %d not in ISR %s: %w", p.Self, FormatIDs(isr), ErrInvalid)
	case !subset(isr, replicas):
		return nil, fmt.Errorf("ISR %s not within replicas %s: %w", FormatIDs(isr), FormatIDs(replicas), ErrInvalid)
	case p.LeaderEpoch < 0 || p.PartitionEpoch < 0:
		return nil, fmt.Errorf("leader epoch %d, partition epoch %d: must not be negative: %w", p.LeaderEpoch, p.PartitionEpoch, ErrInvalid)
	case p.MinISR < 1:
		return nil, fmt.Errorf("min ISR %d: must be at least 1: %w", p.MinISR, ErrInvalid)
	case p.LagTimeMax <= 0:
		return nil, fmt.Errorf("lag time max %v: must be positive: %w", p.LagTimeMax, ErrInvalid)
	case p.HW < 0 || p.HW > p.Log.LEO:
		return nil, fmt.Errorf("HW %d outside [0, LEO %d]: %w", p.HW, p.Log.LEO, ErrInvalid)
	case p.Log.Durable < 0 || p.Log.Durable > p.Log.LEO:
		return nil, fmt.Errorf("durable end %d outside [0, LEO %d]: %w", p.Log.Durable, p.Log.LEO, ErrInvalid)
	}
	if err := checkEpochs(p.Log.Epochs, p.Log.LEO); err != nil {
		return nil, err
	}
	if e := p.Log.LatestEpoch(); e > p.LeaderEpoch {
		return nil, fmt.Errorf("log has epoch %d above leader epoch %d: %w", e, p.LeaderEpoch, ErrFencedLeaderEpoch)
	}
	l := &Leader{
		self:           p.Self,
		replicas:       replicas,
		isr:            isr,
		leaderEpoch:    p.LeaderEpoch,
		partitionEpoch: p.PartitionEpoch,
		minISR:         p.MinISR,
		lagMax:         p.LagTimeMax,
		epochs:         assignEpoch(p.Log.Epochs, p.LeaderEpoch, p.Log.LEO),
		leo:            p.Log.LEO,
		hw:             p.HW,
		durable:        p.Log.Durable,
		followers:      make(map[int32]*remote, len(replicas)-1),
		nextAck:        1,
		nextProposal:   1,
	}
	l.epochStart = l.epochs[len(l.epochs)-1].StartOffset
	for _, id := range replicas {
		if id == p.Self {
			continue
		}
		r := &remote{brokerEpoch: -1, leo: -1, durable: -1, lastFetchLeaderLEO: -1}
		if e, ok := p.BrokerEpochs[id]; ok {
			r.brokerEpoch = e
		}
		if slices.Contains(isr, id) {
			r.lastCaughtUp = p.Now
		}
		l.followers[id] = r
	}
	l.maybeAdvanceHW()
	return l, nil
}

// CheckEpoch fences a request that carries leaderEpoch: nil when it is this
// leader's epoch, ErrFencedLeaderEpoch when older (the sender is stale),
// ErrUnknownLeaderEpoch when newer (this leader may be stale), ErrNotLeader
// after Resign. Every produce and replication request goes through it.
func (l *Leader) CheckEpoch(leaderEpoch int32) error {
	switch {
	case l.resigned:
		return ErrNotLeader
	case leaderEpoch < l.leaderEpoch:
		return fmt.Errorf("request epoch %d, leader epoch %d: %w", leaderEpoch, l.leaderEpoch, ErrFencedLeaderEpoch)
	case leaderEpoch > l.leaderEpoch:
		return fmt.Errorf("request epoch %d, leader epoch %d: %w", leaderEpoch, l.leaderEpoch, ErrUnknownLeaderEpoch)
	}
	return nil
}

// Append records that the local log appended batches (stamped with this
// leader's epoch) and now ends at leo: followers may fetch up to it. leo
// never decreases. The new records count toward the HW only once Flushed
// reports them durable.
func (l *Leader) Append(leo int64, now time.Time) error {
	if l.resigned {
		return ErrNotLeader
	}
	if leo < l.leo {
		return fmt.Errorf("append to LEO %d below %d: %w", leo, l.leo, ErrInvalid)
	}
	l.leo = leo
	return nil
}

// Flushed records that the local log is durable below durable (its
// LogState.Durable; at most the LEO given to Append). A lower value than
// already known changes nothing: a leader's log never shrinks. With a
// one-member ISR and min ISR 1 it advances the HW.
func (l *Leader) Flushed(durable int64) error {
	if l.resigned {
		return ErrNotLeader
	}
	if durable > l.leo {
		return fmt.Errorf("durable end %d above LEO %d: %w", durable, l.leo, ErrInvalid)
	}
	if durable > l.durable {
		l.durable = durable
		l.maybeAdvanceHW()
	}
	return nil
}

// FollowerFetch handles a follower's fetch. It fences the leader epoch,
// refuses non-replicas (ErrNotReplica) and older broker incarnations
// (ErrStaleBrokerEpoch). When the follower's last fetched epoch ends earlier
// on the leader than its fetch offset (or is unknown to it) the follower
// diverged (KIP-101, KIP-279): the decision carries the leader's epoch end
// offset and nothing about the follower changes. Otherwise the fetch offset
// becomes the follower's LEO, its last caught-up time is updated as in
// Kafka (caught up if it reached the leader's LEO now, or the leader's LEO
// of its previous fetch, as of that fetch), and the HW may advance.
func (l *Leader) FollowerFetch(req FetchRequest, now time.Time) (FetchDecision, error) {
	if err := l.CheckEpoch(req.LeaderEpoch); err != nil {
		return FetchDecision{}, err
	}
	r, ok := l.followers[req.Replica]
	if !ok {
		return FetchDecision{}, fmt.Errorf("broker %d: %w", req.Replica, ErrNotReplica)
	}
	if req.BrokerEpoch < r.brokerEpoch {
		return FetchDecision{}, fmt.Errorf("broker %d epoch %d, known %d: %w", req.Replica, req.BrokerEpoch, r.brokerEpoch, ErrStaleBrokerEpoch)
	}
	if req.FetchOffset < 0 || req.Durable < 0 || req.Durable > req.FetchOffset {
		return FetchDecision{}, fmt.Errorf("fetch offset %d, durable end %d: %w", req.FetchOffset, req.Durable, ErrInvalid)
	}
	r.brokerEpoch = req.BrokerEpoch
	if req.LastFetchedEpoch != UndefinedEpoch {
		end := EndOffsetFor(l.epochs, req.LastFetchedEpoch, l.leo)
		if end.Undefined() || end.Epoch < req.LastFetchedEpoch || end.EndOffset < req.FetchOffset {
			return FetchDecision{HW: l.hw, LEO: l.leo, Diverging: true, DivergingEpoch: end}, nil
		}
	} else if req.FetchOffset > l.leo {
		return FetchDecision{}, fmt.Errorf("fetch offset %d, LEO %d: %w", req.FetchOffset, l.leo, ErrOffsetOutOfRange)
	}
	r.leo, r.durable, r.fetchedSinceOut = req.FetchOffset, req.Durable, true
	switch {
	case req.FetchOffset >= l.leo:
		r.lastCaughtUp = now
	case req.FetchOffset >= r.lastFetchLeaderLEO && r.lastFetch.After(r.lastCaughtUp):
		r.lastCaughtUp = r.lastFetch
	}
	r.lastFetchLeaderLEO, r.lastFetch = l.leo, now
	if req.FetchOffset < l.hw && slices.Contains(l.MaximalISR(), req.Replica) {
		r.lostData = true
	}
	l.maybeAdvanceHW()
	return FetchDecision{HW: l.hw, LEO: l.leo}, nil
}

// Tick returns the next ISR change to propose to the controller, if any.
// Only one proposal is in flight at a time: none is returned while one is
// pending. Shrinks come first: an ISR follower leaves when it reported a LEO
// below the HW (it lost data) or when it has not caught up to the leader's
// LEO for longer than the lag time max (Kafka's lastCaughtUpTime; an idle
// follower that stopped fetching leaves too, whatever LEO it last
// reported). Otherwise every non-ISR replica that is in sync by the same
// criterion, whose durable end reached the HW, whose LEO reached this
// leader epoch's start offset and that fetched since it last left the ISR
// or was last refused entry (ProposalRejected) is added; using one
// criterion both ways keeps a slow follower from flapping in and out, and
// requiring a newer fetch keeps a dead or refused follower from being
// proposed on every call. Call it periodically and after events; it is
// cheap.
func (l *Leader) Tick(now time.Time) (Proposal, bool) {
	if l.resigned || l.pending != nil {
		return Proposal{}, false
	}
	var out []int32
	for _, id := range l.isr {
		if id == l.self {
			continue
		}
		r := l.followers[id]
		if r.lostData || !l.inSync(r, now) {
			out = append(out, id)
		}
	}
	p := Proposal{LeaderEpoch: l.leaderEpoch, PartitionEpoch: l.partitionEpoch, From: slices.Clone(l.isr)}
	if len(out) > 0 {
		p.Kind = Shrink
		p.ISR = slices.DeleteFunc(slices.Clone(l.isr), func(id int32) bool { return slices.Contains(out, id) })
	} else {
		p.ISR = slices.Clone(l.isr)
		for _, id := range l.replicas {
			r, ok := l.followers[id]
			if !ok || slices.Contains(l.isr, id) {
				continue
			}
			// The HW must be durable on it too: once in the ISR it may be
			// elected, and a crash of every replica must not lose what
			// was committed.
			if r.fetchedSinceOut && r.durable >= l.hw && r.leo >= l.epochStart && l.inSync(r, now) {
				p.ISR = append(p.ISR, id)
				p.BrokerEpochs = append(p.BrokerEpochs, BrokerEpoch{Broker: id, Epoch: r.brokerEpoch})
			}
		}
		if len(p.BrokerEpochs) == 0 {
			return Proposal{}, false
		}
		p.Kind = Expand
		slices.Sort(p.ISR)
	}
	p.ID = l.nextProposal
	l.nextProposal++
	l.pending = &p
	return p, true
}

// inSync is the criterion for ISR membership both ways: the follower
// caught up to the leader's LEO, by a fetch in this leader epoch, within the
// lag time max (an ISR member counts as caught up when the leadership
// began). Unlike Kafka's isCaughtUp it has no "LEO equals the leader's"
// shortcut: the leader's view of a follower's LEO is only as fresh as its
// last fetch, and an idle follower that stopped fetching (a dead broker)
// would otherwise stay in sync forever. A live idle follower keeps fetching
// at the leader's LEO, so it stays caught up.
func (l *Leader) inSync(r *remote, now time.Time) bool {
	return now.Sub(r.lastCaughtUp) <= l.lagMax
}

// Pending returns the proposal in flight, to resend after a timeout.
func (l *Leader) Pending() (Proposal, bool) {
	if l.pending == nil {
		return Proposal{}, false
	}
	return *l.pending, true
}

// ProposalRejected reports that the controller refused proposal id with
// err. A stale partition epoch (ErrStalePartitionEpoch) means the controller
// is ahead, perhaps because it applied this very proposal earlier: the
// proposal stays pending until ISRChanged brings the newer state. Any other
// refusal (a stale broker epoch of an added replica, a fenced leader epoch)
// is definitive, provided the controller checks the partition epoch first,
// and drops the proposal so that Tick may propose again; an expansion's
// added followers are proposed again only after their next fetch. Never
// call it when the outcome is unknown (a timeout): resend Pending instead,
// since until it is known the leader must keep counting added replicas for
// the HW.
func (l *Leader) ProposalRejected(id uint64, err error) {
	if l.pending != nil && l.pending.ID == id && !errors.Is(err, ErrStalePartitionEpoch) {
		if l.pending.Kind == Expand {
			for _, be := range l.pending.BrokerEpochs {
				if r := l.followers[be.Broker]; r != nil {
					r.fetchedSinceOut = false
				}
			}
		}
		l.pending = nil
	}
}

// ISRChanged applies the controller's ISR at partitionEpoch. The controller
// is authoritative: any newer state replaces the ISR and ends the pending
// proposal (the controller applied it, or will refuse it by compare-and-set).
// A partitionEpoch at or below the current one is stale and ignored
// (ErrStalePartitionEpoch). When the ISR drops below min ISR every pending
// acks=all wait fails with ErrNotEnoughReplicas.
func (l *Leader) ISRChanged(partitionEpoch int32, isr []int32) error {
	if l.resigned {
		return ErrNotLeader
	}
	if partitionEpoch <= l.partitionEpoch {
		return fmt.Errorf("partition epoch %d, current %d: %w", partitionEpoch, l.partitionEpoch, ErrStalePartitionEpoch)
	}
	set, err := idSet("ISR", isr)
	if err != nil {
		return err
	}
	if !slices.Contains(set, l.self) || !subset(set, l.replicas) {
		return fmt.Errorf("ISR %s must contain leader %d and be within replicas %s: %w", FormatIDs(set), l.self, FormatIDs(l.replicas), ErrInvalid)
	}
	for _, id := range l.isr {
		if r := l.followers[id]; r != nil && !slices.Contains(set, id) {
			r.lostData, r.fetchedSinceOut = false, false
		}
	}
	l.isr, l.partitionEpoch, l.pending = set, partitionEpoch, nil
	if len(l.isr) < l.minISR {
		l.failAcks(fmt.Errorf("ISR %s below min ISR %d: %w", FormatIDs(l.isr), l.minISR, ErrNotEnoughReplicas))
	}
	l.maybeAdvanceHW()
	return nil
}

// SetMinISR applies a changed min.insync.replicas without a leadership
// change (rebuilding the Leader would forget a pending ISR proposal). A
// larger value that the ISR no longer meets fails pending acks=all waits
// with ErrNotEnoughReplicas and freezes the HW; a smaller one may let it
// advance.
func (l *Leader) SetMinISR(n int) error {
	if n < 1 {
		return fmt.Errorf("min ISR %d: must be at least 1: %w", n, ErrInvalid)
	}
	if l.resigned {
		return ErrNotLeader
	}
	l.minISR = n
	if len(l.isr) < l.minISR {
		l.failAcks(fmt.Errorf("ISR %s below min ISR %d: %w", FormatIDs(l.isr), l.minISR, ErrNotEnoughReplicas))
	}
	l.maybeAdvanceHW()
	return nil
}

// CanAcceptAcksAll reports whether an acks=all produce may be appended now:
// ErrNotEnoughReplicas when the ISR is smaller than min ISR (the produce is
// refused, never downgraded), ErrNotLeader after Resign.
func (l *Leader) CanAcceptAcksAll() error {
	if l.resigned {
		return ErrNotLeader
	}
	if len(l.isr) < l.minISR {
		return fmt.Errorf("ISR %s below min ISR %d: %w", FormatIDs(l.isr), l.minISR, ErrNotEnoughReplicas)
	}
	return nil
}

// WaitAcksAll registers an acks=all wait for the records below end (the LEO
// after the produce's append). It returns an error at once, registering
// nothing, when the ISR is below min ISR or after Resign. Otherwise the
// result is reported by TakeAcks, immediately if the HW already covers end.
func (l *Leader) WaitAcksAll(end int64) (AckID, error) {
	if err := l.CanAcceptAcksAll(); err != nil {
		return 0, err
	}
	if end < 0 || end > l.leo {
		return 0, fmt.Errorf("ack end %d outside [0, LEO %d]: %w", end, l.leo, ErrInvalid)
	}
	id := l.nextAck
	l.nextAck++
	if end <= l.hw {
		l.done = append(l.done, AckResult{ID: id, End: end})
	} else {
		l.acks = append(l.acks, pendingAck{id: id, end: end})
	}
	return id, nil
}

// CancelAck forgets a pending wait (its request timed out). It reports
// whether the wait was still pending.
func (l *Leader) CancelAck(id AckID) bool {
	n := len(l.acks)
	l.acks = slices.DeleteFunc(l.acks, func(a pendingAck) bool { return a.id == id })
	return len(l.acks) < n
}

// TakeAcks returns the acks=all waits that ended since the last call, in the
// order they ended, and forgets them.
func (l *Leader) TakeAcks() []AckResult {
	d := l.done
	l.done = nil
	return d
}

// Resign ends this leadership because the controller moved to
// newLeaderEpoch: pending acks=all waits fail with ErrNotLeader and every
// later call fails with ErrNotLeader. A newLeaderEpoch not above the
// leader's is stale (ErrFencedLeaderEpoch) and changes nothing.
func (l *Leader) Resign(newLeaderEpoch int32) error {
	if newLeaderEpoch <= l.leaderEpoch {
		return fmt.Errorf("new leader epoch %d, current %d: %w", newLeaderEpoch, l.leaderEpoch, ErrFencedLeaderEpoch)
	}
	if l.resigned {
		return nil
	}
	l.resigned = true
	l.pending = nil
	l.failAcks(fmt.Errorf("leader epoch %d replaced by %d: %w", l.leaderEpoch, newLeaderEpoch, ErrNotLeader))
	return nil
}

// Close ends this leadership without a newer leader epoch known (the
// replica stops leading, e.g. it is closed or moves to another role):
// pending acks=all waits fail with ErrNotLeader and every later call fails
// with ErrNotLeader. Closing twice does nothing.
func (l *Leader) Close() {
	if l.resigned {
		return
	}
	l.resigned = true
	l.pending = nil
	l.failAcks(fmt.Errorf("leadership at epoch %d ended: %w", l.leaderEpoch, ErrNotLeader))
}

// HW returns the high watermark: consumers read only below it. It never
// decreases.
func (l *Leader) HW() int64 { return l.hw }

// LEO returns the local log end offset last given to Append.
func (l *Leader) LEO() int64 { return l.leo }

// Durable returns the end of the local log's durable prefix last given to
// NewLeader or Flushed.
func (l *Leader) Durable() int64 { return l.durable }

// ISR returns the ISR the controller confirmed, sorted.
func (l *Leader) ISR() []int32 { return slices.Clone(l.isr) }

// MaximalISR returns the ISR used for the HW: the confirmed ISR plus the
// replicas a pending expansion adds (a pending shrink removes nothing until
// confirmed), sorted.
func (l *Leader) MaximalISR() []int32 {
	m := slices.Clone(l.isr)
	if l.pending != nil && l.pending.Kind == Expand {
		for _, id := range l.pending.ISR {
			if !slices.Contains(m, id) {
				m = append(m, id)
			}
		}
		slices.Sort(m)
	}
	return m
}

// Replicas returns every replica of the partition, sorted.
func (l *Leader) Replicas() []int32 { return slices.Clone(l.replicas) }

// LeaderEpoch returns this leader's epoch.
func (l *Leader) LeaderEpoch() int32 { return l.leaderEpoch }

// PartitionEpoch returns the partition epoch of the confirmed ISR.
func (l *Leader) PartitionEpoch() int32 { return l.partitionEpoch }

// EpochStartOffset returns the offset at which this leader epoch started
// (the LEO when the broker became leader).
func (l *Leader) EpochStartOffset() int64 { return l.epochStart }

// Resigned reports whether Resign ended this leadership.
func (l *Leader) Resigned() bool { return l.resigned }

// FollowerState is the leader's view of one follower.
type FollowerState struct {
	BrokerEpoch  int64     // -1 when unknown
	LEO          int64     // -1 until it fetched in this leader epoch
	Durable      int64     // its durable end; -1 until it fetched in this leader epoch
	LastCaughtUp time.Time // zero if never
	LostData     bool
}

// Follower returns the leader's view of follower id.
func (l *Leader) Follower(id int32) (FollowerState, bool) {
	r, ok := l.followers[id]
	if !ok {
		return FollowerState{}, false
	}
	return FollowerState{BrokerEpoch: r.brokerEpoch, LEO: r.leo, Durable: r.durable, LastCaughtUp: r.lastCaughtUp, LostData: r.lostData}, true
}

// maybeAdvanceHW moves the HW to the smallest durable end in the maximal
// ISR (the leader's own included), never
// backwards and never while the confirmed ISR is below min ISR, and
// completes the acks=all waits it covers.
func (l *Leader) maybeAdvanceHW() {
	if l.resigned || len(l.isr) < l.minISR {
		return
	}
	hw := l.durable
	for _, id := range l.MaximalISR() {
		if r := l.followers[id]; r != nil {
			hw = min(hw, r.durable)
		}
	}
	if hw <= l.hw {
		return
	}
	l.hw = hw
	l.acks = slices.DeleteFunc(l.acks, func(a pendingAck) bool {
		if a.end <= l.hw {
			l.done = append(l.done, AckResult{ID: a.id, End: a.end})
			return true
		}
		return false
	})
}

func (l *Leader) failAcks(err error) {
	for _, a := range l.acks {
		l.done = append(l.done, AckResult{ID: a.id, End: a.end, Err: err})
	}
	l.acks = nil
}

// idSet returns ids sorted, refusing duplicates and an empty set.
func idSet(what string, ids []int32) ([]int32, error) {
	s := slices.Clone(ids)
	slices.Sort(s)
	if len(s) == 0 {
		return nil, fmt.Errorf("%s empty: %w", what, ErrInvalid)
	}
	if len(slices.Compact(slices.Clone(s))) != len(s) {
		return nil, fmt.Errorf("%s %v has duplicates: %w", what, ids, ErrInvalid)
	}
	return s, nil
}

func subset(a, b []int32) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// FormatIDs renders broker ids as "(1,2,3)".
func FormatIDs(ids []int32) string {
	b := []byte{'('}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%d", id)
	}
	return string(append(b, ')'))
}
