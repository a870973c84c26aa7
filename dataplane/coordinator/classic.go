package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicemq/sluice/dataplane/group"
	"github.com/sluicemq/sluice/dataplane/runtime"
)

// Groups of Kafka's classic protocol (group.Classic) live beside the
// consumer-protocol groups (group.Group) under the same keys: a group is
// one or the other while it has members, as in Kafka (a join of the other
// protocol is group.ErrInconsistentProtocol); its committed offsets are the
// group's either way. Their membership is in memory only, like the
// consumer groups': after a coordinator failover the members' heartbeats
// are answered UNKNOWN_MEMBER_ID and they join again.
//
// A JoinGroup or SyncGroup that waits for other members parks on a
// channel registered under its member id while the shard's operation
// runs (under the runtime's lock), so that no later operation can answer
// it first; the answers a state-machine call returns are delivered to
// those channels at once (they are buffered). The join phase's deadlines
// are runtime timers under the empty key, like the members' expiry.

// waitKey names a waiting JoinGroup or SyncGroup.
type waitKey struct {
	gk     GroupKey
	member string
	sync   bool
}

// waiters are the JoinGroups and SyncGroups waiting for their answers.
type waiters struct {
	mu sync.Mutex
	m  map[waitKey]chan any
}

// park registers a waiter for k, answering the one it replaces (a later
// request of the same member) with ErrRebalanceInProgress.
func (w *waiters) park(k waitKey) chan any {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[waitKey]chan any{}
	}
	if old := w.m[k]; old != nil {
		old <- replaced(k.sync)
	}
	ch := make(chan any, 1)
	w.m[k] = ch
	return ch
}

func replaced(sync bool) any {
	err := fmt.Errorf("%w: replaced by a later request of the member", group.ErrRebalanceInProgress)
	if sync {
		return group.SyncResponse{Err: err}
	}
	return group.JoinResponse{Err: err}
}

// unpark answers the waiter of k, if any, as replaced by a later request
// of its member.
func (w *waiters) unpark(k waitKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.m[k]; old != nil {
		old <- replaced(k.sync)
		delete(w.m, k)
	}
}

// drop forgets k's waiter ch (its caller gave up).
func (w *waiters) drop(k waitKey, ch chan any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[k] == ch {
		delete(w.m, k)
	}
}

// deliver sends the group's answers to their waiters; an answer nobody
// waits for (its caller gave up) is dropped.
func (w *waiters) deliver(gk GroupKey, ans group.ClassicAnswers) {
	if ans.Empty() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	send := func(k waitKey, v any) {
		if ch := w.m[k]; ch != nil {
			ch <- v
			delete(w.m, k)
		}
	}
	for id, r := range ans.Joins {
		send(waitKey{gk, id, false}, r)
	}
	for id, r := range ans.Syncs {
		send(waitKey{gk, id, true}, r)
	}
}

// newClassicMemberID is Kafka's kind of member id: the client id, a dash
// and random hex.
func newClassicMemberID(clientID string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	if len(clientID) > 64 {
		clientID = clientID[:64]
	}
	return clientID + "-" + hex.EncodeToString(b)
}

// classic returns the group's classic state machine, creating it on first
// use: group.ErrInconsistentProtocol while the group has consumer-protocol
// members.
func (s *Shard) classic(gk GroupKey, now time.Time) (*group.Classic, error) {
	gs := s.st.group(gk)
	if gs.members != nil && !gs.members.Empty(now) {
		return nil, fmt.Errorf("%w: group %q has members of the consumer protocol (KIP-848); a member of the classic protocol cannot join it", group.ErrInconsistentProtocol, gk.Group)
	}
	if gs.classic == nil {
		g, err := group.NewClassic(gk.Group, group.ClassicConfig{
			NewMemberID: newClassicMemberID, InitialRebalanceDelay: s.cfg.InitialRebalanceDelay,
		})
		if err != nil {
			return nil, err
		}
		gs.classic = g
	}
	return gs.classic, nil
}

// classicTimer arms a timer at the group's next deadline, unless one is
// armed for it.
func (s *Shard) classicTimer(gk GroupKey, gs *groupState) []runtime.Timer {
	at := gs.classic.NextDeadline()
	if at.IsZero() || at.Equal(gs.classicArmed) {
		return nil
	}
	gs.classicArmed = at
	// Named for the group: the shard's expiry and its other groups'
	// deadlines are armed under the same (empty) key.
	return []runtime.Timer{{Name: "classic\x00" + gk.Tenant + "\x00" + gk.Group, At: at, Op: func(now time.Time) (runtime.Update, error) {
		g := s.st.groups[gk]
		if g == nil || g.classic == nil {
			return runtime.Update{}, nil
		}
		g.classicArmed = time.Time{}
		s.waiting.deliver(gk, g.classic.Tick(now))
		return runtime.Update{Timers: s.classicTimer(gk, g)}, nil
	}}}
}

// classicResult is a classic call's answer, or the channel it will come
// on.
type classicResult[R any] struct {
	res  R
	wait chan any
}

// ClassicJoin runs a JoinGroup (group.Classic.Join).
func (s *Shard) ClassicJoin(gk GroupKey, req group.JoinRequest, now time.Time) (runtime.Result[classicResult[group.JoinResponse]], error) {
	var out runtime.Result[classicResult[group.JoinResponse]]
	g, err := s.classic(gk, now)
	if err != nil {
		return out, err
	}
	res, wait, ans := g.Join(now, req)
	s.waiting.deliver(gk, ans)
	if res.MemberID != "" && req.MemberID == res.MemberID {
		// A join of a member whose previous join still waits replaces
		// it, answered now (park does, or unpark when this one is
		// answered at once).
		s.waiting.unpark(waitKey{gk, res.MemberID, false})
	}
	if wait {
		out.Response.wait = s.waiting.park(waitKey{gk, res.MemberID, false})
	}
	out.Response.res = res
	out.Timers = s.classicTimer(gk, s.st.groups[gk])
	return out, nil
}

// ClassicSync runs a SyncGroup (group.Classic.Sync).
func (s *Shard) ClassicSync(gk GroupKey, req group.SyncRequest, now time.Time) (runtime.Result[classicResult[group.SyncResponse]], error) {
	var out runtime.Result[classicResult[group.SyncResponse]]
	gs := s.st.groups[gk]
	if gs == nil || gs.classic == nil {
		return out, fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, req.MemberID, gk.Group)
	}
	res, wait, ans := gs.classic.Sync(now, req)
	s.waiting.deliver(gk, ans)
	s.waiting.unpark(waitKey{gk, req.MemberID, true}) // a sync it replaces, as in ClassicJoin
	if wait {
		out.Response.wait = s.waiting.park(waitKey{gk, req.MemberID, true})
	}
	out.Response.res = res
	out.Timers = s.classicTimer(gk, gs)
	return out, nil
}

// ClassicHeartbeat runs a classic Heartbeat, or a LeaveGroup with leave.
func (s *Shard) ClassicHeartbeat(gk GroupKey, memberID, instanceID string, generation int32, leave bool, now time.Time) (runtime.Result[struct{}], error) {
	var out runtime.Result[struct{}]
	gs := s.st.groups[gk]
	if gs == nil || gs.classic == nil {
		return out, fmt.Errorf("%w %q in group %q", group.ErrUnknownMember, memberID, gk.Group)
	}
	var ans group.ClassicAnswers
	var err error
	if leave {
		ans, err = gs.classic.Leave(now, memberID, instanceID)
	} else {
		ans, err = gs.classic.Heartbeat(now, memberID, instanceID, generation)
	}
	s.waiting.deliver(gk, ans)
	out.Timers = s.classicTimer(gk, gs)
	return out, err
}

// awaitClassic waits for a parked request's answer, or gives up with ctx
// (the client went away) or when the coordinator closes (its partition
// moved: runtime.ErrNotCoordinator, and the client finds the new one):
// its answer, when it comes, is dropped.
func (c *Coordinator) awaitClassic(ctx context.Context, k waitKey, wait chan any) (any, error) {
	select {
	case v := <-wait:
		return v, nil
	case <-ctx.Done():
		c.w.drop(k, wait)
		return nil, ctx.Err()
	case <-c.h.Done():
		c.w.drop(k, wait)
		return nil, fmt.Errorf("%w: the group's coordinator (offsets partition %d, leader epoch %d) closed while the request waited", runtime.ErrNotCoordinator, c.cfg.Partition, c.cfg.LeaderEpoch)
	}
}

// JoinClassic runs a JoinGroup of Kafka's classic protocol, waiting (up
// to ctx) for the join phase to end when it must. A group unknown here
// is created only when Config.Admit admits it.
func (c *Coordinator) JoinClassic(ctx context.Context, now time.Time, tenantID, groupID string, req group.JoinRequest) (group.JoinResponse, error) {
	gk := GroupKey{tenantID, groupID}
	done, err := c.admit(ctx, gk)
	if err != nil {
		return group.JoinResponse{}, err
	}
	defer done()
	r, err := memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[classicResult[group.JoinResponse]], error) {
		return s.ClassicJoin(gk, req, now)
	})
	if err != nil || r.wait == nil {
		return r.res, err
	}
	v, err := c.awaitClassic(ctx, waitKey{gk, r.res.MemberID, false}, r.wait)
	if err != nil {
		return group.JoinResponse{}, err
	}
	return v.(group.JoinResponse), nil
}

// SyncClassic runs a SyncGroup, waiting (up to ctx) for the leader's
// assignment when it must.
func (c *Coordinator) SyncClassic(ctx context.Context, now time.Time, tenantID, groupID string, req group.SyncRequest) (group.SyncResponse, error) {
	gk := GroupKey{tenantID, groupID}
	r, err := memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[classicResult[group.SyncResponse]], error) {
		return s.ClassicSync(gk, req, now)
	})
	if err != nil || r.wait == nil {
		return r.res, err
	}
	v, err := c.awaitClassic(ctx, waitKey{gk, req.MemberID, true}, r.wait)
	if err != nil {
		return group.SyncResponse{}, err
	}
	return v.(group.SyncResponse), nil
}

// HeartbeatClassic runs a classic Heartbeat: nil, or why the member must
// join again.
func (c *Coordinator) HeartbeatClassic(now time.Time, tenantID, groupID, memberID, instanceID string, generation int32) error {
	gk := GroupKey{tenantID, groupID}
	_, err := memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		return s.ClassicHeartbeat(gk, memberID, instanceID, generation, false, now)
	})
	return err
}

// LeaveClassic removes a classic member (by member id, or by instance id
// alone) and rebalances the rest.
func (c *Coordinator) LeaveClassic(now time.Time, tenantID, groupID, memberID, instanceID string) error {
	gk := GroupKey{tenantID, groupID}
	_, err := memberOp(c, func(s *Shard, _ time.Time) (runtime.Result[struct{}], error) {
		return s.ClassicHeartbeat(gk, memberID, instanceID, 0, true, now)
	})
	return err
}

// errNotClassic is no refusal: the group has no classic members.
var errNotClassic = errors.New("not a classic group")

// checkClassicCommit decides a commit in a group with classic members
// (or by a classic member): group.Classic.CheckCommit; errNotClassic when
// the group has none.
func (s *Shard) checkClassicCommit(gk GroupKey, gs *groupState, memberID, instanceID string, generation int32, now time.Time) error {
	if gs == nil || gs.classic == nil || gs.classic.Members() == 0 && !gs.classic.Has(memberID) {
		return errNotClassic
	}
	ans, err := gs.classic.CheckCommit(now, memberID, instanceID, generation)
	s.waiting.deliver(gk, ans)
	return err
}

// DescribeClassic returns the group's classic membership; ok is false
// when it has none here (no JoinGroup since this coordinator took over).
func (c *Coordinator) DescribeClassic(now time.Time, tenantID, groupID string) (d group.ClassicDescription, ok bool) {
	type out struct {
		d  group.ClassicDescription
		ok bool
	}
	r := read(c, func(s *Shard) out {
		gk := GroupKey{tenantID, groupID}
		gs := s.st.groups[gk]
		if gs == nil || gs.classic == nil {
			return out{}
		}
		s.waiting.deliver(gk, gs.classic.Tick(now))
		return out{gs.classic.Describe(), true}
	})
	return r.d, r.ok
}
