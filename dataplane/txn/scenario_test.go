package txn

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/scenario"
)

// Scenario files (testdata/*.txt) hold blocks: comment lines (#), command
// lines, a "----" line and the expected output up to a blank line. Each file
// runs on a fresh world: a coordinator over a real log, real logs for the
// markers, a clock, and one simulated producer per name. Regenerate the
// expected output with
//
//	go test ./dataplane/txn -run TestTxnScenario -rewrite
//
// (or SLUICE_REWRITE=1) and review the diff.
//
// Commands:
//
//	init NAME TXNID [timeout=D]      InitProducer: NAME becomes TXNID's producer
//	add NAME T:P[,T:P...] [pid=N] [epoch=N]
//	                                 AddPartitions, with NAME's producer id and epoch
//	                                 unless given
//	late NAME T:P                    AddPartitions with the epoch of NAME's transaction
//	                                 before its last end (a batch delayed past the end)
//	offsets NAME GROUP               AddOffsets
//	commit NAME [epoch=N] | abort NAME [epoch=N]
//	                                 EndTransaction; NAME takes the producer id and epoch
//	                                 answered
//	markers fail|ok                  marker writes fail from now on, or succeed
//	tick D                           advance the clock
//	expire                           Expire at the clock's time
//	finish                           FinishPending
//	failover                         the coordinator's broker crashes: the log is replicated
//	                                 to a new leader at the next leader epoch, a new
//	                                 coordinator loads it; the old one is asked once more
//	                                 (InitProducer) to show it is fenced
//	state TXNID                      Describe
//	pending                          the markers of unfinished ends
//	written                          the markers in every partition's log, in log order
//
// Markers print as TYPE PRODUCERID/EPOCH cN, N the leader epoch of the
// coordinator that wrote them.
//
// A producer refused with a fatal error stops for good (later commands for
// it still run, to show what the coordinator answers).

func TestTxnScenario(t *testing.T) {
	t.Parallel()
	scenario.Run(t, "testdata/*.txt", func(t *testing.T) scenario.Script {
		w := newWorld(t)
		return scenario.Script{Exec: w.run, Out: &w.out}
	})
}

// sim is a simulated transactional producer.
type sim struct {
	txnID string
	cur   producer // what it uses now
	prev  producer // what it used before its last end
}

type world struct {
	t       *testing.T
	f       *fixture
	leader  int32 // the coordinator's leader epoch
	clients map[string]*sim
	out     strings.Builder
}

func newWorld(t *testing.T) *world {
	f := &fixture{ctx: t.Context(), p: openPartition(t, 1), markers: newMarkerLogs(t),
		clock: &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}, nextPID: &atomic.Int64{}}
	f.nextPID.Store(1000)
	f.c = New(f.p, f.config(1))
	require.NoError(t, f.c.Load(f.ctx))
	return &world{t: t, f: f, leader: 1, clients: map[string]*sim{}}
}

func (w *world) printf(format string, args ...any) { fmt.Fprintf(&w.out, format+"\n", args...) }

func className(c Class) string {
	return [...]string{"other", "retriable", "abortable", "fatal"}[c]
}

func (w *world) answer(name string, err error, ok string) {
	if err != nil {
		w.printf("%s: error (%s): %v", name, className(ClassOf(err)), err)
		return
	}
	w.printf("%s: %s", name, ok)
}

func parseTPs(s string) ([]TopicPartition, error) {
	var out []TopicPartition
	for _, part := range strings.Split(s, ",") {
		topic, p, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(p)
		if !ok || err != nil {
			return nil, fmt.Errorf("partition %q: want TOPIC:N", part)
		}
		out = append(out, TopicPartition{topic, int32(n)})
	}
	return out, nil
}

func fmtTPs(tps []TopicPartition) string {
	if len(tps) == 0 {
		return "-"
	}
	var s []string
	for _, tp := range tps {
		s = append(s, fmt.Sprintf("%s:%d", tp.TopicID, tp.Partition))
	}
	return strings.Join(s, ",")
}

func fmtMarker(commit bool, pid int64, epoch int16, coordinatorEpoch int32) string {
	kind := "abort"
	if commit {
		kind = "commit"
	}
	return fmt.Sprintf("%s %d/%d c%d", kind, pid, epoch, coordinatorEpoch)
}

func (w *world) run(line string) error {
	fields := strings.Fields(line)
	cmd, args := fields[0], fields[1:]
	opts := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			opts[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	ctx := w.f.ctx
	c := w.f.c
	client := func() (*sim, error) {
		if len(pos) == 0 {
			return nil, fmt.Errorf("%s needs a producer name", cmd)
		}
		s := w.clients[pos[0]]
		if s == nil {
			return nil, fmt.Errorf("no producer %q: init it first", pos[0])
		}
		return s, nil
	}
	override := func(p producer) (producer, error) {
		if v, ok := opts["pid"]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return p, err
			}
			p.id = n
		}
		if v, ok := opts["epoch"]; ok {
			n, err := strconv.ParseInt(v, 10, 16)
			if err != nil {
				return p, err
			}
			p.epoch = int16(n)
		}
		return p, nil
	}
	switch cmd {
	case "init":
		if len(pos) != 2 {
			return fmt.Errorf("init NAME TXNID")
		}
		var timeout time.Duration
		if v, ok := opts["timeout"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			timeout = d
		}
		pid, epoch, err := c.InitProducer(ctx, tenant, pos[1], timeout)
		if err == nil {
			w.clients[pos[0]] = &sim{txnID: pos[1], cur: producer{pid, epoch}, prev: producer{-1, -1}}
		}
		w.answer(pos[0], err, fmt.Sprintf("producer %d/%d", pid, epoch))
	case "add", "late":
		s, err := client()
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return fmt.Errorf("%s NAME T:P,...", cmd)
		}
		tps, err := parseTPs(pos[1])
		if err != nil {
			return err
		}
		p := s.cur
		if cmd == "late" {
			p = s.prev
		}
		if p, err = override(p); err != nil {
			return err
		}
		err = c.AddPartitions(ctx, tenant, s.txnID, p.id, p.epoch, tps)
		w.answer(pos[0], err, fmt.Sprintf("added %s at %d/%d", fmtTPs(tps), p.id, p.epoch))
	case "offsets":
		s, err := client()
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return fmt.Errorf("offsets NAME GROUP")
		}
		err = c.AddOffsets(ctx, tenant, s.txnID, s.cur.id, s.cur.epoch, pos[1])
		w.answer(pos[0], err, fmt.Sprintf("added group %s", pos[1]))
	case "commit", "abort":
		s, err := client()
		if err != nil {
			return err
		}
		p, err := override(s.cur)
		if err != nil {
			return err
		}
		pid, epoch, err := c.EndTransaction(ctx, tenant, s.txnID, p.id, p.epoch, cmd == "commit")
		if err == nil {
			s.prev, s.cur = p, producer{pid, epoch}
		}
		w.answer(pos[0], err, fmt.Sprintf("%s, next producer %d/%d", map[string]string{"commit": "committed", "abort": "aborted"}[cmd], pid, epoch))
	case "markers":
		switch {
		case len(pos) == 1 && pos[0] == "fail":
			w.f.markers.setFail(errUnreachable)
		case len(pos) == 1 && pos[0] == "ok":
			w.f.markers.setFail(nil)
		default:
			return fmt.Errorf("markers fail|ok")
		}
	case "tick":
		if len(pos) != 1 {
			return fmt.Errorf("tick D")
		}
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			return err
		}
		w.f.clock.advance(d)
	case "expire":
		aborted, err := c.Expire(ctx, w.f.clock.Now())
		for _, k := range aborted {
			w.printf("expired: aborted %s", k.TransactionalID)
		}
		if err != nil {
			w.printf("expire: error: %v", err)
		}
	case "finish":
		before := c.Pending()
		err := c.FinishPending(ctx)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range before {
				if !yield(k.TransactionalID) {
					return
				}
			}
		}) {
			if _, still := c.Pending()[Key{tenant, k}]; !still {
				w.printf("finished %s", k)
			}
		}
		if err != nil {
			w.printf("finish: error (%s): %v", className(ClassOf(err)), err)
		}
	case "failover":
		old := c
		w.leader++
		p2 := openPartition(w.t, -1)
		p2.replicate(w.t, w.f.p, w.leader)
		w.f.p.resign()
		w.f.p = p2
		w.f.c = New(p2, w.f.config(w.leader))
		if err := w.f.c.Load(ctx); err != nil {
			return err
		}
		w.printf("coordinator at leader epoch %d: %d transactional ids, %d unfinished ends", w.leader, len(w.f.c.Transactions()), len(w.f.c.Pending()))
		_, _, err := old.InitProducer(ctx, tenant, "probe", 0)
		w.printf("old coordinator: error (%s): %v", className(ClassOf(err)), err)
	case "state":
		if len(pos) != 1 {
			return fmt.Errorf("state TXNID")
		}
		tx, ok := c.Describe(tenant, pos[0])
		if !ok {
			w.printf("%s: unknown", pos[0])
			return nil
		}
		line := fmt.Sprintf("%s: %v producer %d/%d partitions=%s", pos[0], tx.State, tx.ProducerID, tx.Epoch, fmtTPs(tx.Partitions))
		if len(tx.Groups) > 0 {
			line += " groups=" + strings.Join(tx.Groups, ",")
		}
		if tx.NextProducerID != 0 {
			line += fmt.Sprintf(" next=%d", tx.NextProducerID)
		}
		if tx.EndedBy != EndedByNone {
			line += fmt.Sprintf(" ended-by=%s (%d/%d)", map[EndedBy]string{EndedByClient: "client", EndedByTimeout: "timeout", EndedByInit: "init"}[tx.EndedBy], tx.LastProducerID, tx.LastEpoch)
		}
		w.printf("%s", line)
	case "pending":
		pending := c.Pending()
		if len(pending) == 0 {
			w.printf("no unfinished ends")
		}
		for _, k := range slices.SortedFunc(func(yield func(Key) bool) {
			for k := range pending {
				if !yield(k) {
					return
				}
			}
		}, func(a, b Key) int { return strings.Compare(a.TransactionalID, b.TransactionalID) }) {
			var ms []string
			for _, m := range pending[k] {
				ms = append(ms, fmtTarget(m)+" "+fmtMarker(m.Commit, m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch))
			}
			w.printf("%s: %s", k.TransactionalID, strings.Join(ms, "; "))
		}
	case "written":
		written := w.f.markers.written(w.t)
		if len(written) == 0 {
			w.printf("no markers")
		}
		keys := slices.SortedFunc(func(yield func(TopicPartition) bool) {
			for k := range written {
				if !yield(k) {
					return
				}
			}
		}, compareTP)
		for _, tp := range keys {
			var ms []string
			for _, m := range written[tp] {
				ms = append(ms, fmtMarker(m.Commit, m.ProducerID, m.ProducerEpoch, m.CoordinatorEpoch))
			}
			name := fmt.Sprintf("%s:%d", tp.TopicID, tp.Partition)
			if g, ok := strings.CutPrefix(tp.TopicID, "offsets:"+tenant+"/"); ok {
				name = "group " + g
			}
			w.printf("%s: %s", name, strings.Join(ms, ", "))
		}
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}

func fmtTarget(m Marker) string {
	if m.Group != "" {
		return "group " + m.Group
	}
	return fmt.Sprintf("%s:%d", m.Partition.TopicID, m.Partition.Partition)
}
