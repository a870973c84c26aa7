package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sluicemq/sluice/client"
	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// fallbackRecordBytes bounds a stdin line when the control plane does not
// say the topic's max.message.bytes: the SDK's max batch size, its limit then.
const fallbackRecordBytes = 256 << 10

// interruptGrace is how long records already handed to the producer may
// still be delivered after Ctrl-C.
const interruptGrace = 5 * time.Second

// produceOptions are the flags of `sluice produce`.
type produceOptions struct {
	values          []string
	key             string
	keySeparator    string
	delimiter       string
	headers         []string
	partition       int32
	acks            string
	idempotence     bool
	compression     string
	deliveryTimeout time.Duration
	linger          time.Duration
	quiet           bool
	transactionalID string
	txnTimeout      time.Duration
}

// produceSpec is a validated produce invocation.
type produceSpec struct {
	topic     string
	values    [][]byte // from --value; nil: read stdin
	key       []byte   // nil: no key
	keySep    []byte   // nil: the whole line is the value
	delim     []byte
	headers   []client.Header
	partition int32 // -1: the SDK's partitioner
	opts      []client.ProducerOption
	timeout   time.Duration
	limit     int    // the topic's max.message.bytes: no stdin line may be longer
	txnID     string // write every record in one transaction of this transactional id
}

// spec validates the flags; every error is a usage error. fs says which
// flags were set explicitly.
func (o *produceOptions) spec(topic string, fs *pflag.FlagSet) (produceSpec, error) {
	s := produceSpec{topic: topic, partition: -1, timeout: o.deliveryTimeout, limit: fallbackRecordBytes}
	if topic == "" {
		return s, usageError{errors.New("topic name must not be empty")}
	}
	fromFlags := fs.Changed("value")
	switch {
	case fromFlags && fs.Changed("key-separator"):
		return s, usageError{errors.New("--key-separator splits stdin lines; it cannot be used with --value (use --key)")}
	case fromFlags && fs.Changed("delimiter"):
		return s, usageError{errors.New("--delimiter splits stdin; it cannot be used with --value")}
	case fs.Changed("key") && fs.Changed("key-separator"):
		return s, usageError{errors.New("give either --key (one key for every record) or --key-separator (a key per line), not both")}
	}
	if fromFlags {
		s.values = make([][]byte, len(o.values))
		for i, v := range o.values {
			s.values[i] = []byte(v)
		}
	}
	if fs.Changed("key") {
		s.key = []byte(o.key)
	}
	var err error
	if s.delim, err = unescape(o.delimiter); err != nil {
		return s, usageError{fmt.Errorf("--delimiter: %w", err)}
	}
	if len(s.delim) == 0 {
		return s, usageError{errors.New("--delimiter must not be empty")}
	}
	if fs.Changed("key-separator") {
		if s.keySep, err = unescape(o.keySeparator); err != nil {
			return s, usageError{fmt.Errorf("--key-separator: %w", err)}
		}
		if len(s.keySep) == 0 {
			return s, usageError{errors.New("--key-separator must not be empty")}
		}
	}
	if s.headers, err = parseHeaders(o.headers); err != nil {
		return s, err
	}

	switch {
	case o.deliveryTimeout <= 0:
		return s, usageError{fmt.Errorf("--delivery-timeout must be positive; got %s", o.deliveryTimeout)}
	case o.linger < 0:
		return s, usageError{fmt.Errorf("--linger must not be negative; got %s", o.linger)}
	}
	acks, err := client.ParseAcks(o.acks)
	if err != nil {
		return s, usageError{err}
	}
	s.opts = []client.ProducerOption{
		client.WithAcks(acks),
		client.WithCompression(o.compression),
		client.WithDeliveryTimeout(o.deliveryTimeout),
		client.WithLinger(o.linger),
	}
	// Left unset, the SDK turns idempotence on with acks=all and off
	// otherwise; set explicitly, it is passed on (and refused with other acks).
	if fs.Changed("idempotence") {
		s.opts = append(s.opts, client.WithIdempotence(o.idempotence))
	}
	if fs.Changed("transaction-timeout") && o.transactionalID == "" {
		return s, usageError{errors.New("--transaction-timeout applies only with --transactional-id")}
	}
	if o.transactionalID != "" {
		if o.txnTimeout < 0 {
			return s, usageError{fmt.Errorf("--transaction-timeout must not be negative; got %s", o.txnTimeout)}
		}
		if acks != client.AcksAll || (fs.Changed("idempotence") && !o.idempotence) {
			return s, usageError{errors.New("--transactional-id needs --acks all and idempotence: a transaction's records are written once, by every in-sync replica")}
		}
		s.txnID = o.transactionalID
		s.opts = append(s.opts, client.WithTransactionTimeout(o.txnTimeout))
	}
	if fs.Changed("partition") {
		if o.partition < 0 {
			return s, usageError{fmt.Errorf("--partition must not be negative; got %d", o.partition)}
		}
		s.partition = o.partition
		s.opts = append(s.opts, client.WithManualPartitioner())
	}
	return s, nil
}

// parseHeaders reads repeated key=value flags; the value may contain '='.
func parseHeaders(pairs []string) ([]client.Header, error) {
	var hs []client.Header
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--header %q: want key=value with a non-empty key", p)}
		}
		hs = append(hs, client.Header{Key: k, Value: []byte(v)})
	}
	return hs, nil
}

// unescape interprets \n, \t, \r, \0 and \\ in a flag value, so that a
// newline, tab or NUL can be typed in a shell.
func unescape(s string) ([]byte, error) {
	var b []byte
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b = append(b, s[i])
			continue
		}
		if i+1 == len(s) {
			return nil, errors.New(`trailing \: escape it as \\`)
		}
		i++
		switch s[i] {
		case 'n':
			b = append(b, '\n')
		case 't':
			b = append(b, '\t')
		case 'r':
			b = append(b, '\r')
		case '0':
			b = append(b, 0)
		case '\\':
			b = append(b, '\\')
		default:
			return nil, fmt.Errorf(`unknown escape \%c: use \n, \t, \r, \0 or \\`, s[i])
		}
	}
	return b, nil
}

func (a *app) produceCommand() *cobra.Command {
	var o produceOptions
	cmd := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Write records to a topic from --value flags or from stdin, one per line",
		Long: `produce writes records to TOPIC and reports where each one was written.

Values come from --value (one record per flag) or, without --value, from
stdin: one record per line, where --delimiter says what ends a line. An
empty line is a record with an empty (zero-length, not null) value; the
last line needs no delimiter. A record (key, value and headers, plus about
80 bytes of framing) may be up to the topic's max.message.bytes (1 MiB
unless its config says otherwise; see topic describe); a longer one fails
on its own, naming the limit, and the others are still sent.

Keys: --key gives every record the same key; --key-separator splits each
stdin line at the first separator into key and value (a line without the
separator fails). A record with a key goes to the partition of the key's
hash, so one key always lands on one partition; records without a key
fill one partition for a batch, then move to another. --partition sends
every record to one partition.

For each acknowledged record a line "partition=P offset=O" (with -o json:
{"partition":P,"offset":O}) goes to stdout, in input order; with --quiet
nothing does. The offset is -1 with --acks 0, which waits for no answer.
Each failed record is reported on stderr as "record N: reason" (N counts
from 1), saying whether it may have been written anyway. stderr ends with
"produced N records to TOPIC (F failed)", and shows a progress line while
it is a terminal and the offsets do not go to one.

--acks all (the default) waits until every in-sync replica has a record and
makes the producer idempotent: retries never write a record twice.
--idempotence=false turns that off; --acks 1 or 0 turn it off unless
--idempotence is given, which is then an error.

With --transactional-id ID every record of the run is written in one
transaction of the transactional producer ID: it commits once every
record was acknowledged and input ended, and aborts when a record failed
or on Ctrl-C, so read-committed consumers see all of the run's records
or none. The offsets printed are where the records were written; the
summary says whether the transaction committed. A run with ID fences a
run still going with the same ID. It needs --acks all and idempotence;
--transaction-timeout (default 60s) bounds how long the transaction may
stay open.

--delimiter and --key-separator understand the escapes \n, \t, \r, \0, \\.
Ctrl-C stops reading; records already read get 5 s to be acknowledged.

Exit codes: 0 every record acknowledged, 1 a record failed, 2 usage,
3 unauthenticated or not allowed, 4 the topic does not exist.`,
		Example: `  sluice produce orders --value hello
  seq 1 1000 | sluice produce orders
  sluice produce orders --key customer-42 --header source=cli --value '{"total": 12}'
  printf 'k1:v1\nk2:v2\n' | sluice produce orders --key-separator :
  find . -print0 | sluice produce files --delimiter '\0' --quiet
  sluice produce orders --acks 1 --compression zstd --linger 50ms < events.txt
  sluice produce orders --transactional-id import-2025-01 < batch.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.spec(args[0], cmd.Flags())
			if err != nil {
				return err
			}
			return a.produce(cmd.Context(), s, o.quiet)
		},
	}
	o.register(cmd.Flags())
	return cmd
}

// register adds the flags to fs.
func (o *produceOptions) register(f *pflag.FlagSet) {
	f.StringArrayVar(&o.values, "value", nil, "a record with value `V` (repeatable: one record each); without --value records are read from stdin")
	f.StringVar(&o.key, "key", "", "key `K` for every record (one key, one partition)")
	f.StringVar(&o.keySeparator, "key-separator", "", "split each stdin line at the first `SEP` into key and value, e.g. ':' or '\\t'")
	f.StringVar(&o.delimiter, "delimiter", "\n", "`DELIM` that ends a record on stdin, e.g. '\\0' or ';'")
	f.StringArrayVar(&o.headers, "header", nil, "header `key=value` for every record (repeatable; keys may repeat)")
	f.Int32Var(&o.partition, "partition", 0, "write every record to partition `N` (default: by key hash; records without a key stick to one partition per batch)")
	f.StringVar(&o.acks, "acks", "all", "when a record counts as written: all (every in-sync replica), 1 (the leader) or 0 (no answer)")
	f.BoolVar(&o.idempotence, "idempotence", true, "write each record once despite retries; needs --acks all, so other acks turn it off unless given")
	f.StringVar(&o.compression, "compression", "none", "batch compression: none, gzip, snappy, lz4 or zstd")
	f.DurationVar(&o.deliveryTimeout, "delivery-timeout", 2*time.Minute, "give up on a record not acknowledged within this time, retries included")
	f.DurationVar(&o.linger, "linger", 0, "how long a batch that could be sent waits for more records (0: at once; records still gather into one batch while requests are in flight)")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "print no line per record, only the summary on stderr")
	f.StringVar(&o.transactionalID, "transactional-id", "", "write all records in one transaction of transactional id `ID`: committed when every record was acknowledged, else aborted")
	f.DurationVar(&o.txnTimeout, "transaction-timeout", 0, "with --transactional-id, how long the transaction may stay open before the cluster aborts it (0: 60s)")
}

// recordWriter is what produce writes with: a Producer, or a
// TransactionalProducer inside its one transaction.
type recordWriter interface {
	Produce(ctx context.Context, r *client.Record, cb func(*client.Record, error))
	Close(ctx context.Context) error
}

// newWriter makes the producer of s: transactional with an open
// transaction when s.txnID is set.
func newWriter(ctx context.Context, c *client.Client, s produceSpec) (recordWriter, *client.TransactionalProducer, error) {
	if s.txnID == "" {
		p, err := c.NewProducer(ctx, s.opts...)
		return p, nil, err
	}
	tp, err := c.NewTransactionalProducer(ctx, s.txnID, s.opts...)
	if err != nil {
		return nil, nil, err
	}
	if err := tp.Begin(); err != nil {
		_ = tp.Close(ctx)
		return nil, nil, err
	}
	return tp, tp, nil
}

// produce sends the records of s and reports them.
func (a *app) produce(ctx context.Context, s produceSpec, quiet bool) error {
	// Ask the control plane first: whether the topic exists (NotFound
	// before stdin is read) and its max.message.bytes.
	cp, err := a.authenticated(ctx)
	if err != nil {
		return err
	}
	desc, err := cp.topic.DescribeTopic(ctx, connect.NewRequest(&sluicev1.DescribeTopicRequest{Name: s.topic}))
	if err != nil {
		return err
	}
	if n := desc.Msg.GetTopic().GetConfig().GetMaxMessageBytes(); n > 0 {
		s.limit = int(n)
	}
	c, err := a.sdkClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.Partitions(ctx, s.topic)
	if err != nil {
		return sdkError{err}
	}
	if s.partition >= n {
		return usageError{fmt.Errorf("--partition %d: topic %q has partitions 0..%d", s.partition, s.topic, n-1)}
	}
	// NewProducer may wait for a producer id; do not wait forever.
	pctx, cancel := context.WithTimeout(ctx, s.timeout)
	// The SDK batches up to 256 KiB, and sends a larger record in a batch
	// of its own up to the topic's max.message.bytes.
	p, tp, err := newWriter(pctx, c, s)
	if err != nil {
		var ce *connect.Error
		refused := !errors.As(err, &ce) && pctx.Err() == nil
		cancel()
		if refused {
			return usageError{sdkError{err}} // the SDK refused the options
		}
		return sdkError{err}
	}
	cancel()

	out := bufio.NewWriter(a.stdout)
	prog := startProgress(a.stderr, "produced", isTerminal(a.stderr) && (quiet || !isTerminal(a.stdout)))
	rep := &produceReport{out: out, json: a.output == "json", quiet: quiet, prog: prog, results: map[int]produceResult{}, next: 1}

	var readErr error
	produce := func(num int, rec *client.Record) {
		p.Produce(ctx, rec, func(r *client.Record, err error) { rep.done(num, r, err) })
	}
	num := 0
	if s.values != nil {
		for _, v := range s.values {
			if ctx.Err() != nil {
				break
			}
			num++
			produce(num, s.record(s.key, v))
		}
	} else {
		lines := readLines(ctx, a.stdin, s.delim, s.limit)
	read:
		for {
			var l line
			var ok bool
			select {
			case l, ok = <-lines:
			case <-ctx.Done():
				break read // stdin may block: stop reading at once
			}
			if !ok {
				break read
			}
			if l.err != nil {
				readErr = l.err
				break read
			}
			num++
			if rec, err := s.lineRecord(l); err != nil {
				rep.done(num, nil, err)
			} else {
				produce(num, rec)
			}
		}
	}

	// Every record has its delivery deadline; after Ctrl-C wait less.
	grace := s.timeout + 5*time.Second
	if ctx.Err() != nil {
		grace = interruptGrace
	}
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	var txnErr error
	outcome := ""
	if tp != nil {
		// Commit waits for every record; a failed one makes it abortable.
		// A line the CLI refused itself (never produced) aborts it too:
		// the run is all or nothing.
		refused := rep.failures() > 0
		if readErr == nil && ctx.Err() == nil && !refused {
			txnErr = tp.Commit(closeCtx)
		}
		if readErr != nil || ctx.Err() != nil || refused || errors.Is(txnErr, client.ErrTransactionAbortable) {
			if aerr := tp.Abort(closeCtx); aerr != nil && txnErr == nil {
				txnErr = aerr
			}
			outcome = " in a transaction: aborted"
			if txnErr == nil && ctx.Err() != nil {
				txnErr = errors.New("interrupted: the transaction was aborted")
			}
		} else if txnErr == nil {
			outcome = " in a transaction: committed"
		} else {
			outcome = " in a transaction: not committed"
		}
	}
	closeErr := p.Close(closeCtx)
	prog.stop()
	acked, failed := rep.finish()
	writeErr := out.Flush()
	fmt.Fprintf(a.stderr, "produced %s to %s (%d failed)%s\n", plural(acked, "record"), s.topic, failed, outcome)
	switch {
	case readErr != nil:
		return fmt.Errorf("read stdin: %w", readErr)
	case writeErr != nil:
		return fmt.Errorf("write stdout: %w", writeErr)
	case failed > 0:
		return fmt.Errorf("%d of %s failed", failed, plural(acked+failed, "record"))
	case txnErr != nil:
		return sdkError{txnErr}
	case closeErr != nil:
		return sdkError{closeErr}
	}
	return nil
}

// record builds a record with s's topic, headers and partition.
func (s *produceSpec) record(key, value []byte) *client.Record {
	r := &client.Record{Topic: s.topic, Key: key, Value: value, Headers: s.headers}
	if s.partition >= 0 {
		r.Partition = s.partition
	}
	return r
}

// lineRecord builds the record of a stdin line, or says why it cannot be
// sent.
func (s *produceSpec) lineRecord(l line) (*client.Record, error) {
	if l.data == nil {
		return nil, fmt.Errorf("%w: a line of %d bytes; topic %q takes records up to its max.message.bytes, %d", client.ErrRecordTooLarge, l.size, s.topic, s.limit)
	}
	if s.keySep == nil {
		return s.record(s.key, l.data), nil
	}
	k, v, ok := bytes.Cut(l.data, s.keySep)
	if !ok {
		return nil, fmt.Errorf("no key separator %q in the line", s.keySep)
	}
	return s.record(k, v), nil
}

// line is one record's bytes from stdin; data is nil when the line was
// longer than the limit (size says how long), err is set on a read error.
type line struct {
	data []byte
	size int
	err  error
}

// readLines reads records from r on a goroutine, so that Ctrl-C stops the
// producer even while stdin blocks. The channel closes at the end of input,
// after a read error, or when ctx ends.
func readLines(ctx context.Context, r io.Reader, delim []byte, limit int) <-chan line {
	ch := make(chan line, 256)
	go func() {
		defer close(ch)
		lr := newLineReader(r, delim, limit)
		for {
			data, size, err := lr.next()
			if err == io.EOF {
				return
			}
			select {
			case ch <- line{data: data, size: size, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// lineReader splits input at a delimiter of one or more bytes into records
// of at most limit bytes, without holding a longer one in memory.
type lineReader struct {
	r     *bufio.Reader
	delim []byte
	limit int
}

func newLineReader(r io.Reader, delim []byte, limit int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), delim: delim, limit: limit}
}

// next returns the next record without its delimiter and its size. When
// the record is longer than the limit its bytes are dropped: data is nil
// and size says how long it was. At the end of input it returns io.EOF; a
// last record without a delimiter is returned first.
func (lr *lineReader) next() (data []byte, size int, err error) {
	last := lr.delim[len(lr.delim)-1]
	buf := []byte{}
	tail := make([]byte, 0, len(lr.delim)) // the last bytes read, to match the delimiter
	seen, over := 0, false
	for {
		chunk, err := lr.r.ReadSlice(last)
		seen += len(chunk)
		if !over && len(buf)+len(chunk) > lr.limit+len(lr.delim) {
			over, buf = true, nil
		}
		if !over {
			buf = append(buf, chunk...)
		}
		if len(chunk) >= len(lr.delim) {
			tail = append(tail[:0], chunk[len(chunk)-len(lr.delim):]...)
		} else {
			tail = append(tail, chunk...)
			tail = tail[max(0, len(tail)-len(lr.delim)):]
		}
		switch {
		case err == nil && bytes.Equal(tail, lr.delim):
			size = seen - len(lr.delim)
			if over {
				return nil, size, nil
			}
			return buf[:size], size, nil
		case err == nil || err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && seen > 0:
			if over || seen > lr.limit {
				return nil, seen, nil
			}
			return buf, seen, nil
		default:
			return nil, 0, err
		}
	}
}

// produceResult is a finished record waiting for its turn to be printed.
type produceResult struct {
	partition int32
	offset    int64
	failed    bool
}

// produceReport prints outcomes in input order, whatever order the
// partitions acknowledge them in, and counts them.
type produceReport struct {
	mu      sync.Mutex
	out     *bufio.Writer
	json    bool
	quiet   bool
	prog    *progress
	results map[int]produceResult // finished, not printed yet
	next    int                   // the record number to print next
	acked   int
	failed  int
}

// done records the outcome of record num (1-based); a failure is printed on
// stderr at once.
func (r *produceReport) done(num int, rec *client.Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed++
		r.results[num] = produceResult{failed: true}
		var de *client.DeliveryError
		if errors.As(err, &de) {
			r.prog.printf("record %d: %v\n", num, sdkError{err})
		} else {
			// Refused by the CLI itself (a line over the limit), before
			// Produce: never sent. Produce reports every failure as a
			// *DeliveryError.
			r.prog.printf("record %d: %v; the record was not written\n", num, sdkError{err})
		}
	} else {
		r.acked++
		r.prog.count.Add(1)
		r.results[num] = produceResult{partition: rec.Partition, offset: rec.Offset}
	}
	printed := false
	for {
		res, ok := r.results[r.next]
		if !ok {
			break
		}
		delete(r.results, r.next)
		r.next++
		if res.failed || r.quiet {
			continue
		}
		printed = true
		if r.json {
			fmt.Fprintf(r.out, "{\"partition\":%d,\"offset\":%d}\n", res.partition, res.offset)
		} else {
			fmt.Fprintf(r.out, "partition=%d offset=%d\n", res.partition, res.offset)
		}
	}
	if printed {
		_ = r.out.Flush() // a write error is reported by the final Flush
	}
}

// failures is how many records failed so far.
func (r *produceReport) failures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// finish returns the counts; every callback has run.
func (r *produceReport) finish() (acked, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked, r.failed
}

// sdkClient connects the Go SDK to the resolved profile's endpoint with its
// API key.
func (a *app) sdkClient(ctx context.Context) (*client.Client, error) {
	p, err := a.resolve(true, false)
	if err != nil {
		return nil, err
	}
	if _, err := httpClient(p.Endpoint, p.CAFile); err != nil {
		return nil, err // the same checks, and messages, as every other command
	}
	cfg, err := tlsConfig(p.CAFile)
	if err != nil {
		return nil, err
	}
	c, err := client.New(ctx, p.Endpoint, client.APIKey(p.APIKey), client.WithTLS(cfg))
	if err != nil {
		return nil, sdkError{err}
	}
	return c, nil
}

func allPartitions(n int32) []int32 {
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i)
	}
	return ps
}

// sdkError drops the "sluice: " prefix of SDK errors, which Execute prints
// already; errors.As and connect.CodeOf still see the SDK's error.
type sdkError struct{ err error }

func (e sdkError) Error() string { return strings.TrimPrefix(e.err.Error(), "sluice: ") }
func (e sdkError) Unwrap() error { return e.err }

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress redraws a status line "VERB N records, X rec/s" on stderr at
// most once a second while enabled. Messages written through printf clear
// it first, so the two never share a line.
type progress struct {
	w       io.Writer
	verb    string
	enabled bool
	count   atomic.Int64

	mu    sync.Mutex
	shown bool
	quit  chan struct{}
	done  chan struct{}
}

func startProgress(w io.Writer, verb string, enabled bool) *progress {
	p := &progress{w: w, verb: verb, enabled: enabled, quit: make(chan struct{}), done: make(chan struct{})}
	if !enabled {
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, lastAt := int64(0), time.Now()
		for {
			select {
			case <-p.quit:
				return
			case now := <-t.C:
				n := p.count.Load()
				rate := float64(n-last) / now.Sub(lastAt).Seconds()
				last, lastAt = n, now
				p.mu.Lock()
				fmt.Fprintf(p.w, "\r\x1b[K%s %s, %.0f rec/s", p.verb, plural(n, "record"), rate)
				p.shown = true
				p.mu.Unlock()
			}
		}
	}()
	return p
}

// printf writes a message line to stderr.
func (p *progress) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
	fmt.Fprintf(p.w, format, args...)
}

// stop ends the redraws and clears the status line.
func (p *progress) stop() {
	if p.enabled {
		select {
		case <-p.quit:
		default:
			close(p.quit)
		}
	}
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
}
