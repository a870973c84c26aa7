package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// groupFlags are the flags of `sluice consume --group`.
type groupFlags struct {
	name           string
	commit         string
	commitInterval time.Duration
	commitEvery    int
	delivery       string
	instanceID     string
	assignor       string
}

// groupOnlyFlags mean nothing without --group.
var groupOnlyFlags = []string{"commit", "commit-interval", "commit-every", "delivery", "instance-id", "assignor"}

func (g *groupFlags) register(f *pflag.FlagSet) {
	f.StringVar(&g.name, "group", "", "consume as a member of consumer group `G`: the group assigns the partitions and commits offsets")
	f.StringVar(&g.commit, "commit", "interval", "with --group, when to commit offsets: interval, each, every or manual (only when consume stops)")
	f.DurationVar(&g.commitInterval, "commit-interval", 5*time.Second, "with --commit interval, how often to commit")
	f.IntVar(&g.commitEvery, "commit-every", 100, "with --commit every, commit after every `N` records")
	f.StringVar(&g.delivery, "delivery", "at-least-once", "with --group: at-least-once (commit after printing) or at-most-once (commit before printing)")
	f.StringVar(&g.instanceID, "instance-id", "", "with --group, a stable member `ID` (static membership): stopped or killed, it keeps its partitions for the group session timeout, unread, so that a restart with the same ID resumes them without a rebalance (a process still running with the ID is fenced and exits)")
	f.StringVar(&g.assignor, "assignor", "", "with --group, the assignor when this member creates the group: uniform (sticky; the server's default) or range")
}

// groupSettings are the SDK options --group and its flags map to.
type groupSettings struct {
	commit     client.CommitMode
	delivery   client.Delivery
	start      client.Offset
	instanceID string
	assignor   string
}

func (s groupSettings) options() []client.GroupOption {
	opts := []client.GroupOption{client.WithCommitMode(s.commit), client.WithDelivery(s.delivery), client.WithStartOffset(s.start)}
	if s.instanceID != "" {
		opts = append(opts, client.WithInstanceID(s.instanceID))
	}
	if s.assignor != "" {
		opts = append(opts, client.WithAssignor(s.assignor))
	}
	return opts
}

// parse checks the group flags against the others (changed says which
// were given) and maps them to SDK options. Without --group it only checks
// that no group flag was given.
func (g groupFlags) parse(changed func(string) bool, offset string) (groupSettings, error) {
	var s groupSettings
	if !changed("group") {
		for _, f := range groupOnlyFlags {
			if changed(f) {
				return s, usageError{fmt.Errorf("--%s applies only with --group", f)}
			}
		}
		return s, nil
	}
	if g.name == "" {
		return s, usageError{errors.New("--group: the group name must not be empty")}
	}
	if changed("partition") {
		return s, usageError{errors.New("--partition does not apply with --group: the group assigns the partitions")}
	}
	switch offset {
	case "earliest":
		s.start = client.Earliest()
	case "latest":
		s.start = client.Latest()
	default:
		return s, usageError{fmt.Errorf("--offset %q with --group: want earliest or latest (where partitions without a committed offset start); to move the group's offsets use sluice group reset-offsets", offset)}
	}
	switch g.commit {
	case "interval":
		if g.commitInterval <= 0 {
			return s, usageError{fmt.Errorf("--commit-interval must be positive; got %s", g.commitInterval)}
		}
		s.commit = client.CommitInterval(g.commitInterval)
	case "each":
		s.commit = client.CommitEach()
	case "every":
		if g.commitEvery < 1 {
			return s, usageError{fmt.Errorf("--commit-every must be at least 1; got %d", g.commitEvery)}
		}
		s.commit = client.CommitEvery(g.commitEvery)
	case "manual":
		s.commit = client.CommitManual()
	default:
		return s, usageError{fmt.Errorf("--commit %q: choose interval, each, every or manual", g.commit)}
	}
	if changed("commit-interval") && g.commit != "interval" {
		return s, usageError{fmt.Errorf("--commit-interval applies only with --commit interval; got --commit %s", g.commit)}
	}
	if changed("commit-every") && g.commit != "every" {
		return s, usageError{fmt.Errorf("--commit-every applies only with --commit every; got --commit %s", g.commit)}
	}
	switch g.delivery {
	case "at-least-once":
		s.delivery = client.AtLeastOnce
	case "at-most-once":
		s.delivery = client.AtMostOnce
		if g.commit == "manual" {
			// The SDK commits at-most-once positions only through the
			// mode; committing just at the end would replay everything
			// after a crash, which is not at-most-once.
			return s, usageError{errors.New("--commit manual commits only when consume stops, which cannot be at-most-once: choose another --commit, or --delivery at-least-once")}
		}
	default:
		return s, usageError{fmt.Errorf("--delivery %q: choose at-least-once or at-most-once", g.delivery)}
	}
	switch g.assignor {
	case "", "uniform", "range":
		s.assignor = g.assignor
	default:
		return s, usageError{fmt.Errorf("--assignor %q: choose uniform or range", g.assignor)}
	}
	s.instanceID = g.instanceID
	return s, nil
}

// errCountReached stops Run once -n records were printed.
var errCountReached = errors.New("count reached")

// consumeGroup consumes topic as a member of o.group.name until -n
// records, the --timeout or ctx ends, then commits and leaves the group.
// Each record is flushed to stdout before the SDK counts it as processed
// (and may commit its offset), so a kill loses no committed record from
// the output.
func (a *app) consumeGroup(ctx context.Context, topic string, o consumeOptions, s groupSettings, parts []formatPart) error {
	c, err := a.sdkClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	out := bufio.NewWriter(a.stdout)
	prog := startProgress(a.stderr, "consumed", isTerminal(a.stderr) && !isTerminal(a.stdout))
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	consumed := 0
	err = a.runGroup(ctx, c, topic, o, s, prog, func(r *client.Record) error {
		if a.output == "json" {
			if err := enc.Encode(toJSONRecord(r)); err != nil {
				return err
			}
		} else {
			writeFormatted(out, parts, r)
		}
		if err := out.Flush(); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
		consumed++
		prog.count.Add(1)
		return nil
	})
	prog.stop()
	fmt.Fprintf(a.stderr, "consumed %s\n", plural(consumed, "record"))
	return err
}

// runGroup joins the group and hands each record to emit until -n
// records, the --timeout or ctx ends (a clean stop: nil), then closes the
// member (commit and leave).
func (a *app) runGroup(ctx context.Context, c *client.Client, topic string, o consumeOptions, s groupSettings, prog *progress, emit func(*client.Record) error) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	opts := append(s.options(), client.WithConsumerOptions(client.WithIsolation(o.iso)))
	if isTerminal(a.stderr) {
		opts = append(opts,
			client.WithOnAssigned(func(tps []client.TopicPartition) { prog.printf("assigned %s\n", fmtTopicPartitions(tps)) }),
			client.WithOnRevoked(func(tps []client.TopicPartition) { prog.printf("revoked %s\n", fmtTopicPartitions(tps)) }))
	}
	g, err := c.NewGroupConsumer(runCtx, o.group.name, []string{topic}, opts...)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while joining
		}
		return sdkError{err}
	}
	// --timeout: no record for that long ends the run (from the join on).
	var idle *time.Timer
	if o.timeout > 0 {
		idle = time.AfterFunc(o.timeout, stop)
		defer idle.Stop()
	}
	emitted := 0
	err = g.Run(runCtx, func(ctx context.Context, r *client.Record) error {
		if ctx.Err() != nil {
			return ctx.Err() // stopping: leave the rest of the batch unprocessed
		}
		if idle != nil {
			idle.Reset(o.timeout)
		}
		if err := emit(r); err != nil {
			return err
		}
		if emitted++; o.count > 0 && emitted == o.count {
			g.MarkProcessed(r) // Run does not mark the record whose fn fails
			return errCountReached
		}
		return nil
	})
	if errors.Is(err, errCountReached) {
		err = nil
	} else if err != nil {
		err = sdkError{err}
	}
	// Commit what was printed and leave, even after Ctrl-C.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if cerr := g.Close(cctx); cerr != nil && err == nil {
		err = fmt.Errorf("commit offsets and leave group %q: %w", o.group.name, sdkError{cerr})
	}
	return err
}

func fmtTopicPartitions(tps []client.TopicPartition) string {
	var b strings.Builder
	for i, tp := range tps {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%d", tp.Topic, tp.Partition)
	}
	return b.String()
}

// fmtAssignment writes partitions as "orders:0,1 audit:3", or "-".
func fmtAssignment(tps []*sluicev1.TopicPartitions) string {
	var parts []string
	for _, tp := range tps {
		if len(tp.GetPartitions()) > 0 {
			parts = append(parts, tp.GetTopic()+":"+fmtInts(tp.GetPartitions()))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// resetTarget is where --to moves the committed offsets.
type resetTarget struct {
	spec        sluicev1.OffsetSpec
	timestampMs int64
	offset      int64
}

// parseResetTo reads --to: earliest, latest, @TIME (RFC 3339 or Unix
// milliseconds) or an offset.
func parseResetTo(s string) (resetTarget, error) {
	switch s {
	case "earliest":
		return resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_EARLIEST}, nil
	case "latest":
		return resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_LATEST}, nil
	case "":
		return resetTarget{}, usageError{errors.New("--to is required: earliest, latest, @TIME or an offset")}
	}
	if ts, ok := strings.CutPrefix(s, "@"); ok {
		ms, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			t, terr := time.Parse(time.RFC3339Nano, ts)
			if terr != nil {
				return resetTarget{}, usageError{fmt.Errorf("--to %q: after @ give an RFC 3339 time (2006-01-02T15:04:05Z) or Unix milliseconds", s)}
			}
			ms = t.UnixMilli()
		}
		return resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_TIMESTAMP, timestampMs: ms}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return resetTarget{}, usageError{fmt.Errorf("--to %q: want earliest, latest, @TIME or an offset (0 or more)", s)}
	}
	return resetTarget{spec: sluicev1.OffsetSpec_OFFSET_SPEC_UNSPECIFIED, offset: n}, nil
}

// groupAdmin returns a GroupService client (any broker forwards to the
// group's coordinator) and a function that releases it.
func (a *app) groupAdmin(ctx context.Context) (sluicev1connect.GroupServiceClient, func(), error) {
	c, err := a.sdkClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	gs, err := c.GroupAdmin()
	if err != nil {
		c.Close()
		return nil, nil, sdkError{err}
	}
	return gs, func() { c.Close() }, nil
}

func groupArg(args []string) (string, error) {
	if args[0] == "" {
		return "", usageError{errors.New("group name must not be empty")}
	}
	return args[0], nil
}

func fmtOffset(n int64) string {
	if n < 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// lagRows are describe's and lag's partition table and the total lag in
// records and the largest lag in seconds.
func lagRows(ps []*sluicev1.PartitionLag) (rows [][]string, total int64, maxSeconds float64, unknown bool) {
	for _, p := range ps {
		lag, secs := "-", "-"
		if p.GetLag() >= 0 && p.GetHighWatermark() >= 0 {
			lag, secs = strconv.FormatInt(p.GetLag(), 10), strconv.FormatFloat(p.GetLagSeconds(), 'f', 1, 64)
			total += p.GetLag()
			maxSeconds = max(maxSeconds, p.GetLagSeconds())
		} else {
			unknown = true
		}
		member := p.GetMemberId()
		if member == "" {
			member = "-"
		}
		rows = append(rows, []string{p.GetTopic(), strconv.Itoa(int(p.GetPartition())), fmtOffset(p.GetCommittedOffset()), fmtOffset(p.GetHighWatermark()), lag, secs, member})
	}
	return rows, total, maxSeconds, unknown
}

var lagHeader = []string{"TOPIC", "PARTITION", "COMMITTED", "HW", "LAG", "LAG-SECONDS", "MEMBER"}

func (a *app) describeGroup(ctx context.Context, group string) (*sluicev1.DescribeGroupResponse, error) {
	gs, done, err := a.groupAdmin(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := gs.DescribeGroup(ctx, connect.NewRequest(&sluicev1.DescribeGroupRequest{Group: group}))
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

func (a *app) groupCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, describe, reset and delete consumer groups",
		Long: `A consumer group shares the partitions of its topics among its members
(sluice consume TOPIC --group G, or the SDK's group consumer) and keeps one
committed offset per partition: the next record the group will read.

A group exists while it has members or committed offsets. Its lag is, per
partition, the records between the committed offset and the high watermark
(HW), and the age in seconds of the oldest of them.

Exit codes: 0 ok, 1 error (a refusal because the group has members, for
one), 2 usage, 3 unauthenticated or not allowed, 4 the group or topic does
not exist.`,
	}

	list := &cobra.Command{
		Use:   "list",
		Short: "List the consumer groups: state and number of members",
		Long: `list shows each group with members or committed offsets and its state:
empty (no members), assigning, reconciling (partitions are moving between
members) or stable.`,
		Example: "  sluice group list\n  sluice group list -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			gs, done, err := a.groupAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := gs.ListGroups(cmd.Context(), connect.NewRequest(&sluicev1.ListGroupsRequest{}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			var rows [][]string
			for _, g := range res.Msg.GetGroups() {
				rows = append(rows, []string{g.GetGroup(), g.GetState(), strconv.Itoa(int(g.GetMembers()))})
			}
			return table(a.stdout, []string{"GROUP", "STATE", "MEMBERS"}, rows)
		},
	}

	describe := &cobra.Command{
		Use:   "describe GROUP",
		Short: "Show a group's members, their partitions, and the lag per partition",
		Long: `describe shows GROUP's state, its members with the partitions each
consumes (ASSIGNED), will get once another member gives them up (PENDING)
and is giving up (REVOKING), then per partition of the group's topics: the
committed offset (- when none), the high watermark, the lag in records and
in seconds, and the member consuming it.

-o json prints the whole response; 64-bit numbers are strings there.`,
		Example: "  sluice group describe billing\n  sluice group describe billing -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := groupArg(args)
			if err != nil {
				return err
			}
			d, err := a.describeGroup(cmd.Context(), group)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, d)
			}
			assignor := d.GetAssignor()
			if assignor == "" {
				assignor = "-"
			}
			if err := kv(a.stdout, "group", d.GetGroup(), "state", d.GetState(), "epoch", strconv.Itoa(int(d.GetGroupEpoch())),
				"assignor", assignor, "rebalances", strconv.FormatInt(d.GetRebalances(), 10), "members", strconv.Itoa(len(d.GetMembers()))); err != nil {
				return err
			}
			if len(d.GetMembers()) > 0 {
				fmt.Fprintln(a.stdout)
				var rows [][]string
				for _, m := range d.GetMembers() {
					inst := m.GetInstanceId()
					if inst == "" {
						inst = "-"
					}
					rows = append(rows, []string{m.GetMemberId(), inst, strconv.Itoa(int(m.GetMemberEpoch())), strings.Join(m.GetSubscribedTopics(), ","),
						fmtAssignment(m.GetAssignment()), fmtAssignment(m.GetPending()), fmtAssignment(m.GetRevoking())})
				}
				if err := table(a.stdout, []string{"MEMBER", "INSTANCE", "EPOCH", "TOPICS", "ASSIGNED", "PENDING", "REVOKING"}, rows); err != nil {
					return err
				}
			}
			if len(d.GetPartitions()) == 0 {
				return nil
			}
			fmt.Fprintln(a.stdout)
			rows, _, _, _ := lagRows(d.GetPartitions())
			return table(a.stdout, lagHeader, rows)
		},
	}

	lag := &cobra.Command{
		Use:   "lag GROUP",
		Short: "Show a group's lag per partition and in total",
		Long: `lag shows, per partition of GROUP's topics, the committed offset (- when
none), the high watermark, the lag in records and in seconds (the age of
the oldest record not yet consumed) and the member consuming it; then the
total lag in records and the largest in seconds. A partition whose leader
did not answer shows - and is left out of the total.

-o json prints the same as sluice group describe -o json.`,
		Example: "  sluice group lag billing\n  watch -n 5 sluice group lag billing",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := groupArg(args)
			if err != nil {
				return err
			}
			d, err := a.describeGroup(cmd.Context(), group)
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, d)
			}
			rows, total, maxSecs, unknown := lagRows(d.GetPartitions())
			if err := table(a.stdout, lagHeader, rows); err != nil {
				return err
			}
			note := ""
			if unknown {
				note = " (some partitions unknown)"
			}
			_, err = fmt.Fprintf(a.stdout, "total lag: %s, %.1f seconds%s\n", plural(total, "record"), maxSecs, note)
			return err
		},
	}

	var (
		resetTopic      string
		resetPartitions []int32
		resetTo         string
		resetForce      bool
	)
	reset := &cobra.Command{
		Use:   "reset-offsets GROUP --topic TOPIC --to earliest|latest|@TIME|OFFSET",
		Short: "Move a group's committed offsets on a topic",
		Long: `reset-offsets sets GROUP's committed offsets for TOPIC's partitions (all of
them unless --partition names some), so the group's members next read from
there:
  earliest   the oldest record still kept (read everything again)
  latest     the high watermark (skip everything written so far)
  @TIME      the first record at or after TIME, in RFC 3339
             (@2025-01-31T12:00:00Z) or Unix milliseconds; the high
             watermark when there is none
  OFFSET     that offset, clamped to the partition's range
It creates the group when it does not exist. It prints the new offsets.

It is refused (exit 1) while the group has members: stop them first, or
give --force. Forced, members keep consuming from their own positions, and
may commit over the reset, until their partitions move to another member.`,
		Example: `  sluice group reset-offsets billing --topic orders --to earliest
  sluice group reset-offsets billing --topic orders --partition 0,3 --to 1500
  sluice group reset-offsets billing --topic orders --to @2025-01-31T12:00:00Z
  sluice group reset-offsets billing --topic orders --to latest --force`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := groupArg(args)
			if err != nil {
				return err
			}
			if err := topicPartitionFlags(resetTopic, resetPartitions); err != nil {
				return err
			}
			to, err := parseResetTo(resetTo)
			if err != nil {
				return err
			}
			gs, done, err := a.groupAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := gs.ResetOffsets(cmd.Context(), connect.NewRequest(&sluicev1.ResetOffsetsRequest{
				Group: group, Topic: resetTopic, Partitions: resetPartitions, Spec: to.spec,
				TimestampMs: to.timestampMs, Offset: to.offset, Force: resetForce,
			}))
			if err != nil {
				if client.ErrorDetailReason(err) == sluicev1.GroupError_REASON_GROUP_ACTIVE {
					return fmt.Errorf("%w; to reset anyway, add --force", err)
				}
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			var rows [][]string
			for _, o := range res.Msg.GetOffsets() {
				rows = append(rows, []string{o.GetTopic(), strconv.Itoa(int(o.GetPartition())), strconv.FormatInt(o.GetOffset(), 10)})
			}
			return table(a.stdout, []string{"TOPIC", "PARTITION", "OFFSET"}, rows)
		},
	}
	rf := reset.Flags()
	rf.StringVar(&resetTopic, "topic", "", "the topic whose committed offsets move (required)")
	rf.Int32SliceVar(&resetPartitions, "partition", nil, "only partition `N` (repeatable or comma-separated; default: every partition)")
	rf.Lookup("partition").DefValue = ""
	rf.StringVar(&resetTo, "to", "", "where to: earliest, latest, @TIME (RFC 3339 or Unix ms) or an offset (required)")
	rf.BoolVar(&resetForce, "force", false, "reset even while the group has members")
	_ = reset.MarkFlagRequired("topic")
	_ = reset.MarkFlagRequired("to")

	del := &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a group and its committed offsets",
		Long: `delete forgets GROUP and its committed offsets; consuming with the group
again starts over (at --offset). It is refused (exit 1) while the group
has members: stop them first.`,
		Example: "  sluice group delete billing",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := groupArg(args)
			if err != nil {
				return err
			}
			gs, done, err := a.groupAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := gs.DeleteGroup(cmd.Context(), connect.NewRequest(&sluicev1.DeleteGroupRequest{Group: group}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			_, err = fmt.Fprintf(a.stdout, "deleted group %s\n", group)
			return err
		},
	}
	var (
		delOffTopic      string
		delOffPartitions []int32
	)
	delOffsets := &cobra.Command{
		Use:   "delete-offsets GROUP --topic TOPIC",
		Short: "Delete a group's committed offsets on a topic it no longer consumes",
		Long: `delete-offsets deletes GROUP's committed offsets for TOPIC's partitions (all
of them unless --partition names some): for a topic the group stopped
consuming, whose lag would otherwise grow for ever (and keep its lag alerts
firing). Consuming the topic with the group again starts over (at
--offset). A partition without a committed offset is no error.

It is refused (exit 1) while a member of the group subscribes to the topic,
as Kafka's OffsetDelete is (kafka-consumer-groups --delete-offsets).`,
		Example: `  sluice group delete-offsets billing --topic old-orders
  sluice group delete-offsets billing --topic old-orders --partition 0,3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			group, err := groupArg(args)
			if err != nil {
				return err
			}
			if err := topicPartitionFlags(delOffTopic, delOffPartitions); err != nil {
				return err
			}
			gs, done, err := a.groupAdmin(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			res, err := gs.DeleteOffsets(cmd.Context(), connect.NewRequest(&sluicev1.DeleteOffsetsRequest{
				Group: group, Topic: delOffTopic, Partitions: delOffPartitions,
			}))
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.stdout, res.Msg)
			}
			_, err = fmt.Fprintf(a.stdout, "deleted group %s's offsets on topic %s\n", group, delOffTopic)
			return err
		},
	}
	df := delOffsets.Flags()
	df.StringVar(&delOffTopic, "topic", "", "the topic whose committed offsets go (required)")
	df.Int32SliceVar(&delOffPartitions, "partition", nil, "only partition `N` (repeatable or comma-separated; default: every partition)")
	df.Lookup("partition").DefValue = ""
	_ = delOffsets.MarkFlagRequired("topic")

	cmd.AddCommand(list, describe, lag, reset, delOffsets, del)
	return cmd
}

// topicPartitionFlags checks the --topic and --partition flags of the
// group commands that change a topic's offsets (reset-offsets,
// delete-offsets).
func topicPartitionFlags(topic string, partitions []int32) error {
	if topic == "" {
		return usageError{errors.New("--topic must not be empty")}
	}
	for _, p := range partitions {
		if p < 0 {
			return usageError{fmt.Errorf("--partition must not be negative; got %d", p)}
		}
	}
	return nil
}
