package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sluicemq/sluice/client"
)

// consumeOptions are the flags of `sluice consume`.
type consumeOptions struct {
	partitions []int32
	offset     string
	count      int
	timeout    time.Duration
	follow     bool
	format     string
	isolation  string
	iso        client.Isolation // parsed from isolation

	group groupFlags // with --group: consume as a member of a consumer group
}

// parseOffset reads --offset: earliest, latest, an offset, or @ and a time
// (RFC 3339 or Unix milliseconds).
func parseOffset(s string) (client.Offset, error) {
	switch s {
	case "earliest":
		return client.Earliest(), nil
	case "latest":
		return client.Latest(), nil
	}
	if ts, ok := strings.CutPrefix(s, "@"); ok {
		if ms, err := strconv.ParseInt(ts, 10, 64); err == nil {
			return client.AtTime(time.UnixMilli(ms)), nil
		}
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return client.Offset{}, usageError{fmt.Errorf("--offset %q: after @ give an RFC 3339 time (2006-01-02T15:04:05Z) or Unix milliseconds", s)}
		}
		return client.AtTime(t), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return client.Offset{}, usageError{fmt.Errorf("--offset %q: want earliest, latest, an offset (0 or more) or @TIME", s)}
	}
	return client.At(n), nil
}

// formatPart is a literal or a placeholder (field != 0) of a --format.
type formatPart struct {
	lit   string
	field byte
}

// parseFormat compiles a --format template: %k %v %o %p %t %h and %%, and
// the escapes \n \t \r \0 \\.
func parseFormat(s string) ([]formatPart, error) {
	var parts []formatPart
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '%':
			if i+1 == len(s) {
				return nil, usageError{errors.New(`--format: trailing %: write %% for a percent sign`)}
			}
			i++
			switch c := s[i]; c {
			case '%':
				lit.WriteByte('%')
			case 'k', 'v', 'o', 'p', 't', 'h':
				if lit.Len() > 0 {
					parts = append(parts, formatPart{lit: lit.String()})
					lit.Reset()
				}
				parts = append(parts, formatPart{field: c})
			default:
				return nil, usageError{fmt.Errorf("--format: unknown placeholder %%%c: use %%k %%v %%o %%p %%t %%h or %%%%", c)}
			}
		case '\\':
			b, err := unescape(s[i:min(i+2, len(s))])
			if err != nil {
				return nil, usageError{fmt.Errorf("--format: %w", err)}
			}
			lit.Write(b)
			i++
		default:
			lit.WriteByte(s[i])
		}
	}
	if lit.Len() > 0 {
		parts = append(parts, formatPart{lit: lit.String()})
	}
	return parts, nil
}

// writeFormatted writes r as the template says. Keys, values and headers
// are written as they are (bytes, not escaped); a null key or value is
// empty.
func writeFormatted(w *bufio.Writer, parts []formatPart, r *client.Record) {
	for _, p := range parts {
		switch p.field {
		case 0:
			w.WriteString(p.lit)
		case 'k':
			w.Write(r.Key)
		case 'v':
			w.Write(r.Value)
		case 'o':
			w.WriteString(strconv.FormatInt(r.Offset, 10))
		case 'p':
			w.WriteString(strconv.FormatInt(int64(r.Partition), 10))
		case 't':
			w.WriteString(r.Timestamp.UTC().Format(time.RFC3339Nano))
		case 'h':
			for i, h := range r.Headers {
				if i > 0 {
					w.WriteByte(',')
				}
				w.WriteString(h.Key)
				w.WriteByte('=')
				w.Write(h.Value)
			}
		}
	}
}

// jsonRecord is a consumed record in -o json. Key, value and header values
// are strings when they are valid UTF-8, else base64 with the matching
// *Base64 field true; null when null.
type jsonRecord struct {
	Topic       string       `json:"topic"`
	Partition   int32        `json:"partition"`
	Offset      int64        `json:"offset"`
	Timestamp   string       `json:"timestamp"`
	Key         *string      `json:"key"`
	KeyBase64   bool         `json:"keyBase64,omitempty"`
	Value       *string      `json:"value"`
	ValueBase64 bool         `json:"valueBase64,omitempty"`
	Headers     []jsonHeader `json:"headers"`
}

type jsonHeader struct {
	Key         string  `json:"key"`
	Value       *string `json:"value"`
	ValueBase64 bool    `json:"valueBase64,omitempty"`
}

// jsonBytes returns b as a JSON string value: itself when valid UTF-8,
// else base64 (the bool says which); nil for null.
func jsonBytes(b []byte) (*string, bool) {
	if b == nil {
		return nil, false
	}
	if utf8.Valid(b) {
		s := string(b)
		return &s, false
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &s, true
}

func toJSONRecord(r *client.Record) jsonRecord {
	j := jsonRecord{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
		Timestamp: r.Timestamp.UTC().Format(time.RFC3339Nano), Headers: []jsonHeader{}}
	j.Key, j.KeyBase64 = jsonBytes(r.Key)
	j.Value, j.ValueBase64 = jsonBytes(r.Value)
	for _, h := range r.Headers {
		jh := jsonHeader{Key: h.Key}
		jh.Value, jh.ValueBase64 = jsonBytes(h.Value)
		j.Headers = append(j.Headers, jh)
	}
	return j
}

func (a *app) consumeCommand() *cobra.Command {
	var o consumeOptions
	cmd := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Read records from a topic and print them",
		Long: `consume reads TOPIC's partitions and prints each record on stdout.

It reads every partition unless --partition names some, starting at
--offset in each: earliest (the default: the oldest record still kept),
latest (only records written from now on: needs --follow), an offset, or
@TIME, the first record at or after TIME, given in RFC 3339
(@2025-01-31T12:00:00Z) or Unix milliseconds (@1738324800000). Records of a
partition come in offset order; partitions are interleaved. Without
--group it commits nothing, and it stops at the end: once it printed what
each partition held when consume started (up to its high watermark then;
nothing for an empty partition), as kcat -e and rpk's -o :end do. With
--follow (-f) it keeps going instead, printing records as they are written,
until Ctrl-C.

With --group G it consumes as a member of consumer group G instead: the
group assigns it some of TOPIC's partitions (sharing them with the group's
other members, and moving them as members come and go). Each starts at the
group's committed offset or, where the group has none, at --offset, which
may then only be earliest (the default) or latest. It commits the offsets
of the records it printed as --commit says:
  interval  every --commit-interval (default 5s)
  each      after every record
  every     after every --commit-every records (default 100)
  manual    only when it stops (at-least-once only)
and when it stops (Ctrl-C, -n, --timeout) it commits and leaves the group.
With --delivery at-least-once (the default) a record is committed after it
was printed: after a crash the group prints again what was printed but not
committed yet. With at-most-once the records fetched together are committed
before the first of them is printed: after a crash the group skips what was
committed but not printed, and -n skips the rest of the last fetch. In
group mode each record is flushed to stdout before it counts as processed
(whether or not stdout is a terminal), so after a kill -9 stdout holds
exactly the records processed.

With --instance-id ID the member is static (a pod name, say): when it
stops, or is killed, its partitions wait for it, unread, for the group
session timeout, and a consume started again with the same ID within that
time takes them over at once from the committed offsets, with no rebalance
of the other members. If the old process is still running (paused, or a
second copy by mistake), the new one replaces it: the old one is fenced,
stops with exit code 1 and does not rejoin. Give each running member its
own ID. See also "sluice group --help".

A group member always follows: the group may hand it partitions at any
time, so the end of the partitions it holds now is no end for the group
(rpk's group consume follows too). It stops, as a --follow consume does, at
Ctrl-C, after -n records, or when --timeout passed without a new record.
Every way of stopping ends with exit code 0 and "consumed N records" on
stderr.

--isolation says which records of transactional producers it reads:
read-uncommitted (the default) prints every record as soon as it is
written, also those of transactions still open or aborted later;
read-committed prints only records of committed transactions (and
records written outside transactions), each once its transaction has
committed, and none of an aborted one. A read-committed consume waits at
the first record of an open transaction until it ends, and without
--follow stops at the last stable offset (the first offset of the oldest
open transaction, or the end) instead of the end. See
docs/sdk-transactions.md. stderr shows a progress line while it is a terminal and the
records do not go to one.

--format is a template for each record:
  %k key   %v value   %o offset   %p partition   %%  a percent sign
  %t timestamp (RFC 3339, UTC)   %h headers as k=v,k=v
and the escapes \n, \t, \r, \0, \\. Nothing else is added, so end the
template with \n for one record per line. Keys, values and headers are
printed as they are; a null key or value prints nothing.

With -o json (instead of --format) each record is one JSON object on a line:
  {"topic":"orders","partition":0,"offset":7,"timestamp":"2025-01-31T12:00:00.123Z",
   "key":"k1","value":"v1","headers":[{"key":"source","value":"cli"}]}
A key, value or header value that is not valid UTF-8 is base64 instead,
with "keyBase64", "valueBase64" or the header's "valueBase64" set to
true; a null key or value is null. Field names are camelCase as in every
-o json output (docs/cli.md); offsets are JSON numbers.

Exit codes: 0 done or interrupted, 1 error (an --offset out of the
partition's range, for one, or another process took over this one's
--instance-id), 2 usage, 3 unauthenticated or not allowed, 4 the topic
does not exist.`,
		Example: `  sluice consume orders
  sluice consume orders -n 10 --offset earliest --format '%p:%o %k=%v\n'
  sluice consume orders --follow --offset latest --partition 0,1
  sluice consume orders --offset @2025-01-31T12:00:00Z -o json
  sluice consume orders --group billing
  sluice consume orders --group billing --commit each --offset latest
  sluice consume orders --group billing --instance-id "$HOSTNAME"
  sluice consume orders --group audit --commit every --commit-every 500 -n 10000
  sluice consume enriched --isolation read-committed --follow`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == "" {
				return usageError{errors.New("topic name must not be empty")}
			}
			from, err := parseOffset(o.offset)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("format") && a.output == "json" {
				return usageError{errors.New("--format does not apply to -o json: give one or the other")}
			}
			parts, err := parseFormat(o.format)
			if err != nil {
				return err
			}
			switch {
			case o.count < 0:
				return usageError{fmt.Errorf("--count must not be negative; got %d", o.count)}
			case o.timeout < 0:
				return usageError{fmt.Errorf("--timeout must not be negative; got %s", o.timeout)}
			}
			gs, err := o.group.parse(cmd.Flags().Changed, o.offset)
			if err != nil {
				return err
			}
			if o.iso, err = client.ParseIsolation(o.isolation); err != nil {
				return usageError{fmt.Errorf("--isolation %q: choose read-committed or read-uncommitted", o.isolation)}
			}
			switch {
			case o.group.name != "" && cmd.Flags().Changed("follow") && !o.follow:
				return usageError{errors.New("--follow=false does not apply with --group: a group member follows; stop it with -n or --timeout")}
			case o.group.name == "" && !o.follow && o.offset == "latest":
				return usageError{errors.New("--offset latest starts at the end, where consume stops without --follow: add --follow to read the records written from now on")}
			}
			if o.group.name != "" {
				return a.consumeGroup(cmd.Context(), args[0], o, gs, parts)
			}
			return a.consume(cmd.Context(), args[0], o, from, parts)
		},
	}
	f := cmd.Flags()
	f.Int32SliceVar(&o.partitions, "partition", nil, "read partition `N` (repeatable or comma-separated, e.g. 0,2; default: every partition)")
	f.Lookup("partition").DefValue = "" // not "[]" in --help
	f.StringVar(&o.offset, "offset", "earliest", "where to start in each partition: earliest, latest, an offset, or @TIME (RFC 3339 or Unix ms)")
	f.IntVarP(&o.count, "count", "n", 0, "stop after `N` records (0: no limit)")
	f.DurationVar(&o.timeout, "timeout", 0, "stop when no record arrived for this long (0: no limit)")
	f.BoolVarP(&o.follow, "follow", "f", false, "keep reading records as they are written, until Ctrl-C, -n or --timeout (without it consume stops at the end; with --group it always follows)")
	f.StringVar(&o.format, "format", "%v\n", "template per record: %k key, %v value, %o offset, %p partition, %t timestamp, %h headers, and \\n \\t escapes")
	f.StringVar(&o.isolation, "isolation", "read-uncommitted", "which records of transactions to read: read-uncommitted (all, at once) or read-committed (only committed transactions', once committed)")
	o.group.register(f)
	return cmd
}

// consume reads the records and prints them until done or interrupted.
func (a *app) consume(ctx context.Context, topic string, o consumeOptions, from client.Offset, parts []formatPart) error {
	c, err := a.sdkClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n, err := c.Partitions(ctx, topic)
	if err != nil {
		return sdkError{err}
	}
	partitions := slices.Clone(o.partitions)
	if len(partitions) == 0 {
		partitions = allPartitions(n)
	}
	slices.Sort(partitions)
	partitions = slices.Compact(partitions)
	for _, p := range partitions {
		if p < 0 || p >= n {
			return usageError{fmt.Errorf("--partition %d: topic %q has partitions 0..%d", p, topic, n-1)}
		}
	}
	cs, err := c.NewConsumer(client.WithIsolation(o.iso))
	if err != nil {
		return sdkError{err}
	}
	defer cs.Close()

	out := bufio.NewWriter(a.stdout)
	prog := startProgress(a.stderr, "consumed", isTerminal(a.stderr) && !isTerminal(a.stdout))
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	consumed := 0
	err = consumeLoop(ctx, cs, topic, partitions, from, o, func(r *client.Record) error {
		if a.output == "json" {
			if err := enc.Encode(toJSONRecord(r)); err != nil {
				return err
			}
		} else {
			writeFormatted(out, parts, r)
		}
		consumed++
		prog.count.Add(1)
		return nil
	}, out.Flush)
	prog.stop()
	if ferr := out.Flush(); ferr != nil && err == nil {
		err = fmt.Errorf("write stdout: %w", ferr)
	}
	fmt.Fprintf(a.stderr, "consumed %s\n", plural(consumed, "record"))
	return err
}

// consumeLoop assigns the partitions and hands each record to emit, calling
// flush after each batch, until the end of the partitions (without
// --follow: their high watermarks at the start), -n records, the
// --timeout, or ctx ends (each a clean stop: nil).
func consumeLoop(ctx context.Context, cs *client.Consumer, topic string, partitions []int32, from client.Offset, o consumeOptions, emit func(*client.Record) error, flush func() error) error {
	for _, p := range partitions {
		assign := func() error { return cs.AssignUntil(ctx, topic, p, from, client.Latest()) }
		if o.follow {
			assign = func() error { return cs.Assign(ctx, topic, p, from) }
		}
		if err := assign(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("start partition %d at %s: %w", p, from, err)
		}
	}
	emitted := 0
	for o.count == 0 || emitted < o.count {
		pctx, cancel := ctx, context.CancelFunc(func() {})
		if o.timeout > 0 {
			pctx, cancel = context.WithTimeout(ctx, o.timeout)
		}
		recs, err := cs.Poll(pctx)
		timedOut := pctx.Err() != nil
		cancel()
		if err != nil {
			if ctx.Err() != nil || timedOut || errors.Is(err, io.EOF) {
				return nil // interrupted, no record for --timeout, or the end
			}
			return sdkError{err}
		}
		for _, r := range recs {
			if err := emit(r); err != nil {
				return err
			}
			if emitted++; o.count > 0 && emitted == o.count {
				break
			}
		}
		if err := flush(); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
	}
	return nil
}
