package coordinator

import (
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
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/scenario"
)

// Scenario files (testdata/*.txt) drive the group coordinator's Shard
// without a log: the world keeps the records written in a slice and
// replays each one to the shard once "written", as the runtime does after
// an acks=all append; a failover replays them into a new shard. Every
// group is tenant-a's; a topic's id is its name with "#1" (a topic created
// again gets "#2": recreate). Membership is dataplane/group's and has its
// own scenarios. Regenerate the expected output with
//
//	go test ./dataplane/coordinator -run TestCoordinatorScenario -rewrite
//
// Commands:
//
//	commit GROUP T:P=OFF[,...]            CommitOffsets
//	txn-commit GROUP PID EPOCH T:P=OFF[,...]
//	                                      TxnCommitOffsets of producer PID at EPOCH
//	marker GROUP PID EPOCH COORD commit|abort [kept]
//	                                      WriteTxnMarker (EPOCH: the ended transaction's + 1,
//	                                      or its own with kept: an end that kept the epoch;
//	                                      COORD: the transaction coordinator's leader epoch)
//	delete GROUP                          DeleteGroup
//	recreate TOPIC                        the topic is deleted and created again (a new id)
//	fail-next                             the next write's append fails: nothing is applied
//	offsets GROUP                         StableOffsets of every partition (committed, or
//	                                      refused while a transaction holds one)
//	pending GROUP                         PendingOffsets
//	groups                                GroupsByTenant
//	failover                              a new shard replays the records written
func TestCoordinatorScenario(t *testing.T) {
	t.Parallel()
	scenario.Run(t, "testdata/*.txt", func(t *testing.T) scenario.Script {
		w := &gworld{t: t, shard: NewShard(ShardConfig{}), ids: map[string]int{}, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		return scenario.Script{Exec: w.run, Out: &w.out}
	})
}

type gworld struct {
	t        *testing.T
	shard    *Shard
	log      []runtime.Record
	ids      map[string]int // topic name → its current id's number
	failNext bool
	now      time.Time
	out      strings.Builder
}

func (w *gworld) printf(format string, args ...any) { fmt.Fprintf(&w.out, format+"\n", args...) }

func (w *gworld) topicID(name string) string {
	if w.ids[name] == 0 {
		w.ids[name] = 1
	}
	return fmt.Sprintf("%s#%d", name, w.ids[name])
}

// write "appends" res's records and replays them, unless fail-next.
func (w *gworld) write(what string, res runtime.Result[struct{}], err error) {
	if err == nil && w.failNext {
		w.failNext = false
		err = errors.New("write to offsets partition 0: not enough replicas")
	}
	if err != nil {
		w.printf("%s: error: %v", what, err)
		return
	}
	for _, r := range res.Records {
		w.log = append(w.log, r)
		require.NoError(w.t, w.shard.Replay(int64(len(w.log)-1), r))
	}
	w.printf("%s: ok (%d records)", what, len(res.Records))
}

func (w *gworld) parseOffsets(s string) ([]OffsetCommit, error) {
	var out []OffsetCommit
	for _, part := range strings.Split(s, ",") {
		tp, off, ok := strings.Cut(part, "=")
		topic, p, ok2 := strings.Cut(tp, ":")
		pn, err1 := strconv.Atoi(p)
		on, err2 := strconv.ParseInt(off, 10, 64)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("offset %q: want TOPIC:P=OFFSET", part)
		}
		out = append(out, OffsetCommit{TopicID: w.topicID(topic), Offset: &sluicev1.PartitionOffset{Topic: topic, Partition: int32(pn), Offset: on, LeaderEpoch: -1}})
	}
	return out, nil
}

func fmtCommitted(m map[TopicPartition]Committed) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b TopicPartition) int {
		return strings.Compare(fmt.Sprintf("%s:%05d", a.TopicID, a.Partition), fmt.Sprintf("%s:%05d", b.TopicID, b.Partition))
	})
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s:%d=%d", k.TopicID, k.Partition, m[k].Offset.GetOffset()))
	}
	return strings.Join(s, " ")
}

func (w *gworld) run(line string) error {
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	need := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("usage: %s", usage)
		}
		return nil
	}
	num := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	switch cmd {
	case "commit":
		if err := need(2, "commit GROUP T:P=OFF,..."); err != nil {
			return err
		}
		ocs, err := w.parseOffsets(args[1])
		if err != nil {
			return err
		}
		res, err := w.shard.CommitOffsets(GroupKey{"tenant-a", args[0]}, ocs, w.now)
		w.write("commit "+args[0], res, err)
	case "txn-commit":
		if err := need(4, "txn-commit GROUP PID EPOCH T:P=OFF,..."); err != nil {
			return err
		}
		ocs, err := w.parseOffsets(args[3])
		if err != nil {
			return err
		}
		res, err := w.shard.TxnCommitOffsets(GroupKey{"tenant-a", args[0]}, num(args[1]), int16(num(args[2])), ocs, w.now)
		w.write(fmt.Sprintf("txn-commit %s producer %s/%s", args[0], args[1], args[2]), res, err)
	case "marker":
		kept := len(args) == 6 && args[5] == "kept"
		if kept {
			args = args[:5]
		}
		if err := need(5, "marker GROUP PID EPOCH COORD commit|abort [kept]"); err != nil {
			return err
		}
		res, err := w.shard.WriteTxnMarker(GroupKey{"tenant-a", args[0]}, num(args[1]), int16(num(args[2])), int32(num(args[3])), args[4] == "commit", kept, w.now)
		w.write(fmt.Sprintf("marker %s %s %s/%s c%s", args[0], args[4], args[1], args[2], args[3]), res, err)
	case "delete":
		if err := need(1, "delete GROUP"); err != nil {
			return err
		}
		res, err := w.shard.DeleteGroup(GroupKey{"tenant-a", args[0]})
		w.write("delete "+args[0], res, err)
	case "delete-offsets":
		if err := need(2, "delete-offsets GROUP T:P,..."); err != nil {
			return err
		}
		var parts []OffsetDeletion
		for _, tp := range strings.Split(args[1], ",") {
			topic, p, _ := strings.Cut(tp, ":")
			parts = append(parts, OffsetDeletion{TopicID: w.topicID(topic), Topic: topic, Partition: int32(num(p))})
		}
		none := func(string, [][]byte) ([]string, bool) { return nil, false }
		res, err := w.shard.DeleteOffsets(GroupKey{"tenant-a", args[0]}, parts, none, w.now)
		w.write("delete-offsets "+args[0], runtime.Result[struct{}]{Update: res.Update}, err)
	case "recreate":
		if err := need(1, "recreate TOPIC"); err != nil {
			return err
		}
		w.ids[args[0]] = max(w.ids[args[0]], 1) + 1
	case "fail-next":
		w.failNext = true
	case "offsets":
		if err := need(1, "offsets GROUP"); err != nil {
			return err
		}
		m, err := w.shard.StableOffsets(GroupKey{"tenant-a", args[0]}, nil)
		if err != nil {
			w.printf("%s: unstable: %v", args[0], err)
			return nil
		}
		w.printf("%s: %s", args[0], fmtCommitted(m))
	case "pending":
		if err := need(1, "pending GROUP"); err != nil {
			return err
		}
		p := w.shard.PendingOffsets(GroupKey{"tenant-a", args[0]})
		if len(p) == 0 {
			w.printf("%s: nothing pending", args[0])
		}
		for _, pid := range slices.Sorted(maps.Keys(p)) {
			w.printf("%s: producer %d: %s", args[0], pid, fmtCommitted(p[pid]))
		}
	case "groups":
		w.printf("groups: %v", w.shard.GroupsByTenant())
	case "failover":
		w.shard = NewShard(ShardConfig{})
		for off, r := range w.log {
			require.NoError(w.t, w.shard.Replay(int64(off), r))
		}
		w.printf("new shard: %d records replayed", len(w.log))
	default:
		return fmt.Errorf("unknown command %q", cmd)
	}
	return nil
}
