package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// printJSON writes an API response as -o json shows every one (see
// docs/cli.md): protojson, as buf curl and grpcurl print it, with its
// lowerCamelCase field names, enums by their names (ALERT_STATE_FIRING),
// durations as "90s", timestamps in RFC 3339 UTC and 64-bit integers as
// strings; every field, set or not; indented by two spaces. protojson
// varies its whitespace on purpose (a space more or less after a colon,
// from build to build), so the output is indented again by encoding/json,
// which is stable: no double spaces, the same bytes for the same response.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// table writes tab-aligned rows under a header.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// kv writes "key: value" lines, aligned.
func kv(w io.Writer, pairs ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	for i := 0; i+1 < len(pairs); i += 2 {
		fmt.Fprintf(tw, "%s:\t%s\n", pairs[i], pairs[i+1])
	}
	return tw.Flush()
}

func fmtInts(xs []int32) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

// plural writes n and a noun, singular for exactly one: "1 record",
// "0 records", "2 records". Nouns are regular (noun + "s").
func plural[N int | int64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
