package group

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Special member epochs of HeartbeatRequest.MemberEpoch.
const (
	// JoinEpoch joins the group: as a new member (MemberID ""), as the
	// replacement of the static member with the same instance id (MemberID
	// "": a restarted process, whether or not the old one left), or as a
	// reset of a known member that lost its partitions.
	JoinEpoch int32 = 0
	// LeaveEpoch leaves the group for good; the member's partitions are
	// freed and the group rebalances.
	LeaveEpoch int32 = -1
	// StaticLeaveEpoch is a static member leaving temporarily (a restart):
	// its slot and assignment are kept, unconsumed, for the session timeout.
	StaticLeaveEpoch int32 = -2
)

// Defaults of Config and HeartbeatRequest.
const (
	DefaultSessionTimeout    = 45 * time.Second
	DefaultHeartbeatInterval = 5 * time.Second
	// DefaultRebalanceTimeout applies to a member that joins without a
	// rebalance timeout (Kafka's max.poll.interval.ms default).
	DefaultRebalanceTimeout = 5 * time.Minute
)

// Sentinel errors. The broker maps them to wire error codes once, at its API
// seam.
var (
	// ErrInvalid: a malformed request or configuration (Kafka's
	// INVALID_REQUEST). The error names the bad field.
	ErrInvalid = errors.New("invalid")
	// ErrUnknownMember: no live member has this id: it never joined, left,
	// or was removed (session or rebalance timeout, Leave). The client must
	// join again with MemberID "" and epoch 0; it may report the partitions
	// it still owns (Kafka's UNKNOWN_MEMBER_ID).
	ErrUnknownMember = errors.New("unknown member")
	// ErrFencedMemberEpoch: the member epoch is not one the member may use:
	// older than its previous epoch, or newer than its current one. The
	// client must drop its partitions and rejoin with epoch 0 and its member
	// id (Kafka's FENCED_MEMBER_EPOCH, or STALE_MEMBER_EPOCH for offset
	// commits).
	ErrFencedMemberEpoch = errors.New("fenced member epoch")
	// ErrFencedInstanceID: the request names an instance id whose latest
	// incarnation is another member id: another process joined with that
	// instance id and replaced the caller, a stale incarnation of a static
	// member. The caller must stop, not rejoin (Kafka's FENCED_INSTANCE_ID,
	// fatal for its clients).
	ErrFencedInstanceID = errors.New("fenced instance id")
	// ErrNotOwned: the member does not own the partition at the given
	// epoch, so it may not commit offsets for it.
	ErrNotOwned = errors.New("partition not owned by member")
)

// Config is the configuration of one group. The zero value is valid.
type Config struct {
	// Assignor is AssignorUniform (the default when empty) or
	// AssignorRange.
	Assignor string
	// SessionTimeout removes a member that has not heartbeated for this
	// long, and a static member this long after it left with
	// StaticLeaveEpoch. 0 means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// HeartbeatInterval is returned to members as the pace of their
	// heartbeats; it must be below SessionTimeout. 0 means
	// DefaultHeartbeatInterval.
	HeartbeatInterval time.Duration
	// HoldUntil: before this time, partitions that no member holds are not
	// handed out (they stay pending), except to a member that reports
	// owning them. Every member keeps, meanwhile, the partitions it reports
	// owning and nobody else holds. Set it, for a group rebuilt after a
	// coordinator failover (which knows none of the members that may still
	// be consuming), to when the new coordinator started serving plus the
	// session timeout: until then a member that has not rejoined yet is
	// still within the session the old coordinator would have granted it,
	// and may be consuming partitions nobody reports yet; each rejoining
	// member keeps its partitions and nothing moves. A member that has not
	// rejoined by then is gone, as the old coordinator would have expired
	// it. The zero time (the default) hands out free partitions at once,
	// like a fresh group should.
	HoldUntil time.Time
	// NewMemberID returns the id of a joining member; it must return
	// distinct non-empty ids. nil means 22 random base64url characters
	// (128 bits from crypto/rand). Tests inject a deterministic generator.
	NewMemberID func() string
}

// Validate checks c, naming the bad field; the error wraps ErrInvalid.
func (c Config) Validate() error {
	switch {
	case c.Assignor != "" && !knownAssignor(c.Assignor):
		return fmt.Errorf("%w: assignor %q: want %q or %q", ErrInvalid, c.Assignor, AssignorUniform, AssignorRange)
	case c.SessionTimeout < 0:
		return fmt.Errorf("%w: session timeout %v is negative", ErrInvalid, c.SessionTimeout)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("%w: heartbeat interval %v is negative", ErrInvalid, c.HeartbeatInterval)
	}
	d := c.withDefaults()
	if d.HeartbeatInterval >= d.SessionTimeout {
		return fmt.Errorf("%w: heartbeat interval %v must be below the session timeout %v", ErrInvalid, d.HeartbeatInterval, d.SessionTimeout)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Assignor == "" {
		c.Assignor = AssignorUniform
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.NewMemberID == nil {
		c.NewMemberID = randomMemberID
	}
	return c
}

func randomMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Topics reports the current partition count of a topic, ok false when the
// topic does not exist. The broker passes its metadata view to every
// Heartbeat.
type Topics func(topic string) (partitions int32, ok bool)

// TopicMap is a Topics over a fixed snapshot.
func TopicMap(m map[string]int32) Topics {
	return func(topic string) (int32, bool) {
		n, ok := m[topic]
		return n, ok
	}
}

// HeartbeatRequest is one ConsumerGroupHeartbeat of a member.
type HeartbeatRequest struct {
	// MemberID is "" to join as a new member, else the id the group gave.
	MemberID string
	// InstanceID makes the member static (KIP-345). Required with
	// StaticLeaveEpoch; otherwise "" means unchanged after the join, and a
	// value other than the member's is ErrFencedInstanceID.
	InstanceID string
	// MemberEpoch is JoinEpoch, LeaveEpoch, StaticLeaveEpoch or the epoch
	// of the member's last response.
	MemberEpoch int32
	// RebalanceTimeout bounds how long the member may take to revoke
	// partitions once asked; 0 means unchanged (DefaultRebalanceTimeout
	// for a new member).
	RebalanceTimeout time.Duration
	// Subscriptions are the topic names the member consumes; nil means
	// unchanged. Required (non-empty) to join.
	Subscriptions []string
	// ClientMemberID: MemberID was chosen by the client, as KIP-848's
	// ConsumerGroupHeartbeat v1 has it. A join (JoinEpoch) with an id no
	// member has then creates the member under that id (or gives it the
	// slot of InstanceID's static member) instead of ErrUnknownMember.
	ClientMemberID bool
	// Owned are the partitions the member owns when it sends the request
	// (what it consumes, including partitions it was asked to revoke and has
	// not finished revoking); nil means unchanged since its last request. A
	// join may report partitions the member still owns from a previous
	// membership: it keeps those nobody else holds (see the package doc).
	Owned TopicPartitions
}

// HeartbeatResponse answers a heartbeat.
type HeartbeatResponse struct {
	MemberID string
	// MemberEpoch is the member's epoch, to be sent with its next heartbeat
	// and its offset commits. LeaveEpoch or StaticLeaveEpoch after a leave.
	MemberEpoch int32
	// HeartbeatInterval is when to heartbeat next at the latest.
	HeartbeatInterval time.Duration
	// Assignment is always the member's full assignment: exactly the
	// partitions it may own now. The member stops consuming (and commits)
	// the owned partitions missing from it, then heartbeats without them,
	// and starts consuming the partitions new to it. nil after a leave.
	Assignment TopicPartitions
}

// Group is the state machine of one consumer group: membership, target
// assignment and the cooperative reconciliation of every member towards it.
// It does no I/O, starts no goroutines and reads no clock; it is not safe
// for concurrent use: the caller serialises calls. Every method first
// removes the members whose session or rebalance timeout passed at now,
// even when it then returns an error.
type Group struct {
	id  string
	cfg Config

	epoch       int32 // group epoch
	targetEpoch int32
	target      assignment
	topics      map[string]int32 // partition counts of the subscribed topics, as last seen

	members   map[string]*member
	instances map[string]*member // instance id → its (live or departed) member
	// incarnations maps an instance id to the member id of its latest
	// incarnation: that of its member, or, with none, of the last one (it
	// was removed, or the group was rebuilt after a coordinator failover
	// and RestoreInstance named it). A request naming the instance id with
	// any other member id is ErrFencedInstanceID. Entries stay until the
	// group is dropped: one per instance id ever used.
	incarnations map[string]string
	owner        map[tp]string // partition → member holding it (given or revoking)
	holdUntil    time.Time     // free partitions are not handed out before this

	rebalances int64
	revoked    int64
}

// member is one member; see the package doc for the meaning of its fields.
type member struct {
	id, instanceID   string
	epoch, prevEpoch int32
	subs             []string // sorted, unique
	rebalanceTimeout time.Duration
	lastSeen         time.Time
	departed         bool // a static member that left with StaticLeaveEpoch
	held             map[tp]*holding
	revokeDeadline   time.Time // zero when nothing is being revoked
	owned            partSet   // as last reported
}

// holding is a partition a member holds: given to it and not (yet)
// acknowledged as revoked.
type holding struct {
	since    int32 // the member epoch at which it was given
	revoking bool  // the member has been asked to give it up
}

// New returns an empty group at group epoch 0.
func New(groupID string, cfg Config) (*Group, error) {
	if groupID == "" {
		return nil, fmt.Errorf("%w: empty group id", ErrInvalid)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Group{
		id:           groupID,
		cfg:          cfg.withDefaults(),
		target:       assignment{},
		topics:       map[string]int32{},
		members:      map[string]*member{},
		instances:    map[string]*member{},
		incarnations: map[string]string{},
		owner:        map[tp]string{},
		holdUntil:    cfg.HoldUntil,
	}, nil
}

// ID is the group id.
func (g *Group) ID() string { return g.id }

// Heartbeat handles a member's heartbeat: a join, a leave or a regular
// heartbeat depending on req.MemberEpoch (see the package doc). topics gives
// the partition counts of the subscribed topics; nil reuses the counts of
// the last call (a topic never seen counts as absent).
//
// The group epoch increases, and a new target assignment is computed, when
// the membership, a subscription or the partition count of a subscribed
// topic changes. The member is then reconciled towards its target and the
// response carries its assignment. Errors: ErrInvalid, ErrUnknownMember,
// ErrFencedMemberEpoch, ErrFencedInstanceID. A failed call changes nothing
// but the expiry that comes first.
func (g *Group) Heartbeat(now time.Time, req HeartbeatRequest, topics Topics) (HeartbeatResponse, error) {
	if err := validateRequest(req); err != nil {
		return HeartbeatResponse{}, err
	}
	g.expire(now)
	switch req.MemberEpoch {
	case LeaveEpoch:
		m, err := g.lookup(req.MemberID, req.InstanceID)
		if err != nil {
			return HeartbeatResponse{}, err
		}
		g.remove(m)
		g.bump()
		return HeartbeatResponse{MemberID: m.id, MemberEpoch: LeaveEpoch, HeartbeatInterval: g.cfg.HeartbeatInterval}, nil
	case StaticLeaveEpoch:
		m, err := g.lookup(req.MemberID, req.InstanceID)
		if err != nil {
			return HeartbeatResponse{}, err
		}
		g.depart(now, m) // lookup matched the (required) instance id
		return HeartbeatResponse{MemberID: m.id, MemberEpoch: StaticLeaveEpoch, HeartbeatInterval: g.cfg.HeartbeatInterval}, nil
	}
	subs := req.Subscriptions
	if subs != nil {
		subs = normalize(subs)
	}
	counts, err := g.readTopics(topics, subs)
	if err != nil {
		return HeartbeatResponse{}, err
	}
	var m *member
	bump := false
	if req.MemberEpoch == JoinEpoch {
		m, bump, err = g.join(req)
	} else {
		m, err = g.check(req)
	}
	if err != nil {
		return HeartbeatResponse{}, err
	}
	m.lastSeen = now
	if req.RebalanceTimeout > 0 {
		m.rebalanceTimeout = req.RebalanceTimeout
	}
	if req.Owned != nil {
		m.owned = toSet(req.Owned)
	}
	if subs != nil && !slices.Equal(subs, m.subs) {
		m.subs = subs
		bump = true
	}
	if g.updateTopics(counts) {
		bump = true
	}
	if bump {
		g.bump()
	}
	g.reconcile(now, m)
	return HeartbeatResponse{
		MemberID:          m.id,
		MemberEpoch:       m.epoch,
		HeartbeatInterval: g.cfg.HeartbeatInterval,
		Assignment:        topicPartitions(m.held, func(h *holding) bool { return !h.revoking }),
	}, nil
}

func validateRequest(req HeartbeatRequest) error {
	switch {
	case req.MemberEpoch < StaticLeaveEpoch:
		return fmt.Errorf("%w: member epoch %d", ErrInvalid, req.MemberEpoch)
	case req.MemberID == "" && req.MemberEpoch != JoinEpoch:
		return fmt.Errorf("%w: member id required with member epoch %d", ErrInvalid, req.MemberEpoch)
	case req.MemberEpoch == StaticLeaveEpoch && req.InstanceID == "":
		return fmt.Errorf("%w: instance id required with member epoch %d", ErrInvalid, StaticLeaveEpoch)
	case req.RebalanceTimeout < 0:
		return fmt.Errorf("%w: rebalance timeout %v is negative", ErrInvalid, req.RebalanceTimeout)
	case req.MemberEpoch == JoinEpoch && len(req.Subscriptions) == 0:
		return fmt.Errorf("%w: a joining member must subscribe to at least one topic", ErrInvalid)
	}
	if slices.Contains(req.Subscriptions, "") {
		return fmt.Errorf("%w: empty topic name in subscriptions", ErrInvalid)
	}
	for t, ps := range req.Owned {
		if t == "" {
			return fmt.Errorf("%w: empty topic name in owned partitions", ErrInvalid)
		}
		for _, p := range ps {
			if p < 0 {
				return fmt.Errorf("%w: owned partition %s:%d is negative", ErrInvalid, t, p)
			}
		}
	}
	return nil
}

// normalize sorts and deduplicates topic names into a new non-nil slice.
func normalize(subs []string) []string {
	out := slices.Clone(subs)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// readTopics reads the partition counts of every topic subscribed after the
// request (a superset: every member's subscriptions and subs).
func (g *Group) readTopics(topics Topics, subs []string) (map[string]int32, error) {
	counts := map[string]int32{}
	read := func(t string) error {
		if _, ok := counts[t]; ok {
			return nil
		}
		if topics == nil {
			counts[t] = g.topics[t]
			return nil
		}
		n, ok := topics(t)
		if !ok {
			n = 0
		}
		if n < 0 {
			return fmt.Errorf("%w: topic %q has %d partitions", ErrInvalid, t, n)
		}
		counts[t] = n
		return nil
	}
	for _, m := range g.members {
		for _, t := range m.subs {
			if err := read(t); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range subs {
		if err := read(t); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

// updateTopics records the counts of the topics now subscribed and reports
// whether one that was already tracked changed (a newly subscribed topic
// comes with a subscription change, which bumps the epoch by itself).
func (g *Group) updateTopics(counts map[string]int32) bool {
	changed := false
	next := map[string]int32{}
	for _, m := range g.members {
		for _, t := range m.subs {
			n := counts[t]
			if old, ok := g.topics[t]; ok && old != n {
				changed = true
			}
			next[t] = n
		}
	}
	g.topics = next
	return changed
}

// lookup finds the member a request refers to: by member id, checking the
// instance id if given. A member id the group does not know is
// ErrFencedInstanceID when the instance id it names has a later
// incarnation, else ErrUnknownMember.
func (g *Group) lookup(memberID, instanceID string) (*member, error) {
	m := g.members[memberID]
	if m == nil {
		if err := g.fenced(memberID, instanceID); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", ErrUnknownMember, memberID)
	}
	if instanceID != "" && instanceID != m.instanceID {
		return nil, fmt.Errorf("%w: member %s has instance id %q, not %q", ErrFencedInstanceID, memberID, m.instanceID, instanceID)
	}
	return m, nil
}

// fenced returns ErrFencedInstanceID when instanceID's latest incarnation
// is another member id than memberID.
func (g *Group) fenced(memberID, instanceID string) error {
	if instanceID == "" {
		return nil
	}
	if cur, ok := g.incarnations[instanceID]; ok && cur != memberID {
		return fmt.Errorf("%w: instance id %q belongs to member %s, not %s: another process joined with it", ErrFencedInstanceID, instanceID, cur, memberID)
	}
	return nil
}

// RestoreInstance records memberID as the latest incarnation of the static
// member instanceID, for a group rebuilt by a coordinator that took over
// (its replicated log keeps what the previous coordinator recorded): a
// request naming instanceID with another member id is then
// ErrFencedInstanceID, so a stale process cannot come back through the
// failover. It does not make memberID a member (its heartbeats are
// ErrUnknownMember until it joins again), and does nothing when instanceID
// has a member already. Errors: ErrInvalid (an empty id).
func (g *Group) RestoreInstance(instanceID, memberID string) error {
	if instanceID == "" || memberID == "" {
		return fmt.Errorf("%w: restore instance %q as member %q: both ids are required", ErrInvalid, instanceID, memberID)
	}
	if g.instances[instanceID] == nil {
		g.incarnations[instanceID] = memberID
	}
	return nil
}

// join handles a request with JoinEpoch and returns the member, and whether
// the membership changed.
func (g *Group) join(req HeartbeatRequest) (*member, bool, error) {
	if req.MemberID != "" && !(req.ClientMemberID && g.members[req.MemberID] == nil) {
		m, err := g.lookup(req.MemberID, req.InstanceID)
		if err != nil {
			return nil, false, err
		}
		// A known member rejoining lost its partitions: forget what it
		// held. It gets its target back, minus what others hold by then;
		// Owned lets it keep what it still has.
		g.release(m)
		m.epoch, m.prevEpoch, m.departed = 0, 0, false
		m.owned = toSet(req.Owned)
		if m.owned == nil {
			m.owned = partSet{}
		}
		return m, false, nil
	}
	if old := g.instances[req.InstanceID]; req.InstanceID != "" && old != nil {
		// A new process with a known instance id: it replaces the old
		// incarnation, departed or not (a crashed process never sent
		// StaticLeaveEpoch), which is fenced from now on (KIP-345).
		id, err := g.newMemberID(req)
		if err != nil {
			return nil, false, err
		}
		g.replace(old, id)
		old.owned = partSet{}
		return old, false, nil
	}
	id, err := g.newMemberID(req)
	if err != nil {
		return nil, false, err
	}
	m := &member{
		id:               id,
		instanceID:       req.InstanceID,
		subs:             []string{},
		rebalanceTimeout: DefaultRebalanceTimeout,
		held:             map[tp]*holding{},
		owned:            partSet{},
	}
	g.members[id] = m
	if m.instanceID != "" {
		g.instances[m.instanceID] = m
		g.incarnations[m.instanceID] = id
	}
	return m, true, nil
}

// newMemberID is the id of a member joining with req: the client's
// (ClientMemberID), else a new one (Config.NewMemberID).
func (g *Group) newMemberID(req HeartbeatRequest) (string, error) {
	id := req.MemberID
	if !req.ClientMemberID || id == "" {
		id = g.cfg.NewMemberID()
	}
	if id == "" || g.members[id] != nil {
		return "", fmt.Errorf("%w: generated member id %q is empty or in use", ErrInvalid, id)
	}
	return id, nil
}

// replace hands the slot of a static member to a new member id: the same
// target, the partitions it held, its epoch; no rebalance, so no other
// member notices. Partitions the old incarnation was revoking stay held
// for the new one, which releases them at once in reconcile unless it
// reports owning them. The old member id is fenced from now on.
func (g *Group) replace(m *member, id string) {
	delete(g.members, m.id)
	g.incarnations[m.instanceID] = id
	for p := range m.held {
		g.owner[p] = id
	}
	if t, ok := g.target[m.id]; ok {
		delete(g.target, m.id)
		g.target[id] = t
	}
	m.id = id
	m.departed = false
	m.prevEpoch = m.epoch
	g.members[id] = m
}

// check validates a regular heartbeat (epoch > 0) and returns its member.
func (g *Group) check(req HeartbeatRequest) (*member, error) {
	m := g.members[req.MemberID]
	if m == nil {
		if err := g.fenced(req.MemberID, req.InstanceID); err != nil {
			return nil, err
		}
	}
	if m == nil || m.departed {
		return nil, fmt.Errorf("%w: %s", ErrUnknownMember, req.MemberID)
	}
	if req.InstanceID != "" && req.InstanceID != m.instanceID {
		return nil, fmt.Errorf("%w: member %s has instance id %q, not %q", ErrFencedInstanceID, m.id, m.instanceID, req.InstanceID)
	}
	if req.MemberEpoch == m.epoch {
		return m, nil
	}
	// A member still at its previous epoch missed the response that moved
	// it on (KIP-848): it may continue if it owns nothing it may not own.
	if req.MemberEpoch == m.prevEpoch && req.Owned != nil {
		ok := true
		for p := range toSet(req.Owned) {
			if h := m.held[p]; h == nil || h.revoking {
				ok = false
				break
			}
		}
		if ok {
			return m, nil
		}
	}
	return nil, fmt.Errorf("%w: member %s sent epoch %d, its epoch is %d", ErrFencedMemberEpoch, m.id, req.MemberEpoch, m.epoch)
}

// depart keeps the slot of a static member that left temporarily: the
// partitions it was revoking are free (its process is gone), the others stay
// reserved for its replacement until its session expires.
func (g *Group) depart(now time.Time, m *member) {
	m.departed = true
	m.lastSeen = now
	m.revokeDeadline = time.Time{}
	for p, h := range m.held {
		if h.revoking {
			delete(m.held, p)
			delete(g.owner, p)
		}
	}
}

// release frees every partition m holds.
func (g *Group) release(m *member) {
	for p := range m.held {
		delete(g.owner, p)
	}
	m.held = map[tp]*holding{}
	m.revokeDeadline = time.Time{}
}

// remove takes m out of the group; the caller bumps the epoch.
func (g *Group) remove(m *member) {
	g.release(m)
	delete(g.members, m.id)
	if g.instances[m.instanceID] == m {
		delete(g.instances, m.instanceID)
	}
	delete(g.target, m.id)
}

// bump increases the group epoch and computes the target assignment at it.
func (g *Group) bump() {
	g.epoch++
	g.rebalances++
	g.computeTarget()
}

func (g *Group) computeTarget() {
	spec := assignSpec{topics: g.topics, hints: map[tp]hint{}}
	ids := g.memberIDs()
	for _, id := range ids {
		m := g.members[id]
		spec.members = append(spec.members, assignMember{id: id, instanceID: m.instanceID, subs: m.subs})
	}
	for p, id := range g.owner {
		if h := g.members[id].held[p]; !h.revoking {
			spec.hints[p] = hint{strong: id}
		}
	}
	// A partition nobody holds stays preferably with a member that reports
	// owning it (a member rejoining after a coordinator failover).
	for _, id := range ids {
		for p := range g.members[id].owned {
			if _, held := g.owner[p]; !held && spec.hints[p].strong == "" {
				spec.hints[p] = hint{strong: id}
			}
		}
	}
	for id, s := range g.target {
		for p := range s {
			h := spec.hints[p]
			h.weak = id
			spec.hints[p] = h
		}
	}
	g.target = assign(g.cfg.Assignor, spec)
	g.targetEpoch = g.epoch
	// A departed static member has no process to ask: what left its target
	// is free at once.
	for _, m := range g.members {
		if m.departed {
			for p := range m.held {
				if !g.target[m.id].has(p) {
					delete(m.held, p)
					delete(g.owner, p)
				}
			}
		}
	}
}

func (g *Group) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// reconcile moves m towards its target, in its own heartbeat: revoking
// partitions it no longer reports owning are released; held partitions
// outside the target are to be revoked (the response leaves them out, and
// only a later heartbeat can acknowledge that); once nothing is left to
// revoke the member moves to the target epoch and gets the target
// partitions nobody else holds.
func (g *Group) reconcile(now time.Time, m *member) {
	target := g.target[m.id]
	revoking := false
	for _, p := range sortedKeys(m.held) {
		h := m.held[p]
		switch {
		case h.revoking && !m.owned.has(p):
			delete(m.held, p)
			delete(g.owner, p)
		case h.revoking && target.has(p):
			h.revoking = false
		case !h.revoking && !target.has(p):
			h.revoking = true
			g.revoked++
			revoking = true
		case h.revoking:
			revoking = true
		}
	}
	if revoking {
		if m.revokeDeadline.IsZero() {
			m.revokeDeadline = now.Add(m.rebalanceTimeout)
		}
		return
	}
	m.revokeDeadline = time.Time{}
	if m.epoch != g.targetEpoch {
		m.prevEpoch, m.epoch = m.epoch, g.targetEpoch
	}
	hold := now.Before(g.holdUntil)
	for p := range target {
		if _, held := g.owner[p]; held || (hold && !m.owned.has(p)) {
			continue
		}
		m.held[p] = &holding{since: m.epoch}
		g.owner[p] = m.id
	}
}

// Leave removes a member for good, like a heartbeat with LeaveEpoch but
// without its epoch: for an administrator removing members (Kafka's
// RemoveMembersFromConsumerGroup). The member is named by memberID, or by
// instanceID alone for a static member. Its partitions are freed and the
// group rebalances. Errors: ErrInvalid (neither given), ErrUnknownMember,
// ErrFencedInstanceID (both given and they do not match).
func (g *Group) Leave(now time.Time, memberID, instanceID string) error {
	g.expire(now)
	var m *member
	switch {
	case memberID != "":
		var err error
		if m, err = g.lookup(memberID, instanceID); err != nil {
			return err
		}
	case instanceID != "":
		if m = g.instances[instanceID]; m == nil {
			return fmt.Errorf("%w: no member with instance id %q", ErrUnknownMember, instanceID)
		}
	default:
		return fmt.Errorf("%w: leave needs a member id or an instance id", ErrInvalid)
	}
	g.remove(m)
	g.bump()
	return nil
}

// Expire removes the members whose session timed out (no heartbeat for
// SessionTimeout, or SessionTimeout since a static member departed) or that
// did not revoke partitions within their rebalance timeout of being asked,
// frees their partitions and rebalances once. It returns their ids in
// ascending order. Every other method does this first; the broker calls it
// on a timer so that idle groups expire too.
func (g *Group) Expire(now time.Time) (expired []string) {
	return g.expire(now)
}

func (g *Group) expire(now time.Time) []string {
	var out []string
	for id, m := range g.members {
		if !now.Before(m.lastSeen.Add(g.cfg.SessionTimeout)) ||
			(!m.revokeDeadline.IsZero() && !now.Before(m.revokeDeadline)) {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	for _, id := range out {
		g.remove(g.members[id])
	}
	g.bump()
	return out
}

// Owns checks that a member may commit offsets for a partition at
// memberEpoch. It returns nil when the member holds the partition (given to
// it, including while it is being revoked and until the member acknowledges
// the revocation) and memberEpoch is either the member's current epoch or its
// previous epoch provided it already held the partition then (a commit sent
// before the response that moved the member on). instanceID is the static
// member's instance id ("" for a dynamic member, or unchecked). Otherwise:
// ErrFencedInstanceID (another process replaced this incarnation of
// instanceID), ErrUnknownMember (including a static member that departed),
// ErrFencedMemberEpoch (any other epoch), ErrNotOwned.
func (g *Group) Owns(now time.Time, memberID, instanceID string, memberEpoch int32, topic string, partition int32) error {
	g.expire(now)
	m, err := g.lookup(memberID, instanceID)
	if err != nil {
		return err
	}
	if m.departed {
		return fmt.Errorf("%w: %s", ErrUnknownMember, memberID)
	}
	if memberEpoch <= 0 || (memberEpoch != m.epoch && memberEpoch != m.prevEpoch) {
		return fmt.Errorf("%w: member %s committed with epoch %d, its epoch is %d", ErrFencedMemberEpoch, memberID, memberEpoch, m.epoch)
	}
	h := m.held[tp{topic, partition}]
	if h == nil {
		return fmt.Errorf("%w: %s:%d is not assigned to member %s", ErrNotOwned, topic, partition, memberID)
	}
	if memberEpoch < h.since {
		return fmt.Errorf("%w: %s:%d was assigned to member %s at epoch %d, after epoch %d", ErrNotOwned, topic, partition, memberID, h.since, memberEpoch)
	}
	return nil
}

// Empty reports whether the group has no members, not even a static member
// that departed temporarily. Offsets may be reset only in an empty group.
func (g *Group) Empty(now time.Time) bool {
	g.expire(now)
	return len(g.members) == 0
}
