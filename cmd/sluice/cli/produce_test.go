package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/client"
)

// readAll splits input with a lineReader; a too-long record shows as "!N".
func readAll(t *testing.T, r io.Reader, delim string, limit int) []string {
	t.Helper()
	lr := newLineReader(r, []byte(delim), limit)
	var out []string
	for {
		data, size, err := lr.next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		if data == nil {
			out = append(out, fmt.Sprintf("!%d", size))
			continue
		}
		require.Len(t, data, size)
		out = append(out, string(data))
	}
}

func TestCLILineReader(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("a", 100_000) // longer than bufio's buffer
	tests := []struct {
		name, in, delim string
		limit           int
		want            []string
	}{
		{"lines", "a\nb\nc\n", "\n", 10, []string{"a", "b", "c"}},
		{"last line without delimiter", "a\nb", "\n", 10, []string{"a", "b"}},
		{"empty lines are records", "\n\na\n\n", "\n", 10, []string{"", "", "a", ""}},
		{"no input", "", "\n", 10, nil},
		{"NUL", "a\x00b\x00", "\x00", 10, []string{"a", "b"}},
		{"multi-byte delimiter", "a;;b;c;;;;d", ";;", 10, []string{"a", "b;c", "", "d"}},
		{"CRLF", "a\r\nb\r\n", "\r\n", 10, []string{"a", "b"}},
		{"at the limit", "12345\n123456\n1\n", "\n", 5, []string{"12345", "!6", "1"}},
		{"last line over the limit", "1\n123456", "\n", 5, []string{"1", "!6"}},
		{"long line within the limit", big + "\nz\n", "\n", 100_000, []string{big, "z"}},
		{"long line over the limit", big + "\nz\n", "\n", 99_999, []string{"!100000", "z"}},
		{"long line, multi-byte delimiter", big + "\r\nz", "\r\n", 200_000, []string{big, "z"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, readAll(t, strings.NewReader(tc.in), tc.delim, tc.limit))
			// One byte at a time: a delimiter split across reads still matches.
			require.Equal(t, tc.want, readAll(t, iotest.OneByteReader(strings.NewReader(tc.in)), tc.delim, tc.limit))
		})
	}
}

func TestCLILineReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	lr := newLineReader(io.MultiReader(strings.NewReader("a\nb"), iotest.ErrReader(boom)), []byte("\n"), 10)
	data, _, err := lr.next()
	require.NoError(t, err)
	require.Equal(t, "a", string(data))
	_, _, err = lr.next()
	require.ErrorIs(t, err, boom)
}

func TestCLIUnescape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{`\n`: "\n", `a\tb`: "a\tb", `\r\n`: "\r\n", `\0`: "\x00", `\\`: `\`, `::`: "::", "\n": "\n"} {
		got, err := unescape(in)
		require.NoError(t, err, in)
		require.Equal(t, want, string(got), in)
	}
	for _, in := range []string{`\`, `a\x`, `\q`} {
		_, err := unescape(in)
		require.Error(t, err, in)
	}
}

// produceFlags parses args (a topic, then flags) as produce does.
func produceFlags(t *testing.T, args ...string) (produceSpec, error) {
	t.Helper()
	var o produceOptions
	fs := pflag.NewFlagSet("produce", pflag.ContinueOnError)
	o.register(fs)
	require.NoError(t, fs.Parse(args[1:]))
	return o.spec(args[0], fs)
}

func TestCLIProduceFlags(t *testing.T) {
	t.Parallel()
	s, err := produceFlags(t, "orders")
	require.NoError(t, err)
	require.Nil(t, s.values, "no --value: read stdin")
	require.Nil(t, s.key)
	require.Nil(t, s.keySep)
	require.Equal(t, "\n", string(s.delim))
	require.Equal(t, int32(-1), s.partition)
	require.Equal(t, 2*time.Minute, s.timeout)

	s, err = produceFlags(t, "orders", "--value", "a,b", "--value", "", "--key", "k", "--header", "x=1", "--header", "y=a=b", "--partition", "0")
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("a,b"), {}}, s.values)
	require.Equal(t, "k", string(s.key))
	require.Equal(t, []client.Header{{Key: "x", Value: []byte("1")}, {Key: "y", Value: []byte("a=b")}}, s.headers)
	require.Equal(t, int32(0), s.partition)
	r := s.record(s.key, s.values[0])
	require.Equal(t, &client.Record{Topic: "orders", Key: []byte("k"), Value: []byte("a,b"), Headers: s.headers}, r)

	s, err = produceFlags(t, "orders", "--key-separator", `\t`, "--delimiter", `\0`)
	require.NoError(t, err)
	require.Equal(t, "\t", string(s.keySep))
	require.Equal(t, "\x00", string(s.delim))
	rec, err := s.lineRecord(line{data: []byte("k1\tv\t1"), size: 6})
	require.NoError(t, err)
	require.Equal(t, "k1", string(rec.Key))
	require.Equal(t, "v\t1", string(rec.Value))
	_, err = s.lineRecord(line{data: []byte("no separator"), size: 12})
	require.ErrorContains(t, err, `no key separator "\t"`)
	s.limit = 1 << 20
	_, err = s.lineRecord(line{size: 1<<20 + 1})
	require.ErrorIs(t, err, client.ErrRecordTooLarge)
	require.ErrorContains(t, err, `a line of 1048577 bytes; topic "orders" takes records up to its max.message.bytes, 1048576`)

	usage := map[string][]string{
		"topic name must not be empty":             {""},
		`acks "2": choose all, 1 or 0`:             {"t", "--acks", "2"},
		`--header "nokey": want key=value`:         {"t", "--header", "nokey"},
		`--header "=v": want key=value`:            {"t", "--header", "=v"},
		"cannot be used with --value (use --key)":  {"t", "--value", "v", "--key-separator", ":"},
		"--delimiter splits stdin":                 {"t", "--value", "v", "--delimiter", ";"},
		"give either --key":                        {"t", "--key", "k", "--key-separator", ":"},
		"--delimiter must not be empty":            {"t", "--delimiter", ""},
		"--key-separator must not be empty":        {"t", "--key-separator", ""},
		`--key-separator: unknown escape \x`:       {"t", "--key-separator", `\x`},
		"--partition must not be negative; got -1": {"t", "--partition", "-1"},
	}
	for want, args := range usage {
		_, err := produceFlags(t, args...)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%v", args)
		require.ErrorContains(t, err, want)
	}
}

func TestCLIProduceReportOrder(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	w := bufio.NewWriter(&out)
	rep := &produceReport{out: w, prog: startProgress(&errOut, "produced", false), results: map[int]produceResult{}, next: 1}
	// Partitions acknowledge out of input order; lines come in input order.
	rep.done(2, &client.Record{Partition: 1, Offset: 0}, nil)
	require.Empty(t, out.String())
	rep.done(3, nil, &client.DeliveryError{Err: client.ErrDeliveryTimeout, Indefinite: true})
	rep.done(1, &client.Record{Partition: 0, Offset: 7}, nil)
	rep.done(4, nil, errors.New("bad"))
	rep.done(5, &client.Record{Partition: 0, Offset: 8}, nil)
	require.Equal(t, "partition=0 offset=7\npartition=1 offset=0\npartition=0 offset=8\n", out.String())
	require.Equal(t, "record 3: delivery timeout; the record may or may not have been written\nrecord 4: bad; the record was not written\n", errOut.String())
	acked, failed := rep.finish()
	require.Equal(t, 3, acked)
	require.Equal(t, 2, failed)

	out.Reset()
	rep = &produceReport{out: w, json: true, prog: startProgress(io.Discard, "produced", false), results: map[int]produceResult{}, next: 1}
	rep.done(1, &client.Record{Partition: 2, Offset: 5}, nil)
	var got map[string]int
	require.NoError(t, json.Unmarshal(out.Bytes(), &got))
	require.Equal(t, map[string]int{"partition": 2, "offset": 5}, got)
}

func TestCLIConsumeOffset(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"earliest":                     "earliest",
		"latest":                       "latest",
		"0":                            "0",
		"42":                           "42",
		"@1700000000000":               "@" + time.UnixMilli(1700000000000).Format(time.RFC3339Nano),
		"@2025-01-31T12:00:00Z":        "@2025-01-31T12:00:00Z",
		"@2025-01-31T12:00:00.5+01:00": "@2025-01-31T12:00:00.5+01:00",
	} {
		o, err := parseOffset(in)
		require.NoError(t, err, in)
		require.Equal(t, want, o.String(), in)
	}
	for _, in := range []string{"", "first", "-1", "1.5", "@", "@yesterday", "@2025-01-31"} {
		_, err := parseOffset(in)
		var ue usageError
		require.ErrorAs(t, err, &ue, in)
	}
}

func TestCLIConsumeFormat(t *testing.T) {
	t.Parallel()
	r := &client.Record{
		Topic: "orders", Partition: 3, Offset: 42, Key: []byte("k"), Value: []byte("v"),
		Timestamp: time.Date(2025, 1, 31, 12, 0, 0, 500_000_000, time.FixedZone("x", 3600)),
		Headers:   []client.Header{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("x=y")}},
	}
	tests := []struct{ format, want string }{
		{"%v\n", "v\n"},
		{`%v\n`, "v\n"},
		{`%p:%o %k=%v\n`, "3:42 k=v\n"},
		{`%t\t%h`, "2025-01-31T11:00:00.5Z\ta=1,b=x=y"},
		{`100%% %v\\`, `100% v\`},
		{"plain", "plain"},
		{`\0`, "\x00"},
	}
	for _, tc := range tests {
		parts, err := parseFormat(tc.format)
		require.NoError(t, err, tc.format)
		var b bytes.Buffer
		w := bufio.NewWriter(&b)
		writeFormatted(w, parts, r)
		require.NoError(t, w.Flush())
		require.Equal(t, tc.want, b.String(), tc.format)
	}
	// A null key prints nothing.
	parts, err := parseFormat("[%k]")
	require.NoError(t, err)
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	writeFormatted(w, parts, &client.Record{})
	require.NoError(t, w.Flush())
	require.Equal(t, "[]", b.String())

	for _, f := range []string{"%x", "%", `\`, `\q`, "%v%"} {
		_, err := parseFormat(f)
		var ue usageError
		require.ErrorAs(t, err, &ue, f)
	}
}

func TestCLIConsumeJSON(t *testing.T) {
	t.Parallel()
	r := &client.Record{
		Topic: "orders", Partition: 1, Offset: 9, Key: nil, Value: []byte{0xff, 0xfe},
		Timestamp: time.UnixMilli(1700000000123),
		Headers:   []client.Header{{Key: "a", Value: []byte("é")}, {Key: "n", Value: nil}, {Key: "b", Value: []byte{0x80}}},
	}
	b, err := json.Marshal(toJSONRecord(r))
	require.NoError(t, err)
	require.JSONEq(t, `{"topic":"orders","partition":1,"offset":9,"timestamp":"2023-11-14T22:13:20.123Z",
		"key":null,"value":"//4=","valueBase64":true,
		"headers":[{"key":"a","value":"é"},{"key":"n","value":null},{"key":"b","value":"gA==","valueBase64":true}]}`, string(b))

	b, err = json.Marshal(toJSONRecord(&client.Record{Key: []byte("k"), Value: []byte{}}))
	require.NoError(t, err)
	require.Contains(t, string(b), `"key":"k","value":"","headers":[]`)
}
