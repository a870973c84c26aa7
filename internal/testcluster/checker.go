package testcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sluicemq/sluice/internal/testenv"
)

// Report is what Check found.
type Report struct {
	// Anomalies by kind: lost, duplicate, inconsistent-offset, unexpected,
	// failed-present, gap, epoch-order, poll-diverged, poll-order. Each kind
	// keeps its first 20 examples; Counts has the totals.
	Anomalies map[string][]string
	Counts    map[string]int
	// Stats of the history.
	Requests, AckedRecords, FailedRecords, IndefiniteRecords int
	// IndefinitePresent is how many indefinite records ended up in the log.
	IndefinitePresent int
	// Polled is how many records the consumers read.
	Polled int
}

// OK reports whether no anomaly was found.
func (r *Report) OK() bool { return len(r.Counts) == 0 }

func (r *Report) add(kind, format string, args ...any) {
	if r.Anomalies == nil {
		r.Anomalies, r.Counts = map[string][]string{}, map[string]int{}
	}
	r.Counts[kind]++
	if len(r.Anomalies[kind]) < 20 {
		r.Anomalies[kind] = append(r.Anomalies[kind], fmt.Sprintf(format, args...))
	}
}

// String summarises the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests: %d records acked, %d failed, %d indefinite (%d of them in the log); %d polled",
		r.Requests, r.AckedRecords, r.FailedRecords, r.IndefiniteRecords, r.IndefinitePresent, r.Polled)
	kinds := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n%s: %d", k, r.Counts[k])
		for _, ex := range r.Anomalies[k] {
			fmt.Fprintf(&b, "\n  %s", ex)
		}
	}
	return b.String()
}

// Check compares a history with the final contents of every partition
// (read from offset 0 to the HW after the cluster quiesced) and reports:
//
//   - lost: an acknowledged record is not in the log;
//   - inconsistent-offset: an acknowledged record is at another offset
//     than acknowledged, or two acknowledgements share an offset;
//   - duplicate: a value at two offsets;
//   - unexpected: a value nobody sent;
//   - failed-present: a definitely refused record is in the log;
//   - gap: the final log does not hold every offset from 0 in order;
//   - epoch-order: leader epochs go down along the log;
//   - poll-diverged: a consumer read a record that the final log does not
//     hold at that offset (it read above the committed log, or the log
//     changed under it);
//   - poll-order: a consumer skipped or re-read offsets.
func Check(ops []Op, polls []Poll, final map[int32][]Record) *Report {
	r := &Report{}
	type pos struct {
		partition int32
		offset    int64
	}
	at := map[pos]string{}      // final log: offset → value
	where := map[string][]pos{} // final log: value → offsets
	sent := map[string]*Op{}    // value → the request that carried it
	ackedAt := map[pos]string{} // offsets acknowledged so far → value
	for p, recs := range final {
		var prevEpoch int32 = -1
		for i, rec := range recs {
			if rec.Offset != int64(i) {
				r.add("gap", "partition %d: record %d of the final log is at offset %d", p, i, rec.Offset)
			}
			if rec.LeaderEpoch < prevEpoch {
				r.add("epoch-order", "partition %d offset %d: leader epoch %d after %d", p, rec.Offset, rec.LeaderEpoch, prevEpoch)
			}
			prevEpoch = rec.LeaderEpoch
			k := pos{p, rec.Offset}
			at[k] = rec.Value
			where[rec.Value] = append(where[rec.Value], k)
		}
	}
	for i := range ops {
		op := &ops[i]
		r.Requests++
		for _, v := range op.Values {
			sent[v] = op
		}
		switch op.Outcome {
		case Acked:
			r.AckedRecords += len(op.Values)
		case Failed:
			r.FailedRecords += len(op.Values)
		case Indefinite:
			r.IndefiniteRecords += len(op.Values)
		}
	}
	for v, ps := range where {
		if len(ps) > 1 {
			r.add("duplicate", "%q at %v", v, ps)
		}
		op, ok := sent[v]
		switch {
		case !ok:
			r.add("unexpected", "%q at %v was never sent", v, ps)
		case op.Outcome == Failed:
			r.add("failed-present", "%q at %v was refused (%s: %s)", v, ps, op.Code, op.Err)
		case op.Outcome == Indefinite:
			r.IndefinitePresent++
		}
	}
	for i := range ops {
		op := &ops[i]
		if op.Outcome != Acked {
			continue
		}
		for j, v := range op.Values {
			k := pos{op.Partition, op.Offset + int64(j)}
			if prev, dup := ackedAt[k]; dup {
				r.add("inconsistent-offset", "partition %d offset %d acknowledged for %q and %q", k.partition, k.offset, prev, v)
			}
			ackedAt[k] = v
			got, ok := at[k]
			switch {
			case ok && got == v:
			case len(where[v]) > 0:
				r.add("inconsistent-offset", "%q acknowledged at partition %d offset %d by broker %d is at %v (that offset holds %q)", v, k.partition, k.offset, op.Broker, where[v], got)
			default:
				r.add("lost", "%q acknowledged at partition %d offset %d by broker %d at %s is not in the log (that offset holds %q)",
					v, k.partition, k.offset, op.Broker, op.End.Format("15:04:05.000"), got)
			}
		}
	}
	next := map[int]int64{} // consumer → the offset it should read next
	for _, pl := range polls {
		r.Polled++
		k := pos{pl.Partition, pl.Offset}
		if got, ok := at[k]; !ok || got != pl.Value {
			r.add("poll-diverged", "consumer %d read %q at partition %d offset %d (HW %d); the final log holds %q there", pl.Consumer, pl.Value, pl.Partition, pl.Offset, pl.HW, got)
		}
		if want := next[pl.Consumer]; pl.Offset != want {
			r.add("poll-order", "consumer %d read partition %d offset %d, expected %d", pl.Consumer, pl.Partition, pl.Offset, want)
		}
		next[pl.Consumer] = pl.Offset + 1
	}
	return r
}

// ReadFinal reads every partition in partitions from 0 to its HW.
func ReadFinal(t testing.TB, cl *Client, partitions []int32) map[int32][]Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[int32][]Record{}
	for _, p := range partitions {
		recs, err := cl.ReadAll(ctx, p)
		if err != nil {
			t.Fatalf("read partition %d: %v", p, err)
		}
		out[p] = recs
	}
	return out
}

// WaitQuiesced waits until every partition has a leader and its ISR holds
// every replica, in the newest metadata.
func WaitQuiesced(t testing.TB, cl *Client, partitions []int32, timeout time.Duration) {
	t.Helper()
	testenv.Wait(t, timeout, "partitions fully in sync", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		md := cl.NewestMetadata(ctx)
		for _, p := range partitions {
			info, ok := md[p]
			if !ok {
				return fmt.Errorf("no metadata for partition %d", p)
			}
			if info.Leader < 0 || len(info.ISR) != len(info.Replicas) {
				return fmt.Errorf("partition %d: leader %d epoch %d isr %v replicas %v", p, info.Leader, info.LeaderEpoch, info.ISR, info.Replicas)
			}
		}
		return nil
	})
}

// WaitReplicasIdentical waits until, for each partition, the segment files
// (*.log) of every replica are byte-identical, and fails the test with the
// first difference when they do not become so within timeout.
func WaitReplicasIdentical(t testing.TB, cl *Client, partitions []int32, timeout time.Duration) {
	t.Helper()
	testenv.Wait(t, timeout, "replicas byte-identical", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		md := cl.NewestMetadata(ctx)
		for _, p := range partitions {
			info, ok := md[p]
			if !ok {
				return fmt.Errorf("no metadata for partition %d", p)
			}
			if err := replicasIdentical(cl, p, info.Replicas); err != nil {
				return err
			}
		}
		return nil
	})
}

type logFile struct {
	name string
	data []byte
}

func readLogs(dir string) ([]logFile, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]logFile, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, logFile{filepath.Base(n), b})
	}
	return out, nil
}

func replicasIdentical(cl *Client, partition int32, replicas []int32) error {
	var first []logFile
	var firstID int32
	for i, id := range replicas {
		dir := cl.c.PartitionDir(id, cl.TenantID, cl.TopicID, partition)
		logs, err := readLogs(dir)
		if err != nil {
			return err
		}
		if len(logs) == 0 {
			return fmt.Errorf("partition %d: broker %d has no segment in %s", partition, id, dir)
		}
		if i == 0 {
			first, firstID = logs, id
			continue
		}
		if err := diffLogs(first, logs); err != nil {
			return fmt.Errorf("partition %d: brokers %d and %d differ: %w", partition, firstID, id, err)
		}
	}
	return nil
}

func diffLogs(a, b []logFile) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d segments vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i].name != b[i].name {
			return fmt.Errorf("segment %s vs %s", a[i].name, b[i].name)
		}
		if !bytes.Equal(a[i].data, b[i].data) {
			n := min(len(a[i].data), len(b[i].data))
			at := n
			for j := range n {
				if a[i].data[j] != b[i].data[j] {
					at = j
					break
				}
			}
			return fmt.Errorf("segment %s: %d vs %d bytes, first difference at byte %d", a[i].name, len(a[i].data), len(b[i].data), at)
		}
	}
	return nil
}
