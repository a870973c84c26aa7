package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Names and formats (docs/cli.md, "Names and formats"): one format per
// kind of value in what the CLI prints and reads.
//
//   - Times: RFC 3339 (2026-11-03T10:00:00Z, or with the local or --tz
//     offset in tables), as protojson writes them in -o json; a field
//     named *_ms is milliseconds.
//   - Durations: Go's duration syntax with whole days as "d" and the zero
//     units left out: 7d, 1d12h, 1h, 1m30s, 250ms (fmtDuration). Every
//     duration flag reads that and Go's own ("168h", "1h0m0s"): both are
//     the same value (parseDuration).
//   - JSON (-o json): lowerCamelCase keys, protojson's default, the JSON
//     mapping of the API that buf curl, grpcurl and connect-web print too.

// fmtTime writes a time for a table, in RFC 3339 at the machine's local
// offset, to the second; "-" for none.
func fmtTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format(time.RFC3339)
}

// fmtDuration writes d in the CLI's one duration format: Go's syntax with
// whole days as "d", zero units left out ("7d", "1d12h", "1h", "1m30s",
// "250ms", "0s").
func fmtDuration(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	days, rest := d/(24*time.Hour), d%(24*time.Hour)
	var b strings.Builder
	if days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		if rest == 0 {
			return b.String()
		}
	}
	s := rest.String() // "1h0m0s", "1m30s", "250ms"
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	b.WriteString(s)
	return b.String()
}

// parseDuration reads a duration in the CLI's format or Go's: "7d",
// "1d12h", "90m", "1h0m0s", "-24h".
func parseDuration(s string) (time.Duration, error) {
	in := s
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var days time.Duration
	if i := strings.Index(s, "d"); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("duration %q: want such as 90s, 24h, 7d or 1d12h", in)
		}
		days, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	var d time.Duration
	if s != "" || days == 0 {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < 0 {
			return 0, fmt.Errorf("duration %q: want such as 90s, 24h, 7d or 1d12h", in)
		}
	}
	if neg {
		return -(days + d), nil
	}
	return days + d, nil
}

// dayDuration is a duration flag's value that reads days too
// (parseDuration); it sets the flag's own value, so the variable and the
// default shown in help stay the flag's.
type dayDuration struct{ pflag.Value }

func (v dayDuration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	return v.Value.Set(d.String())
}

// acceptDays makes every duration flag of cmd and the commands below it
// read days too ("7d"), as every duration the CLI prints may have them.
func acceptDays(cmd *cobra.Command) {
	wrap := func(f *pflag.Flag) {
		if _, done := f.Value.(dayDuration); !done && f.Value.Type() == "duration" {
			f.Value = dayDuration{f.Value}
		}
	}
	cmd.Flags().VisitAll(wrap)
	cmd.PersistentFlags().VisitAll(wrap)
	for _, c := range cmd.Commands() {
		acceptDays(c)
	}
}
