package group_test

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/group"

	"github.com/sluicemq/sluice/internal/scenario"
)

// Scenario files (testdata/*.txt) hold blocks: comment lines (#), command
// lines, a "----" line and the expected output up to a blank line. Each file
// runs on a fresh world (a group, a topic metadata view, a clock and one
// simulated client per member); after every command the world checks that
// no two clients own a partition at once and that every client owns only
// partitions the group says it holds. Regenerate the expected output with
//
//	go test ./dataplane/group -run TestGroupScenario -rewrite
//
// (or SLUICE_REWRITE=1) and review the diff.
//
// Commands:
//
//	new [assignor=uniform|range] [session=45s] [interval=5s] [hold=0s]
//	topic NAME N|-                      set a topic's partition count, or delete it
//	join NAME sub=T,U [instance=I] [owned=SPEC] [timeout=D]
//	                                    a new member (epoch 0, id "") that the group names NAME
//	rejoin NAME [sub=...] [owned=SPEC]  epoch 0 with NAME's member id (a reset)
//	hb NAME [epoch=N] [owned=SPEC|-] [sub=T,U] [id=ID] [instance=I]
//	                                    a heartbeat; by default with the client's member id,
//	                                    epoch, instance id and what it owns (owned=- sends nil: unchanged)
//	stall NAME                          the client stops revoking: it keeps what it is told to give up
//	crash NAME                          the client process dies (it consumes nothing, sends nothing)
//	pause NAME                          the client process stops (SIGSTOP) with its member id, epoch
//	                                    and partitions; its next request resumes it (a zombie)
//	leave NAME | leave-static NAME      heartbeat with epoch -1 / -2
//	remove NAME | remove-instance I     Group.Leave by member id / instance id
//	tick D                              advance the clock
//	expire                              Group.Expire
//	owns NAME TOPIC PARTITION [epoch=N] [instance=I]
//	                                    Group.Owns, by default with the client's epoch and instance id
//	describe                            Group.Describe
//	failover [hold=D]                   the coordinator moves: a new Group (Config.HoldUntil now+D),
//	                                    given back the member id
//	                                    of each instance id's latest join (RestoreInstance, as the
//	                                    broker does from its log); clients keep their partitions and
//	                                    learn at their next heartbeat
//
// A client refused with "fenced instance id" stops for good: it drops its
// partitions and sends nothing more by itself.
//
// SPEC is "t:0,1|u:2" or "none". A client that owns partitions is ideal
// unless stalled: it gives up at once what a response leaves out and takes
// what a response gives.

func TestGroupScenario(t *testing.T) {
	t.Parallel()
	scenario.Run(t, "testdata/*.txt", func(t *testing.T) scenario.Script {
		w := newWorld(t)
		return scenario.Script{Exec: w.run, Out: &w.out, Check: func(cmd string) error {
			if strings.HasPrefix(cmd, "tick ") {
				return nil // observing the group would expire members
			}
			return w.check()
		}}
	})
}

// client is the simulated consumer behind a member.
type client struct {
	name     string
	id       string // member id, "" when not a member
	epoch    int32
	owned    group.TopicPartitions // what it consumes
	stalled  bool
	instance string
	orphan   bool                  // its member was lost in a failover; it does not know yet
	paused   group.TopicPartitions // what it stopped consuming after "unknown member"
	stopped  bool                  // SIGSTOPped: it consumes nothing until its next request
	fenced   bool                  // another process took over its instance id: it stopped for good
}

type world struct {
	t       *testing.T
	g       *group.Group
	cfg     group.Config
	now     time.Time
	topics  map[string]int32
	clients map[string]*client
	nextID  string // the id the group gives the next joining member
	epoch   int32  // the group epoch after the last command
	// instances are the member ids of each instance id's latest join, as
	// the broker writes them to its log: a failover restores them.
	instances map[string]string
	out       strings.Builder
}

var epoch0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: epoch0, topics: map[string]int32{}, clients: map[string]*client{}, instances: map[string]string{}}
	w.cfg = group.Config{NewMemberID: func() string { return w.nextID }}
	w.reset()
	return w
}

func (w *world) reset() {
	g, err := group.New("g", w.cfg)
	require.NoError(w.t, err)
	w.g = g
}

func (w *world) printf(format string, args ...any) {
	fmt.Fprintf(&w.out, format, args...)
	w.out.WriteByte('\n')
}

func parseSpec(s string) (group.TopicPartitions, error) {
	if s == "-" {
		return nil, nil
	}
	out := group.TopicPartitions{}
	if s == "none" {
		return out, nil
	}
	for _, part := range strings.Split(s, "|") {
		topic, ps, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("bad partitions %q", part)
		}
		for _, p := range strings.Split(ps, ",") {
			n, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			out[topic] = append(out[topic], int32(n))
		}
	}
	return out, nil
}

func (w *world) run(line string) error {
	fields := strings.Fields(line)
	cmd, args := fields[0], fields[1:]
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	dur := func(k string) (time.Duration, error) {
		if v, ok := kv[k]; ok {
			return time.ParseDuration(v)
		}
		return 0, nil
	}
	cl := func() (*client, error) {
		if len(pos) == 0 {
			return nil, errors.New("missing member name")
		}
		c := w.clients[pos[0]]
		if c == nil {
			return nil, fmt.Errorf("unknown client %s", pos[0])
		}
		return c, nil
	}
	if cmd == "tick" {
		// Only the clock moves; the next command sees the expiries.
		if len(pos) != 1 {
			return errors.New("want: tick DURATION")
		}
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return err
		}
		w.now = w.now.Add(d)
		return nil
	}
	before := w.epoch // not Describe: that would expire members now
	defer func() {
		if after := w.g.Describe(w.now).GroupEpoch; after != before {
			w.printf("group epoch %d -> %d", before, after)
			w.epoch = after
		}
	}()
	switch cmd {
	case "new":
		var err error
		w.cfg.Assignor = kv["assignor"]
		if w.cfg.SessionTimeout, err = dur("session"); err != nil {
			return err
		}
		if w.cfg.HeartbeatInterval, err = dur("interval"); err != nil {
			return err
		}
		hold, err := dur("hold")
		if err != nil {
			return err
		}
		w.cfg.HoldUntil = time.Time{}
		if hold > 0 {
			w.cfg.HoldUntil = w.now.Add(hold)
		}
		w.reset()
		before, w.epoch = 0, 0
	case "topic":
		if len(pos) != 2 {
			return errors.New("want: topic NAME N|-")
		}
		if pos[1] == "-" {
			delete(w.topics, pos[0])
			return nil
		}
		n, err := strconv.Atoi(pos[1])
		if err != nil {
			return err
		}
		w.topics[pos[0]] = int32(n)
	case "join", "rejoin", "hb":
		if len(pos) == 0 {
			return errors.New("missing member name")
		}
		c := w.clients[pos[0]]
		if c == nil {
			if cmd != "join" {
				return fmt.Errorf("unknown client %s", pos[0])
			}
			c = &client{name: pos[0]}
			w.clients[c.name] = c
		}
		req := group.HeartbeatRequest{MemberID: c.id, MemberEpoch: c.epoch, InstanceID: c.instance, Owned: c.owned}
		if v, ok := kv["instance"]; ok {
			req.InstanceID = v
		}
		c.stopped = false // a request resumes a paused client
		switch cmd {
		case "join":
			req.MemberID, req.MemberEpoch = "", 0
			w.nextID = c.name
			c.instance, c.fenced = req.InstanceID, false
		case "rejoin":
			req.MemberEpoch = 0
		case "hb":
			if c.id == "" {
				return fmt.Errorf("client %s is not a member: join first", c.name)
			}
		}
		if v, ok := kv["id"]; ok {
			req.MemberID = v
		}
		if cmd == "join" && c.paused != nil {
			req.Owned = c.paused
		}
		if req.Owned == nil {
			req.Owned = group.TopicPartitions{}
		}
		if v, ok := kv["owned"]; ok {
			o, err := parseSpec(v)
			if err != nil {
				return err
			}
			req.Owned = o
		}
		if v, ok := kv["epoch"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return err
			}
			req.MemberEpoch = int32(n)
		}
		if v, ok := kv["sub"]; ok {
			req.Subscriptions = strings.Split(v, ",")
		}
		var err error
		if req.RebalanceTimeout, err = dur("timeout"); err != nil {
			return err
		}
		resp, err := w.g.Heartbeat(w.now, req, group.TopicMap(w.topics))
		if err != nil {
			w.printf("%s: error: %v", c.name, err)
			if _, ok := kv["id"]; ok {
				return nil // not the client's own request
			}
			switch {
			case errors.Is(err, group.ErrUnknownMember):
				// The client pauses its partitions and joins as a new
				// member reporting them (the package doc's client
				// contract).
				c.id, c.epoch, c.orphan = "", 0, false
				c.paused, c.owned = c.owned, nil
			case errors.Is(err, group.ErrFencedMemberEpoch):
				// The client drops its partitions and rejoins with its id.
				c.epoch, c.owned = 0, nil
			case errors.Is(err, group.ErrFencedInstanceID):
				// Another process has its instance id: it stops for
				// good (it keeps its ids to show what it would get).
				c.owned, c.paused, c.fenced = nil, nil, true
			}
			return nil
		}
		if req.MemberEpoch == group.JoinEpoch && req.InstanceID != "" {
			w.instances[req.InstanceID] = resp.MemberID
		}
		if resp.MemberID != c.name && kv["id"] == "" {
			return fmt.Errorf("member id %q, want %q", resp.MemberID, c.name)
		}
		c.id, c.epoch, c.orphan, c.paused = resp.MemberID, resp.MemberEpoch, false, nil
		c.owned = w.take(c, resp.Assignment)
		w.printf("%s: epoch=%d assignment=%s", c.name, resp.MemberEpoch, resp.Assignment)
	case "stall":
		c, err := cl()
		if err != nil {
			return err
		}
		c.stalled = true
	case "crash":
		c, err := cl()
		if err != nil {
			return err
		}
		c.id, c.epoch, c.owned, c.orphan, c.paused = "", 0, nil, false, nil
	case "pause":
		c, err := cl()
		if err != nil {
			return err
		}
		c.stopped = true
	case "leave", "leave-static":
		c, err := cl()
		if err != nil {
			return err
		}
		req := group.HeartbeatRequest{MemberID: c.id, MemberEpoch: group.LeaveEpoch, InstanceID: c.instance}
		if cmd == "leave-static" {
			req.MemberEpoch = group.StaticLeaveEpoch
		}
		c.stopped = false
		resp, err := w.g.Heartbeat(w.now, req, group.TopicMap(w.topics))
		if err != nil {
			w.printf("%s: error: %v", c.name, err)
			if errors.Is(err, group.ErrFencedInstanceID) {
				c.owned, c.fenced = nil, true
			}
			return nil
		}
		// A leaving client stops consuming; it keeps its member id and
		// epoch only to show what a zombie would get.
		c.owned = nil
		w.printf("%s: left epoch=%d", c.name, resp.MemberEpoch)
	case "remove", "remove-instance":
		var err error
		if cmd == "remove" {
			err = w.g.Leave(w.now, pos[0], "")
		} else {
			err = w.g.Leave(w.now, "", pos[0])
		}
		if err != nil {
			w.printf("error: %v", err)
			return nil
		}
		w.printf("removed %s", pos[0])
	case "expire":
		expired := w.g.Expire(w.now)
		if len(expired) > 0 {
			w.printf("expired %s", strings.Join(expired, " "))
		}
	case "owns":
		if len(pos) != 3 {
			return errors.New("want: owns NAME TOPIC PARTITION")
		}
		p, err := strconv.Atoi(pos[2])
		if err != nil {
			return err
		}
		var e int32
		var instance string
		if c := w.clients[pos[0]]; c != nil {
			e, instance = c.epoch, c.instance
		}
		if v, ok := kv["epoch"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				return err
			}
			e = int32(n)
		}
		if v, ok := kv["instance"]; ok {
			instance = v
		}
		if err := w.g.Owns(w.now, pos[0], instance, e, pos[1], int32(p)); err != nil {
			w.printf("error: %v", err)
		} else {
			w.printf("ok")
		}
	case "describe":
		d := w.g.Describe(w.now)
		w.printf("group epoch=%d target=%d state=%s rebalances=%d revoked=%d", d.GroupEpoch, d.TargetEpoch, d.State, d.Rebalances, d.RevokedPartitions)
		for _, m := range d.Members {
			line := fmt.Sprintf("  %s epoch=%d assignment=%s target=%s", m.MemberID, m.MemberEpoch, m.Assignment, m.Target)
			if m.InstanceID != "" {
				line += " instance=" + m.InstanceID
			}
			if m.Pending.Len() > 0 {
				line += " pending=" + m.Pending.String()
			}
			if m.Revoking.Len() > 0 {
				line += " revoking=" + m.Revoking.String()
			}
			if !m.RevocationDeadline.IsZero() {
				line += " revoke-by=" + m.RevocationDeadline.Sub(epoch0).String()
			}
			w.printf("%s", line)
		}
	case "failover":
		d, err := dur("hold")
		if err != nil {
			return err
		}
		w.cfg.HoldUntil = w.now.Add(d)
		w.reset()
		before, w.epoch = 0, 0
		for instance, id := range w.instances {
			require.NoError(w.t, w.g.RestoreInstance(instance, id))
		}
		for _, c := range w.clients {
			c.orphan = c.id != "" // it keeps its partitions
		}
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

// take is what client c owns after a response: the assignment, plus, for a
// stalled client, what it owned before.
func (w *world) take(c *client, assignment group.TopicPartitions) group.TopicPartitions {
	out := group.TopicPartitions{}
	for t, ps := range assignment {
		out[t] = slices.Clone(ps)
	}
	if c.stalled {
		for t, ps := range c.owned {
			for _, p := range ps {
				if !out.Contains(t, p) {
					out[t] = append(out[t], p)
				}
			}
		}
	}
	return out
}

// dropRemoved stops the clients of members the group removed (session or
// rebalance timeout, Leave): the group presumes them dead. In reality a
// zombie learns it at its next heartbeat, and its commits are refused until
// then; the simulated one keeps its member id and epoch to show that.
func (w *world) dropRemoved() {
	live := map[string]bool{}
	for _, m := range w.g.Describe(w.now).Members {
		live[m.MemberID] = true
	}
	for _, c := range w.clients {
		if c.id != "" && !live[c.id] && !c.orphan && !c.stopped {
			c.owned = nil
		}
	}
}

// check verifies that no two clients own the same partition and that every
// member client owns only partitions its member holds (given or revoking).
func (w *world) check() error {
	w.dropRemoved()
	held := map[string]group.MemberDescription{}
	owner := map[string]string{}
	for _, m := range w.g.Describe(w.now).Members {
		held[m.MemberID] = m
		for _, s := range []group.TopicPartitions{m.Assignment, m.Revoking} {
			for t, ps := range s {
				for _, p := range ps {
					k := fmt.Sprintf("%s:%d", t, p)
					if o, dup := owner[k]; dup {
						return fmt.Errorf("%s held by %s and %s", k, o, m.MemberID)
					}
					owner[k] = m.MemberID
				}
			}
		}
	}
	owners := map[string]string{}
	names := make([]string, 0, len(w.clients))
	for n := range w.clients {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		c := w.clients[n]
		if c.stopped {
			continue // a paused zombie consumes nothing until it learns
		}
		for t, ps := range c.owned {
			for _, p := range ps {
				k := fmt.Sprintf("%s:%d", t, p)
				if o, dup := owners[k]; dup {
					return fmt.Errorf("clients %s and %s both own %s", o, n, k)
				}
				owners[k] = n
				if c.id == "" || c.orphan {
					continue // between memberships (after a failover)
				}
				m := held[c.id]
				if !m.Assignment.Contains(t, p) && !m.Revoking.Contains(t, p) {
					return fmt.Errorf("client %s owns %s, which its member does not hold", n, k)
				}
			}
		}
	}
	return nil
}
