package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/internal/bench"
)

// benchOptions are the flags of `sluice bench`.
type benchOptions struct {
	rate         string
	steps        string
	duration     time.Duration
	stepDuration time.Duration
	warmup       time.Duration
	recordSize   string
	topic        string
	partitions   int32
	rf           int32
	keep         bool
	producers    int
	acks         string
	idempotence  bool
	compression  string
	linger       time.Duration
	batchSize    string
	maxInFlight  int
	endToEnd     bool
	quiet        bool
}

// benchSpec is a validated bench invocation.
type benchSpec struct {
	cfg        bench.Config
	topic      string // "": a new throwaway topic
	partitions int32
	rf         int32
	rfGiven    bool // --replication-factor was set: no fallback to fewer replicas
	partsGiven bool
	keep       bool
	producers  int
	acks       client.Acks
	opts       []client.ProducerOption
	quiet      bool
}

// spec validates the flags; every error is a usage error. fs says which
// flags were set explicitly.
func (o *benchOptions) spec(fs *pflag.FlagSet) (benchSpec, error) {
	s := benchSpec{
		topic: o.topic, partitions: o.partitions, rf: o.rf, keep: o.keep, producers: o.producers, quiet: o.quiet,
		rfGiven: fs.Changed("replication-factor"), partsGiven: fs.Changed("partitions"),
	}
	usage := func(format string, args ...any) (benchSpec, error) {
		return s, usageError{fmt.Errorf(format, args...)}
	}
	size, err := bench.ParseSize(o.recordSize)
	if err != nil {
		return usage("--record-size: %w", err)
	}
	s.cfg = bench.Config{Warmup: o.warmup, RecordSize: size, EndToEnd: o.endToEnd}
	switch {
	case fs.Changed("steps") && fs.Changed("rate"):
		return usage("give --rate (one rate) or --steps (several, one after another), not both")
	case fs.Changed("steps") && fs.Changed("duration"):
		return usage("--duration is for one --rate; with --steps each step lasts --step-duration")
	case !fs.Changed("steps") && fs.Changed("step-duration"):
		return usage("--step-duration needs --steps; for one rate use --duration")
	case fs.Changed("steps"):
		rates, err := bench.ParseRates(o.steps)
		if err != nil {
			return usage("--steps: %w", err)
		}
		for _, r := range rates {
			s.cfg.Steps = append(s.cfg.Steps, bench.Step{Rate: r, Duration: o.stepDuration})
		}
	default:
		r, err := bench.ParseRate(o.rate)
		if err != nil {
			return usage("--rate: %w", err)
		}
		s.cfg.Steps = []bench.Step{{Rate: r, Duration: o.duration}}
	}
	if err := s.cfg.Validate(); err != nil {
		return usage("%w", err)
	}
	switch {
	case o.partitions < 1:
		return usage("--partitions must be at least 1; got %d", o.partitions)
	case o.rf < 1:
		return usage("--replication-factor must be at least 1; got %d", o.rf)
	case o.producers < 1 || o.producers > 64:
		return usage("--producers must be 1 to 64; got %d", o.producers)
	case o.topic != "" && o.keep:
		return usage("--keep keeps the topic bench creates; a --topic is never deleted")
	}
	s.acks, err = client.ParseAcks(o.acks)
	if err != nil {
		return usage("%w", err)
	}
	s.opts = []client.ProducerOption{client.WithAcks(s.acks), client.WithCompression(o.compression)}
	// Left unset, the SDK's own defaults hold, so bench measures what an
	// application gets without tuning.
	if fs.Changed("idempotence") {
		s.opts = append(s.opts, client.WithIdempotence(o.idempotence))
	}
	if fs.Changed("linger") {
		if o.linger < 0 {
			return usage("--linger must not be negative; got %s", o.linger)
		}
		s.opts = append(s.opts, client.WithLinger(o.linger))
	}
	if fs.Changed("batch-size") {
		n, err := bench.ParseSize(o.batchSize)
		if err != nil {
			return usage("--batch-size: %w", err)
		}
		s.opts = append(s.opts, client.WithMaxBatchBytes(n))
	}
	if fs.Changed("max-in-flight") {
		if o.maxInFlight < 1 || o.maxInFlight > 5 {
			return usage("--max-in-flight must be 1 to 5; got %d", o.maxInFlight)
		}
		s.opts = append(s.opts, client.WithMaxInFlight(o.maxInFlight))
	}
	return s, nil
}

func (a *app) benchCommand() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure produce throughput and latency: fixed rates, steps or saturated",
		Long: `bench produces records at a fixed rate, at several rates one after another
(--steps), or as fast as the producers go (--rate 0, the default), and reads
them back in the same process. It reports publish latency (from a record's
scheduled send time to its acknowledgement), end-to-end latency (to the
consumer reading it) as p50, p99, p99.9 and max, the acknowledged
throughput, and failures: a progress line on stderr every second, then a
table (or -o json) on stdout. It uses the Go SDK, as an application does,
against any endpoint: sluice dev or a cluster.

The load is open loop: at a fixed rate every record has a send time fixed
in advance, and latency counts from that time, so when the producer falls
behind (its buffer is full, the cluster stalls) the wait is in the numbers.
Records still waiting when a step ends are counted as unsent. Saturated,
latency counts from when the producer took the record. Each step starts
with --warmup, whose records are sent but not counted. See
docs/benchmarking.md.

Without --topic bench creates a topic (--partitions, --replication-factor:
3, or as many as there are live brokers when fewer and the flag is not
given), and deletes it at the end unless --keep. --topic writes into an
existing topic (created if missing) and never deletes it; records of other
producers there are ignored.

Rates: records per second (1000 or 1000/s) or value bytes per second
(10MiB/s, 5MB/s). Each record value is --record-size bytes: a 16-byte
header (run id and send time), then random bytes.

Exit codes: 0 done with every record acknowledged, 1 a record failed or
the run was interrupted (the results are printed anyway), 2 usage,
3 unauthenticated or not allowed.`,
		Example: `  sluice bench
  sluice bench --rate 10MiB/s --duration 1m
  sluice bench --steps 5MiB/s,10MiB/s,20MiB/s --step-duration 30s
  sluice bench --rate 100 --linger 0 --partitions 1
  sluice --profile dev bench --partitions 12 --producers 4 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.spec(cmd.Flags())
			if err != nil {
				return err
			}
			return a.bench(cmd.Context(), s)
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// register adds the flags to f.
func (o *benchOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.rate, "rate", "0", "target `RATE`: records/s (1000), value bytes/s (10MiB/s, 5MB/s), or 0 for as fast as the producers go")
	f.StringVar(&o.steps, "steps", "", "comma-separated `RATES` run one after another, each for --step-duration, e.g. 5MiB/s,10MiB/s,20MiB/s")
	f.DurationVar(&o.duration, "duration", 30*time.Second, "how long --rate is measured, after the warm-up")
	f.DurationVar(&o.stepDuration, "step-duration", 30*time.Second, "how long each of --steps is measured, after its warm-up")
	f.DurationVar(&o.warmup, "warmup", 5*time.Second, "time at the start of each step whose records are sent but left out of the numbers")
	f.StringVar(&o.recordSize, "record-size", "1KiB", "record value `SIZE` (1024, 1KiB, 64KB), at least 16 bytes")
	f.StringVar(&o.topic, "topic", "", "write into this existing `TOPIC` (created if missing) and keep it; default: a new topic, deleted at the end")
	f.Int32VarP(&o.partitions, "partitions", "p", 3, "partitions of the topic bench creates")
	f.Int32VarP(&o.rf, "replication-factor", "r", 3, "replicas per partition of the topic bench creates; left unset, fewer when fewer brokers are live")
	f.BoolVar(&o.keep, "keep", false, "keep the topic bench created instead of deleting it at the end")
	f.IntVar(&o.producers, "producers", 1, "producers sharing the rate, each with its own connections")
	f.StringVar(&o.acks, "acks", "all", "when a record counts as written: all (every in-sync replica), 1 (the leader) or 0 (no answer)")
	f.BoolVar(&o.idempotence, "idempotence", true, "idempotent producers; the SDK's default: on with --acks all, off otherwise")
	f.StringVar(&o.compression, "compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd (the values are random: they do not compress)")
	f.DurationVar(&o.linger, "linger", 0, "how long a batch that could be sent waits for more records (default: the SDK's, 0: at once)")
	f.StringVar(&o.batchSize, "batch-size", "", "largest batch of several records, e.g. 256KiB (default: the SDK's)")
	f.IntVar(&o.maxInFlight, "max-in-flight", 0, "produce requests in flight per partition, 1 to 5 (default: the SDK's, 5)")
	f.BoolVar(&o.endToEnd, "end-to-end", true, "read the records back in this process and measure end-to-end latency")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines on stderr")
}

// bench runs s and prints the results.
func (a *app) bench(ctx context.Context, s benchSpec) error {
	cp, err := a.authenticated(ctx)
	if err != nil {
		return err
	}
	topic, created, err := a.benchTopic(ctx, cp, &s)
	if err != nil {
		return err
	}
	// Delete the topic bench created on every way out (an error, Ctrl-C).
	toDelete, deleted := created && !s.keep, false
	defer func() {
		if toDelete {
			a.deleteBenchTopic(ctx, topic)
		}
	}()

	var consumer *client.Consumer
	if s.cfg.EndToEnd {
		var closeConsumer func()
		if consumer, closeConsumer, err = a.benchConsumer(ctx, topic, s.partitions); err != nil {
			return err
		}
		defer closeConsumer()
	}
	var producers []*client.Producer
	var clients []*client.Client // the producers', for their throttle counts
	var senders []bench.SendFunc
	closeProducers := func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, p := range producers {
			_ = p.Close(closeCtx)
		}
		producers = nil
	}
	defer closeProducers()
	for range s.producers {
		c, err := a.sdkClient(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		clients = append(clients, c)
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		p, err := c.NewProducer(pctx, s.opts...)
		cancel()
		if err != nil {
			var ce *connect.Error
			if !errors.As(err, &ce) && ctx.Err() == nil {
				return usageError{sdkError{err}} // the SDK refused the options
			}
			return sdkError{err}
		}
		producers = append(producers, p)
		senders = append(senders, func(ctx context.Context, v []byte, done func(error)) {
			p.Produce(ctx, &client.Record{Topic: topic, Value: v}, func(_ *client.Record, err error) { done(err) })
		})
	}

	cfg := s.cfg
	if !s.quiet {
		cfg.Progress = func(p bench.Progress) { fmt.Fprintln(a.stderr, progressLine(p, cfg)) }
	}
	runner, err := bench.New(cfg, senders)
	if err != nil {
		return usageError{err}
	}
	stopConsumer := func() {}
	if consumer != nil {
		stopConsumer = consume(consumer, runner)
	}
	if !s.quiet {
		fmt.Fprintf(a.stderr, "bench: %s to %s (%s, replication factor %d), acks %s, %s, %s records\n",
			describeSteps(cfg), topic, plural(int(s.partitions), "partition"), s.rf, s.acks, plural(s.producers, "producer"), fmtSize(cfg.RecordSize))
	}
	res := runner.Run(ctx)
	stopConsumer()
	closeProducers()

	if toDelete {
		deleted, toDelete = a.deleteBenchTopic(ctx, topic), false
	}
	report := newBenchReport(s, topic, created, deleted, res)
	for _, c := range clients {
		t := c.Stats().ThrottleTotal()
		report.Throttled.Requests += t.Requests
		report.Throttled.Time += pbDuration(t.Time)
	}
	if a.output == "json" {
		if err := writeJSONValue(a.stdout, report); err != nil {
			return err
		}
	} else if err := printBench(a.stdout, report, res); err != nil {
		return err
	}
	if !res.Drained {
		what := "had its outcome"
		if s.cfg.EndToEnd {
			what = "had its outcome or was read back"
		}
		fmt.Fprintf(a.stderr, "bench: not every record %s when the run ended: the counts leave those out\n", what)
	}
	var failed int64
	for _, st := range res.Steps {
		failed += st.Failed
	}
	switch {
	case res.Interrupted:
		return errors.New("interrupted: the results cover the time before")
	case failed > 0:
		return fmt.Errorf("%s failed: see errors", plural(failed, "record"))
	case len(res.Errors) > 0:
		return fmt.Errorf("%s: see errors", plural(sumErrors(res.Errors), "error"))
	}
	return nil
}

func sumErrors(es []bench.ErrorCount) int64 {
	var n int64
	for _, e := range es {
		n += e.Count
	}
	return n
}

// benchTopic resolves the topic to write to: s.topic if it exists, else a
// new one (s.topic or a fresh name). It updates s with the topic's
// partitions and replication factor.
func (a *app) benchTopic(ctx context.Context, cp *clients, s *benchSpec) (name string, created bool, err error) {
	if s.topic != "" {
		res, err := cp.topic.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: s.topic}))
		switch {
		case err == nil:
			t := res.Msg.GetTopic()
			if s.partsGiven && t.GetPartitionCount() != s.partitions {
				return "", false, usageError{fmt.Errorf("--partitions %d: topic %q exists with %d (--partitions is for a topic bench creates)", s.partitions, s.topic, t.GetPartitionCount())}
			}
			if s.rfGiven && t.GetReplicationFactor() != s.rf {
				return "", false, usageError{fmt.Errorf("--replication-factor %d: topic %q exists with %d (--replication-factor is for a topic bench creates)", s.rf, s.topic, t.GetReplicationFactor())}
			}
			s.partitions, s.rf = t.GetPartitionCount(), t.GetReplicationFactor()
			return s.topic, false, nil
		case connect.CodeOf(err) != connect.CodeNotFound:
			return "", false, err
		}
		name = s.topic
	} else {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		name = "sluice-bench-" + hex.EncodeToString(b)
	}
	for {
		_, err := cp.topic.CreateTopic(ctx, connect.NewRequest(&sluicev1.CreateTopicRequest{
			Name: name, PartitionCount: s.partitions, ReplicationFactor: s.rf,
		}))
		if err == nil {
			return name, true, nil
		}
		// Too few live brokers for the default replication factor: as
		// many replicas as the brokers allow.
		if connect.CodeOf(err) != connect.CodeFailedPrecondition || s.rfGiven || s.rf == 1 {
			return "", false, fmt.Errorf("create topic %s: %w", name, err)
		}
		s.rf--
		fmt.Fprintf(a.stderr, "bench: %s; trying replication factor %d\n", errMessage(err), s.rf)
	}
}

// errMessage is a Connect error's message without its code prefix.
func errMessage(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// deleteBenchTopic deletes the topic bench created, even after Ctrl-C,
// with a new token (a long run may outlast the first), and reports
// whether it did.
func (a *app) deleteBenchTopic(ctx context.Context, topic string) bool {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	cp, err := a.authenticated(dctx)
	if err == nil {
		_, err = cp.topic.DeleteTopic(dctx, connect.NewRequest(&sluicev1.DeleteTopicRequest{Name: topic}))
	}
	if err != nil {
		fmt.Fprintf(a.stderr, "bench: delete topic %s: %v (delete it with `sluice topic delete %s`)\n", topic, err, topic)
		return false
	}
	return true
}

// benchConsumer reads every partition of topic from its end, waiting
// (up to 30 s) for a new topic's leaders. close stops it.
func (a *app) benchConsumer(ctx context.Context, topic string, partitions int32) (_ *client.Consumer, close func(), err error) {
	c, err := a.sdkClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	cons, err := c.NewConsumer()
	if err != nil {
		c.Close()
		return nil, nil, sdkError{err}
	}
	deadline := time.Now().Add(30 * time.Second)
	for p := range partitions {
		for {
			err := cons.Assign(ctx, topic, p, client.Latest())
			if err == nil {
				break
			}
			code := connect.CodeOf(err)
			if (code != connect.CodeUnavailable && code != connect.CodeNotFound) || time.Now().After(deadline) || ctx.Err() != nil {
				cons.Close()
				c.Close()
				return nil, nil, fmt.Errorf("read partition %d of %s: %w", p, topic, sdkError{err})
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}
	return cons, func() { cons.Close(); c.Close() }, nil
}

// consume feeds the runner with what the consumer reads until the returned
// func is called.
func consume(cons *client.Consumer, runner *bench.Runner) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			recs, err := cons.Poll(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// Counted, and not in a tight loop: the SDK retries what
				// it can, and what it cannot will not pass in 100 ms.
				runner.ConsumeError(err)
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				continue
			}
			for _, r := range recs {
				runner.Consumed(r.Value)
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// progressLine is one line of progress: the past second's rates and
// latencies.
func progressLine(p bench.Progress, cfg bench.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%4.0fs ", p.Elapsed.Seconds())
	switch {
	case p.Draining || p.Step == 0:
		b.WriteString("draining")
	default:
		if p.Steps > 1 {
			fmt.Fprintf(&b, "step %d/%d ", p.Step, p.Steps)
		}
		b.WriteString(rateName(cfg.Steps[p.Step-1].Rate))
		if p.Warmup {
			b.WriteString(" (warm-up)")
		}
	}
	secs := max(p.Interval.Seconds(), 1e-9)
	fmt.Fprintf(&b, ": sent %.0f/s, acked %.0f/s (%.2f MiB/s), publish p50 %s p99 %s",
		float64(p.Sent)/secs, float64(p.Acked)/secs, float64(p.AckedBytes)/secs/(1<<20), fmtBenchLatency(p.Publish.P50), fmtBenchLatency(p.Publish.P99))
	if cfg.EndToEnd {
		fmt.Fprintf(&b, ", end-to-end p50 %s p99 %s", fmtBenchLatency(p.EndToEnd.P50), fmtBenchLatency(p.EndToEnd.P99))
	}
	fmt.Fprintf(&b, ", %s", plural(p.Errors, "error"))
	return b.String()
}

func rateName(r bench.Rate) string {
	if r.Saturated() {
		return "saturated"
	}
	return r.String()
}

func describeSteps(cfg bench.Config) string {
	var rs []string
	for _, s := range cfg.Steps {
		rs = append(rs, rateName(s.Rate))
	}
	d := cfg.Steps[0].Duration
	if len(rs) == 1 {
		return fmt.Sprintf("%s for %s after %s of warm-up", rs[0], d, cfg.Warmup)
	}
	return fmt.Sprintf("steps %s, %s each after %s of warm-up", strings.Join(rs, ", "), d, cfg.Warmup)
}

// fmtBenchLatency writes a latency for people: 850µs, 2.10ms, 1.25s.
func fmtBenchLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Round(time.Microsecond)/time.Microsecond)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d-byte", n)
}

// benchReport is the result as -o json prints it: the run's settings and
// each step's numbers, with the CLI's JSON conventions (docs/cli.md):
// camelCase names, durations as protojson writes them ("0.002100s"), every
// field.
type benchReport struct {
	Topic             string          `json:"topic"`
	TopicCreated      bool            `json:"topicCreated"`
	TopicDeleted      bool            `json:"topicDeleted"`
	Partitions        int32           `json:"partitions"`
	ReplicationFactor int32           `json:"replicationFactor"`
	Acks              string          `json:"acks"`
	Producers         int             `json:"producers"`
	RecordSize        int             `json:"recordSize"`
	EndToEnd          bool            `json:"endToEnd"`
	Interrupted       bool            `json:"interrupted"`
	Drained           bool            `json:"drained"`
	Steps             []benchStepJSON `json:"steps"`
	Errors            []benchErrJSON  `json:"errors"`
	// Throttled sums the producers' rate refusals (client.Stats): the
	// requests the brokers refused for the tenant's quotas and the delays
	// they asked for, which the producers waited out.
	Throttled benchThrottle `json:"throttled"`
}

type benchThrottle struct {
	Requests int64      `json:"requests"`
	Time     pbDuration `json:"time"`
}

type benchStepJSON struct {
	Rate                   string         `json:"rate"`
	Saturated              bool           `json:"saturated"`
	TargetRecordsPerSecond float64        `json:"targetRecordsPerSecond"`
	Warmup                 pbDuration     `json:"warmup"`
	Duration               pbDuration     `json:"duration"`
	Sent                   int64          `json:"sent"`
	Unsent                 int64          `json:"unsent"`
	Acked                  int64          `json:"acked"`
	Failed                 int64          `json:"failed"`
	Consumed               int64          `json:"consumed"`
	RecordsPerSecond       float64        `json:"recordsPerSecond"`
	BytesPerSecond         float64        `json:"bytesPerSecond"`
	MiBPerSecond           float64        `json:"mibPerSecond"`
	Publish                latencySummary `json:"publish"`
	EndToEnd               latencySummary `json:"endToEnd"`
}

type latencySummary struct {
	Count int64      `json:"count"`
	Min   pbDuration `json:"min"`
	Mean  pbDuration `json:"mean"`
	P50   pbDuration `json:"p50"`
	P90   pbDuration `json:"p90"`
	P99   pbDuration `json:"p99"`
	P999  pbDuration `json:"p999"`
	Max   pbDuration `json:"max"`
}

type benchErrJSON struct {
	Message string `json:"message"`
	Count   int64  `json:"count"`
}

// pbDuration marshals as protojson writes a google.protobuf.Duration.
type pbDuration time.Duration

func (d pbDuration) MarshalJSON() ([]byte, error) {
	return protojson.Marshal(durationpb.New(time.Duration(d)))
}

// toSummary rounds latencies to the microsecond: the quantiles are within
// 0.4 % anyway, and nanoseconds would claim more.
func toSummary(s bench.Summary) latencySummary {
	us := func(d time.Duration) pbDuration { return pbDuration(d.Round(time.Microsecond)) }
	return latencySummary{
		Count: s.Count, Min: us(s.Min), Mean: us(s.Mean), P50: us(s.P50),
		P90: us(s.P90), P99: us(s.P99), P999: us(s.P999), Max: us(s.Max),
	}
}

func newBenchReport(s benchSpec, topic string, created, deleted bool, res *bench.Result) benchReport {
	r := benchReport{
		Topic: topic, TopicCreated: created, TopicDeleted: deleted, Partitions: s.partitions, ReplicationFactor: s.rf,
		Acks: s.acks.String(), Producers: s.producers, RecordSize: s.cfg.RecordSize, EndToEnd: s.cfg.EndToEnd,
		Interrupted: res.Interrupted, Drained: res.Drained, Steps: []benchStepJSON{}, Errors: []benchErrJSON{},
	}
	for _, st := range res.Steps {
		r.Steps = append(r.Steps, benchStepJSON{
			Rate: st.Rate.String(), Saturated: st.Rate.Saturated(), TargetRecordsPerSecond: st.TargetRecordsPerSecond,
			Warmup: pbDuration(st.Warmup), Duration: pbDuration(st.Duration),
			Sent: st.Sent, Unsent: st.Unsent, Acked: st.Acked, Failed: st.Failed, Consumed: st.Consumed,
			RecordsPerSecond: st.RecordsPerSecond, BytesPerSecond: st.BytesPerSecond, MiBPerSecond: st.BytesPerSecond / (1 << 20),
			Publish: toSummary(st.Publish), EndToEnd: toSummary(st.EndToEnd),
		})
	}
	for _, e := range res.Errors {
		r.Errors = append(r.Errors, benchErrJSON{Message: e.Message, Count: e.Count})
	}
	return r
}

// writeJSONValue writes v as indented JSON.
func writeJSONValue(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// printBench writes the results for people: the settings, a table with
// two rows per step (publish and end-to-end latency), the errors.
func printBench(w io.Writer, r benchReport, res *bench.Result) error {
	what := "created"
	switch {
	case !r.TopicCreated:
		what = "existing"
	case r.TopicDeleted:
		what = "created, deleted"
	}
	if err := kv(w,
		"topic", fmt.Sprintf("%s (%s)", r.Topic, what),
		"partitions", fmt.Sprint(r.Partitions),
		"replication factor", fmt.Sprint(r.ReplicationFactor),
		"acks", r.Acks,
		"producers", fmt.Sprint(r.Producers),
		"record size", fmt.Sprintf("%d bytes", r.RecordSize),
		"throttled", fmt.Sprintf("%s, waited %s (the tenant's rate quotas)", plural(r.Throttled.Requests, "request"), fmtBenchLatency(time.Duration(r.Throttled.Time))),
	); err != nil {
		return err
	}
	fmt.Fprintln(w)
	var rows [][]string
	for _, st := range res.Steps {
		rate := rateName(st.Rate)
		if st.Unsent > 0 {
			rate += " (behind)"
		}
		lat := func(name string, s bench.Summary) []string {
			return []string{name, fmtBenchLatency(s.P50), fmtBenchLatency(s.P99), fmtBenchLatency(s.P999), fmtBenchLatency(s.Max)}
		}
		rows = append(rows, append([]string{rate, fmt.Sprint(st.Sent), fmt.Sprint(st.Acked), fmt.Sprint(st.Failed), fmt.Sprint(st.Unsent),
			fmt.Sprintf("%.0f", st.RecordsPerSecond), fmt.Sprintf("%.2f", st.BytesPerSecond/(1<<20))}, lat("publish", st.Publish)...))
		if r.EndToEnd {
			rows = append(rows, append([]string{"", "", "", "", "", "", ""}, lat("end-to-end", st.EndToEnd)...))
		}
	}
	if err := table(w, []string{"RATE", "SENT", "ACKED", "FAILED", "UNSENT", "REC/S", "MIB/S", "LATENCY", "P50", "P99", "P99.9", "MAX"}, rows); err != nil {
		return err
	}
	if len(res.Errors) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		for _, e := range res.Errors {
			fmt.Fprintf(w, "  %d× %s\n", e.Count, e.Message)
		}
	}
	return nil
}
