package txn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/dataplane/runtime"
	"github.com/sluicemq/sluice/internal/scenario"
)

// Scenario files (testdata/*.txt) hold blocks: comment lines (#), command
// lines, a "----" line and the expected output up to a blank line. Each file
// runs on a fresh world: a Shard with no log of its own (its records kept
// in a slice: the world replays each one to it once "written", as the
// runtime does after an acks=all append), real logs for the markers, a
// clock, and one simulated producer per name. The world stands for the
// runtime: it writes an operation's records, runs its effects (the
// markers) at once and their follow-ups, keeps the failed ones to run
// again, fires the timers, and allocates producer ids. Regenerate the
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
//	commit NAME [epoch=N] [mode=keep] | abort NAME [epoch=N] [mode=keep]
//	                                 EndTransaction (mode=keep: KeepEpoch, a Kafka client
//	                                 before EndTxn v5); NAME takes the producer id and
//	                                 epoch answered
//	verify NAME T:P[,T:P...] [epoch=N] | lateverify NAME T:P
//	                                 Verify (a Kafka client's write before Produce v12),
//	                                 lateverify with the epoch before NAME's last end
//	markers fail|ok                  marker writes fail from now on, or succeed
//	tick D                           advance the clock
//	expire                           fire the timers due at the clock's time
//	finish                           run again the markers not written
//	failover                         the coordinator's broker crashes: a new shard at the
//	                                 next leader epoch replays the log and resumes (its
//	                                 unfinished ends' markers run at once); the old one's
//	                                 fencing is the runtime's (TestRuntimeEpochChangeDropsShard,
//	                                 TestTxnTakeoverInEachState)
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
	ctx     context.Context
	shard   *Shard
	log     []runtime.Record // the partition's records
	leader  int32            // the shard's leader epoch
	clock   *clock
	markers *markerLogs
	nextPID int64
	effects map[string][]runtime.Effect // by key: the effects not done
	timers  map[string]runtime.Timer
	clients map[string]*sim
	out     strings.Builder
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, ctx: t.Context(), leader: 1, clock: &clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)},
		markers: newMarkerLogs(t), nextPID: 1000, clients: map[string]*sim{}}
	w.load()
	return w
}

func (w *world) config() ShardConfig {
	return ShardConfig{LeaderEpoch: w.leader, IdleTimeout: 24 * time.Hour}
}

// load makes a shard at w.leader from the records written: a takeover.
func (w *world) load() {
	w.shard = NewShard(w.config())
	for off, r := range w.log {
		require.NoError(w.t, w.shard.Replay(int64(off), r))
	}
	w.effects, w.timers = map[string][]runtime.Effect{}, map[string]runtime.Timer{}
	w.schedule(w.shard.Loaded(w.clock.Now()))
}

// commit writes u's records (replaying each), then arms its timers and
// runs its effects' first attempts; it returns their errors.
func (w *world) commit(u runtime.Update) []error {
	for _, r := range u.Records {
		w.log = append(w.log, r)
		require.NoError(w.t, w.shard.Replay(int64(len(w.log)-1), r))
	}
	if u.Written != nil {
		u.Written()
	}
	return w.schedule(u)
}

func (w *world) schedule(u runtime.Update) []error {
	for _, tm := range u.Timers {
		w.timers[tm.Key] = tm
	}
	var errs []error
	for _, e := range u.Effects {
		w.effects[e.Key] = append(w.effects[e.Key], e)
		errs = append(errs, w.attempt(e))
	}
	return errs
}

// attempt runs e once (the markers) and, when written, its follow-up; a
// failed e stays to run again.
func (w *world) attempt(e runtime.Effect) error {
	err := w.markers.WriteMarkers(w.ctx, e.Do.([]Marker))
	if err != nil {
		if e.Fail != nil {
			err = e.Fail(err)
		}
		return err
	}
	runs := w.effects[e.Key]
	for i := range runs {
		if fmt.Sprint(runs[i].Do) == fmt.Sprint(e.Do) {
			w.effects[e.Key] = append(runs[:i:i], runs[i+1:]...)
			break
		}
	}
	if len(w.effects[e.Key]) == 0 {
		delete(w.effects, e.Key)
	}
	if e.Then == nil {
		return nil
	}
	u, err := e.Then(nil, w.clock.Now())
	if err != nil {
		return err
	}
	return errors.Join(w.commit(u)...)
}

// retry runs again every effect of key; the first error.
func (w *world) retry(key string) error {
	for _, e := range slices.Clone(w.effects[key]) {
		if err := w.attempt(e); err != nil {
			return err
		}
	}
	return nil
}

// drive runs an operation of k as the runtime and the Coordinator do: it
// waits for the key's effects when asked (ErrEffectPending), allocates a
// producer id when one is needed, writes the records, answers once its
// effects' first attempts succeeded when it awaits them, and runs again an
// operation answering again.
func drive[R any](w *world, k Key, op func(s *Shard, pid int64, now time.Time) (runtime.Result[R], error)) (R, error) {
	var zero R
	pid := int64(-1)
	for {
		res, err := op(w.shard, pid, w.clock.Now())
		switch {
		case errors.Is(err, runtime.ErrEffectPending) && len(w.effects[opKey(k)]) > 0:
			if err := w.retry(opKey(k)); err != nil {
				return zero, err
			}
			continue
		case errors.Is(err, errNeedProducerID):
			w.nextPID++
			pid = w.nextPID
			continue
		case err != nil:
			return zero, err
		}
		errs := w.commit(res.Update)
		if res.Await {
			if err := errors.Join(errs...); err != nil {
				return zero, err
			}
		}
		if p, ok := any(res.Response).(Producer); ok && p.again {
			continue
		}
		return res.Response, nil
	}
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
			return fmt.Errorf("init NAME TXNID [timeout=D] [expect=PID/EPOCH]")
		}
		var timeout time.Duration
		if v, ok := opts["timeout"]; ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				return err
			}
			timeout = d
		}
		var expect *Producer
		if v, ok := opts["expect"]; ok {
			var e Producer
			if _, err := fmt.Sscanf(v, "%d/%d", &e.ID, &e.Epoch); err != nil {
				return fmt.Errorf("expect=PID/EPOCH: %w", err)
			}
			expect = &e
		}
		k := Key{tenant, pos[1]}
		p, err := drive(w, k, func(s *Shard, pid int64, now time.Time) (runtime.Result[Producer], error) {
			return s.InitProducer(k, timeout, expect, pid, now)
		})
		pid, epoch := p.ID, p.Epoch
		if err == nil {
			w.clients[pos[0]] = &sim{txnID: pos[1], cur: producer{pid, epoch}, prev: producer{-1, -1}}
		}
		w.answer(pos[0], err, fmt.Sprintf("producer %d/%d", pid, epoch))
	case "add", "late", "verify", "lateverify":
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
		if strings.HasPrefix(cmd, "late") {
			p = s.prev
		}
		if p, err = override(p); err != nil {
			return err
		}
		if strings.HasSuffix(cmd, "verify") {
			err = w.shard.Verify(Key{tenant, s.txnID}, p.id, p.epoch, tps, nil)
			w.answer(pos[0], err, fmt.Sprintf("verified %s at %d/%d", fmtTPs(tps), p.id, p.epoch))
			break
		}
		err = w.add(s.txnID, p, tps, nil)
		w.answer(pos[0], err, fmt.Sprintf("added %s at %d/%d", fmtTPs(tps), p.id, p.epoch))
	case "offsets":
		s, err := client()
		if err != nil {
			return err
		}
		if len(pos) != 2 {
			return fmt.Errorf("offsets NAME GROUP")
		}
		err = w.add(s.txnID, s.cur, nil, []string{pos[1]})
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
		mode := BumpEpoch
		switch opts["mode"] {
		case "keep":
			mode = KeepEpoch
		case "", "bump":
		default:
			return fmt.Errorf("%s: mode=keep|bump", cmd)
		}
		k := Key{tenant, s.txnID}
		np, err := drive(w, k, func(sh *Shard, pid int64, now time.Time) (runtime.Result[Producer], error) {
			return sh.EndTransaction(k, p.id, p.epoch, cmd == "commit", mode, pid, now)
		})
		pid, epoch := np.ID, np.Epoch
		if err == nil {
			s.prev, s.cur = p, producer{pid, epoch}
		}
		w.answer(pos[0], err, fmt.Sprintf("%s, next producer %d/%d", map[string]string{"commit": "committed", "abort": "aborted"}[cmd], pid, epoch))
	case "markers":
		switch {
		case len(pos) == 1 && pos[0] == "fail":
			w.markers.setFail(errUnreachable)
		case len(pos) == 1 && pos[0] == "ok":
			w.markers.setFail(nil)
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
		w.clock.advance(d)
	case "expire":
		now := w.clock.Now()
		for _, key := range slices.Sorted(maps.Keys(w.timers)) {
			tm := w.timers[key]
			if tm.At.After(now) {
				continue
			}
			delete(w.timers, key)
			tenantID, id, _ := strings.Cut(key, "\x00")
			before, _ := w.shard.Describe(Key{tenantID, id})
			u, err := tm.Op(now)
			if err != nil {
				w.printf("expire: error: %v", err)
				continue
			}
			if err := errors.Join(w.commit(u)...); err != nil {
				w.printf("expire: error: abort timed-out transaction %q: %v", id, err)
				continue
			}
			if after, _ := w.shard.Describe(Key{tenantID, id}); before.State == StateOngoing && after.EndedBy == EndedByTimeout {
				w.printf("expired: aborted %s", id)
			}
		}
	case "finish":
		before := w.shard.Pending()
		var errs []error
		for _, key := range slices.Sorted(maps.Keys(w.effects)) {
			if err := w.retry(key); err != nil {
				errs = append(errs, err)
			}
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range before {
				if !yield(k.TransactionalID) {
					return
				}
			}
		}) {
			if _, still := w.shard.Pending()[Key{tenant, k}]; !still {
				w.printf("finished %s", k)
			}
		}
		if err := errors.Join(errs...); err != nil {
			w.printf("finish: error (%s): %v", className(ClassOf(err)), err)
		}
	case "failover":
		w.leader++
		w.load()
		w.printf("coordinator at leader epoch %d: %d transactional ids, %d unfinished ends", w.leader, len(w.shard.Transactions()), len(w.shard.Pending()))
	case "state":
		if len(pos) != 1 {
			return fmt.Errorf("state TXNID")
		}
		tx, ok := w.shard.Describe(Key{tenant, pos[0]})
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
		pending := w.shard.Pending()
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
		written := w.markers.written(w.t)
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

// add is AddPartitions / AddOffsets.
func (w *world) add(txnID string, p producer, tps []TopicPartition, groups []string) error {
	k := Key{tenant, txnID}
	_, err := drive(w, k, func(s *Shard, _ int64, now time.Time) (runtime.Result[struct{}], error) {
		return s.Add(k, p.id, p.epoch, tps, groups, now)
	})
	return err
}

func fmtTarget(m Marker) string {
	if m.Group != "" {
		return "group " + m.Group
	}
	return fmt.Sprintf("%s:%d", m.Partition.TopicID, m.Partition.Partition)
}
