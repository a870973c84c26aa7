package group

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat,
// LeaveGroup), what librdkafka, sarama, kafka-go and kafkajs speak: the
// members agree on a generation in a join phase, the client the group
// elects leader computes the assignment (its assignor: range, roundrobin,
// sticky, cooperative-sticky, ...) and hands it to the coordinator in its
// SyncGroup, which passes each member its part. Classic is that state
// machine for one group; like Group it does no I/O, starts no goroutines
// and reads no clock, and the caller serialises calls. JoinGroup and
// SyncGroup answers may wait for other members: a call that returns
// wait=true is answered later, from the ClassicAnswers of a later call
// (or of Tick, for timeouts).
//
// States, as Kafka names them:
//
//   - Empty: no members.
//   - PreparingRebalance: the join phase. It ends when every member has
//     rejoined, or at the rebalance deadline (the largest rebalance timeout
//     of the members), removing those that did not; a group that was empty
//     waits ClassicConfig.InitialRebalanceDelay more for others to join,
//     each join extending it up to the rebalance timeout (Kafka's
//     group.initial.rebalance.delay.ms). Ending it starts a new generation,
//     picks the protocol every member supports (by the members' order of
//     preference), elects the leader (the old one if it rejoined) and
//     answers every join; the leader's answer lists the members and their
//     metadata.
//   - CompletingRebalance: waiting for the leader's SyncGroup. Members'
//     SyncGroups wait for it; when it comes each is answered its
//     assignment. A member that does not sync within its rebalance timeout
//     is removed and the group rebalances again.
//   - Stable: a SyncGroup is answered at once with the member's assignment.
//     A member that joins again with unchanged metadata (a follower) is
//     answered the current generation at once; the leader, a metadata
//     change or a new member starts a rebalance.
//
// Members are removed on LeaveGroup, on their session timeout (no
// heartbeat, join or sync for that long) and as above. Static members
// (group.instance.id, KIP-345): a join with a known instance id and no
// member id replaces the old member id, which is fenced
// (ErrFencedInstanceID); in a Stable group with unchanged metadata without
// a rebalance (the leader is told to skip the assignment from JoinGroup
// v9, else the group rebalances).
type Classic struct {
	id  string
	cfg ClassicConfig

	state        ClassicState
	generation   int32
	protocolType string
	protocol     string // chosen at the end of the last join phase
	leader       string
	members      map[string]*classicMember
	// pending are member ids handed out with ErrMemberIDRequired (KIP-394)
	// that have not joined with them yet, until when they may.
	pending   map[string]time.Time
	instances map[string]string // instance id → member id

	// joinDeadline ends the join phase at the latest; initialDeadline,
	// when set, holds an empty group's first join phase until then.
	joinDeadline, initialDeadline time.Time
}

// ClassicState is a classic group's state, as Kafka names it.
type ClassicState string

const (
	ClassicEmpty               ClassicState = "Empty"
	ClassicPreparingRebalance  ClassicState = "PreparingRebalance"
	ClassicCompletingRebalance ClassicState = "CompletingRebalance"
	ClassicStable              ClassicState = "Stable"
)

// ClassicConfig configures a classic group.
type ClassicConfig struct {
	// NewMemberID makes a member id for a joining client (its client id
	// is a prefix, as Kafka's ids have); required.
	NewMemberID func(clientID string) string
	// InitialRebalanceDelay holds an empty group's first join phase this
	// long for more members (Kafka's group.initial.rebalance.delay.ms, 3
	// s by default); 0 does not hold it.
	InitialRebalanceDelay time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the members' session
	// timeouts (Kafka's group.min/max.session.timeout.ms: 6 s and 30
	// minutes).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// MaxSize bounds the members (Kafka's group.max.size); 0: no bound.
	MaxSize int
}

type classicMember struct {
	id, instanceID       string
	clientID, clientHost string
	sessionTimeout       time.Duration
	rebalanceTimeout     time.Duration
	protocols            []Protocol
	assignment           []byte
	lastSeen             time.Time
	// joining: its JoinGroup waits for the join phase to end; syncing: its
	// SyncGroup waits for the leader's.
	joining, syncing bool
	// syncDeadline: in CompletingRebalance, when the member is removed if
	// it has not synced.
	syncDeadline time.Time
	synced       bool // it sent SyncGroup in this generation
}

// Protocol is one assignment protocol a member supports, with its
// metadata (for the consumer protocol: its subscription).
type Protocol struct {
	Name     string
	Metadata []byte
}

var (
	// ErrMemberIDRequired: a new member must join again with the member
	// id in the answer (KIP-394: JoinGroup v4+). Kafka's
	// MEMBER_ID_REQUIRED.
	ErrMemberIDRequired = errors.New("member id required")
	// ErrRebalanceInProgress: the group is in its join phase; the member
	// must join again (Kafka's REBALANCE_IN_PROGRESS).
	ErrRebalanceInProgress = errors.New("rebalance in progress")
	// ErrIllegalGeneration: the request's generation is not the group's
	// (Kafka's ILLEGAL_GENERATION): the member must join again.
	ErrIllegalGeneration = errors.New("illegal generation")
	// ErrInconsistentProtocol: the member's protocol type or protocols do
	// not fit the group's (Kafka's INCONSISTENT_GROUP_PROTOCOL).
	ErrInconsistentProtocol = errors.New("inconsistent group protocol")
	// ErrInvalidSessionTimeout: outside the configured bounds (Kafka's
	// INVALID_SESSION_TIMEOUT).
	ErrInvalidSessionTimeout = errors.New("invalid session timeout")
	// ErrGroupFull: the group has MaxSize members (Kafka's
	// GROUP_MAX_SIZE_REACHED).
	ErrGroupFull = errors.New("group max size reached")
)

// JoinRequest is a JoinGroup.
type JoinRequest struct {
	// MemberID is "" for a new member.
	MemberID, InstanceID string
	ClientID, ClientHost string
	SessionTimeout       time.Duration
	// RebalanceTimeout: how long the member may take to rejoin in a join
	// phase, and to sync after it (JoinGroup v1+; SessionTimeout before).
	RebalanceTimeout time.Duration
	ProtocolType     string
	Protocols        []Protocol
	// RequireKnownMemberID: JoinGroup v4+, which answers a new member
	// ErrMemberIDRequired with its id first.
	RequireKnownMemberID bool
	// SkipAssignment: JoinGroup v9+, whose leader can be told to skip the
	// assignment (a static leader's restart in a Stable group).
	SkipAssignment bool
}

// JoinMember is one member as the leader's JoinGroup answer lists it.
type JoinMember struct {
	MemberID, InstanceID string
	Metadata             []byte
}

// JoinResponse answers a JoinGroup. With Err, MemberID is set only for
// ErrMemberIDRequired.
type JoinResponse struct {
	Err                    error
	MemberID               string
	Generation             int32
	ProtocolType, Protocol string
	Leader                 string
	SkipAssignment         bool
	// Members: the leader's answer only.
	Members []JoinMember
}

// SyncRequest is a SyncGroup.
type SyncRequest struct {
	MemberID, InstanceID string
	Generation           int32
	// ProtocolType and Protocol, when set (SyncGroup v5+), must be the
	// group's.
	ProtocolType, Protocol string
	// Assignments: the leader's, by member id; empty from the others.
	Assignments map[string][]byte
}

// SyncResponse answers a SyncGroup.
type SyncResponse struct {
	Err                    error
	ProtocolType, Protocol string
	Assignment             []byte
}

// ClassicAnswers are answers to requests that waited, by the member id
// they waited as. A JoinGroup (SyncGroup) of a member whose previous one
// still waits replaces it: the caller answers the previous one itself
// (ErrRebalanceInProgress), and the answer that comes later is the new
// one's.
type ClassicAnswers struct {
	Joins map[string]JoinResponse
	Syncs map[string]SyncResponse
}

func (a *ClassicAnswers) join(id string, r JoinResponse) {
	if a.Joins == nil {
		a.Joins = map[string]JoinResponse{}
	}
	a.Joins[id] = r
}

func (a *ClassicAnswers) sync(id string, r SyncResponse) {
	if a.Syncs == nil {
		a.Syncs = map[string]SyncResponse{}
	}
	a.Syncs[id] = r
}

// Empty reports whether there is no answer.
func (a ClassicAnswers) Empty() bool { return len(a.Joins) == 0 && len(a.Syncs) == 0 }

// NewClassic returns an empty classic group.
func NewClassic(groupID string, cfg ClassicConfig) (*Classic, error) {
	switch {
	case groupID == "":
		return nil, fmt.Errorf("%w: empty group id", ErrInvalid)
	case cfg.NewMemberID == nil:
		return nil, fmt.Errorf("%w: no member id generator", ErrInvalid)
	}
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = 6 * time.Second
	}
	if cfg.MaxSessionTimeout <= 0 {
		cfg.MaxSessionTimeout = 30 * time.Minute
	}
	return &Classic{
		id: groupID, cfg: cfg, state: ClassicEmpty,
		members: map[string]*classicMember{}, pending: map[string]time.Time{}, instances: map[string]string{},
	}, nil
}

// State is the group's state (as of its last call: Tick expires).
func (g *Classic) State() ClassicState { return g.state }

// Members is how many members the group has.
func (g *Classic) Members() int { return len(g.members) }

// Has reports whether id is a member.
func (g *Classic) Has(id string) bool { return g.members[id] != nil }

// Generation is the group's generation.
func (g *Classic) Generation() int32 { return g.generation }

// Join handles a JoinGroup at now: the answer, or wait=true when the
// request waits for the join phase to end (answered from a later
// ClassicAnswers under its member id, res.MemberID); ans are answers to
// other waiting requests this call settled.
func (g *Classic) Join(now time.Time, req JoinRequest) (res JoinResponse, wait bool, ans ClassicAnswers) {
	ans = g.Tick(now)
	if req.RebalanceTimeout <= 0 {
		req.RebalanceTimeout = req.SessionTimeout
	}
	switch {
	case req.SessionTimeout < g.cfg.MinSessionTimeout || req.SessionTimeout > g.cfg.MaxSessionTimeout:
		return JoinResponse{Err: fmt.Errorf("%w: %v is outside %v..%v", ErrInvalidSessionTimeout, req.SessionTimeout, g.cfg.MinSessionTimeout, g.cfg.MaxSessionTimeout)}, false, ans
	case req.ProtocolType == "" || len(req.Protocols) == 0:
		return JoinResponse{Err: fmt.Errorf("%w: a member needs a protocol type and at least one protocol", ErrInconsistentProtocol)}, false, ans
	case len(g.members) > 0 && req.ProtocolType != g.protocolType:
		return JoinResponse{Err: fmt.Errorf("%w: protocol type %q, the group's is %q", ErrInconsistentProtocol, req.ProtocolType, g.protocolType)}, false, ans
	case len(g.members) > 0 && !g.supportsCommon(req.Protocols):
		return JoinResponse{Err: fmt.Errorf("%w: none of the member's protocols is supported by every member", ErrInconsistentProtocol)}, false, ans
	}
	if req.MemberID == "" {
		res, wait = g.joinNew(now, req, &ans)
		return res, wait, ans
	}
	m := g.members[req.MemberID]
	if m == nil {
		if _, ok := g.pending[req.MemberID]; !ok {
			if err := g.fenced(req.MemberID, req.InstanceID); err != nil {
				return JoinResponse{Err: err}, false, ans
			}
			return JoinResponse{Err: fmt.Errorf("%w: %s", ErrUnknownMember, req.MemberID)}, false, ans
		}
		delete(g.pending, req.MemberID)
		res, wait = g.add(now, req.MemberID, req, &ans)
		return res, wait, ans
	}
	if req.InstanceID != m.instanceID {
		return JoinResponse{Err: fmt.Errorf("%w: member %s has instance id %q, not %q", ErrFencedInstanceID, m.id, m.instanceID, req.InstanceID)}, false, ans
	}
	res, wait = g.rejoin(now, m, req, &ans)
	return res, wait, ans
}

// maxPendingMembers bounds the member ids a group has handed out with
// ErrMemberIDRequired and not seen joining yet (each is kept for its
// session timeout, up to 30 minutes): a client that only ever sends its
// first JoinGroup cannot grow the coordinator's memory without bound.
const maxPendingMembers = 1000

// joinNew handles a join without a member id.
func (g *Classic) joinNew(now time.Time, req JoinRequest, ans *ClassicAnswers) (JoinResponse, bool) {
	if req.InstanceID != "" {
		if old := g.members[g.instances[req.InstanceID]]; old != nil {
			return g.replaceStatic(now, old, req, ans)
		}
		// A static member is known by its instance id: no second round trip.
		return g.add(now, g.cfg.NewMemberID(req.ClientID), req, ans)
	}
	if req.RequireKnownMemberID && len(g.pending) >= maxPendingMembers {
		return JoinResponse{Err: fmt.Errorf("%w: %d new members have not joined with their ids yet", ErrGroupFull, len(g.pending))}, false
	}
	id := g.cfg.NewMemberID(req.ClientID)
	if req.RequireKnownMemberID {
		g.pending[id] = now.Add(req.SessionTimeout)
		return JoinResponse{Err: ErrMemberIDRequired, MemberID: id, Generation: -1}, false
	}
	return g.add(now, id, req, ans)
}

// add makes a new member of id and starts (or joins) a join phase.
func (g *Classic) add(now time.Time, id string, req JoinRequest, ans *ClassicAnswers) (JoinResponse, bool) {
	if g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize {
		return JoinResponse{Err: fmt.Errorf("%w: %d members", ErrGroupFull, len(g.members))}, false
	}
	if len(g.members) == 0 {
		g.protocolType = req.ProtocolType
	}
	m := &classicMember{id: id, instanceID: req.InstanceID}
	g.members[id] = m
	if m.instanceID != "" {
		g.instances[m.instanceID] = id
	}
	g.update(now, m, req)
	m.joining = true
	g.prepare(now, ans)
	if g.cfg.InitialRebalanceDelay > 0 && !g.initialDeadline.IsZero() {
		// Another member of the delayed first phase: wait more, up to
		// the rebalance timeout.
		g.initialDeadline = minTime(now.Add(g.cfg.InitialRebalanceDelay), g.joinDeadline)
	}
	g.maybeCompleteJoin(now, ans)
	return g.joinAnswer(m, ans)
}

// joinAnswer is m's answer: taken from ans if the phase just ended, else
// a wait.
func (g *Classic) joinAnswer(m *classicMember, ans *ClassicAnswers) (JoinResponse, bool) {
	if r, ok := ans.Joins[m.id]; ok {
		delete(ans.Joins, m.id)
		return r, false
	}
	return JoinResponse{MemberID: m.id}, true
}

// rejoin handles a JoinGroup of a known member.
func (g *Classic) rejoin(now time.Time, m *classicMember, req JoinRequest, ans *ClassicAnswers) (JoinResponse, bool) {
	// A join replaces the member's one still waiting, if any: its caller
	// answers that one (see ClassicAnswers).
	same := sameProtocols(m.protocols, req.Protocols)
	if same && (g.state == ClassicCompletingRebalance || g.state == ClassicStable && m.id != g.leader) {
		// It missed the answer of the last join phase (or, a follower,
		// rejoins with nothing new): the same again.
		m.lastSeen = now
		return g.joinResponse(m, m.id == g.leader), false
	}
	g.update(now, m, req)
	m.joining = true
	g.prepare(now, ans)
	g.maybeCompleteJoin(now, ans)
	return g.joinAnswer(m, ans)
}

// sameProtocols reports whether a and b are the same protocols with the
// same metadata, in the same order.
func sameProtocols(a, b []Protocol) bool {
	return slices.EqualFunc(a, b, func(x, y Protocol) bool { return x.Name == y.Name && string(x.Metadata) == string(y.Metadata) })
}

// replaceStatic gives the slot of a static member old to a new member id
// (a restarted process): the old id is fenced.
func (g *Classic) replaceStatic(now time.Time, old *classicMember, req JoinRequest, ans *ClassicAnswers) (JoinResponse, bool) {
	id := g.cfg.NewMemberID(req.ClientID)
	wasLeader := g.leader == old.id
	if old.joining {
		ans.join(old.id, JoinResponse{Err: fmt.Errorf("%w: instance id %q joined again as %s", ErrFencedInstanceID, old.instanceID, id), MemberID: old.id})
	}
	if old.syncing {
		ans.sync(old.id, SyncResponse{Err: fmt.Errorf("%w: instance id %q joined again as %s", ErrFencedInstanceID, old.instanceID, id)})
	}
	delete(g.members, old.id)
	old.id, old.joining, old.syncing = id, false, false
	g.members[id] = old
	g.instances[old.instanceID] = id
	if wasLeader {
		g.leader = id
	}
	same := sameProtocols(old.protocols, req.Protocols)
	if g.state == ClassicStable && same && (!wasLeader || req.SkipAssignment) {
		// No rebalance: the same generation and assignment under the new
		// id; a leader learns the members but keeps the assignment.
		g.update(now, old, req)
		res := g.joinResponse(old, wasLeader)
		res.SkipAssignment = wasLeader
		return res, false
	}
	g.update(now, old, req)
	old.joining = true
	g.prepare(now, ans)
	g.maybeCompleteJoin(now, ans)
	return g.joinAnswer(old, ans)
}

// update records a join's metadata and timeouts on m.
func (g *Classic) update(now time.Time, m *classicMember, req JoinRequest) {
	m.clientID, m.clientHost = req.ClientID, req.ClientHost
	m.sessionTimeout, m.rebalanceTimeout = req.SessionTimeout, req.RebalanceTimeout
	m.protocols = slices.Clone(req.Protocols)
	m.lastSeen = now
}

// prepare starts a join phase unless one is on: the members' syncs and
// joins waiting in the last phase are told to rejoin.
func (g *Classic) prepare(now time.Time, ans *ClassicAnswers) {
	if g.state == ClassicPreparingRebalance {
		return
	}
	for _, m := range g.members {
		if m.syncing {
			// Waiting was being there: its session runs from its answer.
			ans.sync(m.id, SyncResponse{Err: ErrRebalanceInProgress})
			m.syncing, m.lastSeen = false, now
		}
		m.synced = false
	}
	if g.state == ClassicEmpty && g.cfg.InitialRebalanceDelay > 0 {
		g.initialDeadline = now.Add(g.cfg.InitialRebalanceDelay)
	}
	g.state = ClassicPreparingRebalance
	g.joinDeadline = now.Add(g.maxRebalanceTimeout())
	if !g.initialDeadline.IsZero() {
		g.initialDeadline = minTime(g.initialDeadline, g.joinDeadline)
	}
}

func (g *Classic) maxRebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.members {
		d = max(d, m.rebalanceTimeout)
	}
	return d
}

// maybeCompleteJoin ends the join phase when every member has joined
// (and the initial delay is over).
func (g *Classic) maybeCompleteJoin(now time.Time, ans *ClassicAnswers) {
	if g.state != ClassicPreparingRebalance {
		return
	}
	if !g.initialDeadline.IsZero() && now.Before(g.initialDeadline) {
		return
	}
	for _, m := range g.members {
		if !m.joining {
			return
		}
	}
	g.completeJoin(now, ans)
}

// completeJoin ends the join phase with the members that joined.
func (g *Classic) completeJoin(now time.Time, ans *ClassicAnswers) {
	for _, m := range g.members {
		if !m.joining {
			g.remove(m, ans)
		}
	}
	g.initialDeadline, g.joinDeadline = time.Time{}, time.Time{}
	g.generation++
	if len(g.members) == 0 {
		g.state, g.protocol, g.leader, g.protocolType = ClassicEmpty, "", "", ""
		return
	}
	g.protocol = g.chooseProtocol()
	if g.members[g.leader] == nil {
		g.leader = g.memberIDs()[0]
	}
	g.state = ClassicCompletingRebalance
	for _, id := range g.memberIDs() {
		m := g.members[id]
		m.joining, m.assignment = false, nil
		m.lastSeen = now
		m.syncDeadline = now.Add(m.rebalanceTimeout)
		ans.join(id, g.joinResponse(m, id == g.leader))
	}
}

// joinResponse is the current generation as m's answer (with the
// members for the leader).
func (g *Classic) joinResponse(m *classicMember, leader bool) JoinResponse {
	r := JoinResponse{MemberID: m.id, Generation: g.generation, ProtocolType: g.protocolType, Protocol: g.protocol, Leader: g.leader}
	if leader {
		for _, id := range g.memberIDs() {
			o := g.members[id]
			r.Members = append(r.Members, JoinMember{MemberID: o.id, InstanceID: o.instanceID, Metadata: o.metadata(g.protocol)})
		}
	}
	return r
}

func (m *classicMember) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.Name == protocol {
			return p.Metadata
		}
	}
	return nil
}

// chooseProtocol picks the protocol every member supports that most
// members prefer (each member votes for its first supported one; ties go
// to the earliest in the leader's, else the first member's, order).
func (g *Classic) chooseProtocol() string {
	ids := g.memberIDs()
	var candidates []string
	for _, p := range g.members[ids[0]].protocols {
		all := true
		for _, id := range ids[1:] {
			all = all && slices.ContainsFunc(g.members[id].protocols, func(q Protocol) bool { return q.Name == p.Name })
		}
		if all {
			candidates = append(candidates, p.Name)
		}
	}
	votes := map[string]int{}
	for _, id := range ids {
		for _, p := range g.members[id].protocols {
			if slices.Contains(candidates, p.Name) {
				votes[p.Name]++
				break
			}
		}
	}
	best := ""
	for _, c := range candidates {
		if best == "" || votes[c] > votes[best] {
			best = c
		}
	}
	return best
}

// supportsCommon reports whether a member with protocols ps would leave
// a protocol every member supports.
func (g *Classic) supportsCommon(ps []Protocol) bool {
	for _, p := range ps {
		all := true
		for _, m := range g.members {
			all = all && slices.ContainsFunc(m.protocols, func(q Protocol) bool { return q.Name == p.Name })
		}
		if all {
			return true
		}
	}
	return false
}

// Sync handles a SyncGroup at now: the answer, or wait=true when it waits
// for the leader's (answered from a later ClassicAnswers under its member
// id).
func (g *Classic) Sync(now time.Time, req SyncRequest) (res SyncResponse, wait bool, ans ClassicAnswers) {
	ans = g.Tick(now)
	m, err := g.lookup(req.MemberID, req.InstanceID)
	if err != nil {
		return SyncResponse{Err: err}, false, ans
	}
	switch {
	case req.Generation != g.generation:
		return SyncResponse{Err: fmt.Errorf("%w: generation %d, the group is at %d", ErrIllegalGeneration, req.Generation, g.generation)}, false, ans
	case req.ProtocolType != "" && req.ProtocolType != g.protocolType, req.Protocol != "" && req.Protocol != g.protocol:
		return SyncResponse{Err: fmt.Errorf("%w: %s/%s, the group's is %s/%s", ErrInconsistentProtocol, req.ProtocolType, req.Protocol, g.protocolType, g.protocol)}, false, ans
	}
	m.lastSeen = now
	switch g.state {
	case ClassicPreparingRebalance:
		return SyncResponse{Err: ErrRebalanceInProgress}, false, ans
	case ClassicStable:
		return g.syncResponse(m), false, ans
	}
	// CompletingRebalance. (A sync replaces the member's one still
	// waiting, if any, as a join does.)
	m.synced = true
	if m.id != g.leader {
		m.syncing = true
		return SyncResponse{}, true, ans
	}
	for _, id := range g.memberIDs() {
		o := g.members[id]
		o.assignment = req.Assignments[id]
	}
	g.state = ClassicStable
	for _, o := range g.members {
		if o.syncing {
			o.syncing, o.lastSeen = false, now
			ans.sync(o.id, g.syncResponse(o))
		}
	}
	return g.syncResponse(m), false, ans
}

func (g *Classic) syncResponse(m *classicMember) SyncResponse {
	return SyncResponse{ProtocolType: g.protocolType, Protocol: g.protocol, Assignment: m.assignment}
}

// Heartbeat handles a Heartbeat at now: nil, or why the member must
// join again (ErrRebalanceInProgress in the join phase,
// ErrIllegalGeneration, ErrUnknownMember, ErrFencedInstanceID).
func (g *Classic) Heartbeat(now time.Time, memberID, instanceID string, generation int32) (ClassicAnswers, error) {
	ans := g.Tick(now)
	m, err := g.lookup(memberID, instanceID)
	if err != nil {
		return ans, err
	}
	m.lastSeen = now
	switch {
	case g.state == ClassicPreparingRebalance:
		return ans, ErrRebalanceInProgress
	case generation != g.generation:
		return ans, fmt.Errorf("%w: generation %d, the group is at %d", ErrIllegalGeneration, generation, g.generation)
	}
	return ans, nil
}

// Leave removes a member (by member id, or a static one by instance id)
// at now and rebalances the others.
func (g *Classic) Leave(now time.Time, memberID, instanceID string) (ClassicAnswers, error) {
	ans := g.Tick(now)
	if memberID == "" && instanceID != "" {
		memberID = g.instances[instanceID]
	}
	m, err := g.lookup(memberID, instanceID)
	if err != nil {
		return ans, err
	}
	g.remove(m, &ans)
	g.rebalanceAfterRemoval(now, &ans)
	return ans, nil
}

// CheckCommit decides an offset commit of a member at generation: the
// member must be in the group at its generation, and the group not
// waiting for its new generation's assignment (CompletingRebalance:
// REBALANCE_IN_PROGRESS). During a join phase (PreparingRebalance) the
// generation has not moved yet, and a member's commit at it is accepted,
// as Kafka accepts it: that is the commit of an eager member's revoke
// callback, made right after its heartbeat was told of the rebalance, and
// refusing it would send the partitions' next owners back to the offsets
// before it. A commit from outside the group (no member id; Kafka
// clients send generation -1) is for an empty group only.
func (g *Classic) CheckCommit(now time.Time, memberID, instanceID string, generation int32) (ClassicAnswers, error) {
	ans := g.Tick(now)
	if memberID == "" {
		if len(g.members) > 0 {
			return ans, fmt.Errorf("%w: %d members; a commit from outside the group needs it empty", ErrIllegalGeneration, len(g.members))
		}
		return ans, nil
	}
	m, err := g.lookup(memberID, instanceID)
	if err != nil {
		return ans, err
	}
	switch {
	case generation != g.generation:
		return ans, fmt.Errorf("%w: generation %d, the group is at %d", ErrIllegalGeneration, generation, g.generation)
	case g.state == ClassicCompletingRebalance:
		return ans, ErrRebalanceInProgress
	}
	m.lastSeen = now
	return ans, nil
}

// Tick expires at now what timed out: members past their session timeout
// (a rebalance), the end of a join phase at its deadline (or of the
// initial delay), members that did not sync in time, pending member ids.
func (g *Classic) Tick(now time.Time) ClassicAnswers {
	var ans ClassicAnswers
	for id, until := range g.pending {
		if now.After(until) {
			delete(g.pending, id)
		}
	}
	removed := false
	for _, id := range g.memberIDs() {
		m := g.members[id]
		expired := !m.joining && !m.syncing && now.Sub(m.lastSeen) > m.sessionTimeout
		unsynced := g.state == ClassicCompletingRebalance && !m.synced && now.After(m.syncDeadline)
		if expired || unsynced {
			g.remove(m, &ans)
			removed = true
		}
	}
	if removed {
		g.rebalanceAfterRemoval(now, &ans)
	}
	if g.state == ClassicPreparingRebalance {
		if !g.joinDeadline.IsZero() && !now.Before(g.joinDeadline) {
			g.completeJoin(now, &ans)
		} else {
			g.maybeCompleteJoin(now, &ans)
		}
	}
	return ans
}

// NextDeadline is when Tick next has something to do (zero: nothing
// scheduled but session timeouts, which the caller's periodic expiry
// covers).
func (g *Classic) NextDeadline() time.Time {
	var d time.Time
	for _, t := range []time.Time{g.initialDeadline, g.joinDeadline} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// rebalanceAfterRemoval starts a join phase for the remaining members
// (or empties the group), or ends the one on if the removed member was
// the last awaited.
func (g *Classic) rebalanceAfterRemoval(now time.Time, ans *ClassicAnswers) {
	switch {
	case len(g.members) == 0 && g.state != ClassicPreparingRebalance:
		g.state, g.protocol, g.leader, g.protocolType = ClassicEmpty, "", "", ""
		g.generation++
	case g.state == ClassicPreparingRebalance:
		g.maybeCompleteJoin(now, ans)
	default:
		g.prepare(now, ans)
		g.maybeCompleteJoin(now, ans)
	}
}

// remove takes m out of the group, answering its waiting requests.
func (g *Classic) remove(m *classicMember, ans *ClassicAnswers) {
	if m.joining {
		ans.join(m.id, JoinResponse{Err: fmt.Errorf("%w: %s was removed from the group", ErrUnknownMember, m.id), MemberID: m.id})
	}
	if m.syncing {
		ans.sync(m.id, SyncResponse{Err: fmt.Errorf("%w: %s was removed from the group", ErrUnknownMember, m.id)})
	}
	delete(g.members, m.id)
	if m.instanceID != "" && g.instances[m.instanceID] == m.id {
		delete(g.instances, m.instanceID)
	}
	if g.leader == m.id {
		g.leader = ""
	}
}

// lookup finds a member by id, checking its instance id.
func (g *Classic) lookup(memberID, instanceID string) (*classicMember, error) {
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

// fenced is ErrFencedInstanceID when instanceID belongs to another member
// id than memberID.
func (g *Classic) fenced(memberID, instanceID string) error {
	if cur, ok := g.instances[instanceID]; instanceID != "" && ok && cur != memberID {
		return fmt.Errorf("%w: instance id %q belongs to member %s, not %s: another process joined with it", ErrFencedInstanceID, instanceID, cur, memberID)
	}
	return nil
}

func (g *Classic) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// ClassicDescription is a classic group as DescribeGroups answers it.
type ClassicDescription struct {
	State                  ClassicState
	ProtocolType, Protocol string
	Generation             int32
	Leader                 string
	Members                []ClassicMemberDescription // by member id
}

// ClassicMemberDescription is one member of a ClassicDescription.
type ClassicMemberDescription struct {
	MemberID, InstanceID, ClientID, ClientHost string
	// Metadata is its metadata for the group's protocol; Assignment what
	// the leader gave it (nil before the leader's sync).
	Metadata, Assignment []byte
}

// Describe is a snapshot of the group (as of its last call).
func (g *Classic) Describe() ClassicDescription {
	d := ClassicDescription{State: g.state, ProtocolType: g.protocolType, Protocol: g.protocol, Generation: g.generation, Leader: g.leader}
	for _, id := range g.memberIDs() {
		m := g.members[id]
		d.Members = append(d.Members, ClassicMemberDescription{
			MemberID: m.id, InstanceID: m.instanceID, ClientID: m.clientID, ClientHost: m.clientHost,
			Metadata: m.metadata(g.protocol), Assignment: m.assignment,
		})
	}
	return d
}

// Subscriptions returns the group's protocol type and the metadata of
// every protocol of every member (for Kafka's consumer protocol, each
// names the member's subscribed topics; a member's protocols name the
// same ones), for OffsetDelete to tell which topics the group consumes.
func (g *Classic) Subscriptions() (protocolType string, metadata [][]byte) {
	for _, id := range g.memberIDs() {
		for _, p := range g.members[id].protocols {
			metadata = append(metadata, p.Metadata)
		}
	}
	return g.protocolType, metadata
}
