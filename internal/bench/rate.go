package bench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Rate is a target produce rate: records per second, or bytes (of record
// values) per second, which a record size turns into records. The zero
// Rate is saturated: as fast as the producers take records.
type Rate struct {
	Records float64 // records per second, when the rate was given so
	Bytes   float64 // bytes per second, when the rate was given so
	text    string  // as given to ParseRate
}

// Saturated reports whether r asks for no fixed rate.
func (r Rate) Saturated() bool { return r.Records == 0 && r.Bytes == 0 }

// RecordsPerSecond is r in records of size bytes per second; 0 when
// saturated.
func (r Rate) RecordsPerSecond(size int) float64 {
	if r.Bytes > 0 {
		return r.Bytes / float64(size)
	}
	return r.Records
}

// String writes r as it was given to ParseRate (with "/s"), else as
// ParseRate reads it: "10MiB/s", "100/s" or "0".
func (r Rate) String() string {
	switch {
	case r.text != "":
		return r.text
	case r.Bytes > 0:
		return formatBytes(r.Bytes) + "/s"
	case r.Records > 0:
		return strconv.FormatFloat(r.Records, 'f', -1, 64) + "/s"
	}
	return "0"
}

// units are the byte units ParseRate and ParseSize read (case-insensitive).
var units = []struct {
	name string
	n    float64
}{
	{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
	{"gb", 1e9}, {"mb", 1e6}, {"kb", 1e3}, {"b", 1},
}

// ParseRate reads a rate: "0" (saturated); records per second as a number,
// "1000" or "1000/s"; or bytes per second with a unit, "10MiB/s", "5MB/s",
// "512KiB/s" (KiB, MiB, GiB are powers of 1024; KB, MB, GB of 1000).
func ParseRate(s string) (Rate, error) {
	bad := func() (Rate, error) {
		return Rate{}, fmt.Errorf("rate %q: want records per second (1000 or 1000/s), bytes per second (10MiB/s, 5MB/s), or 0 for as fast as the producers go", s)
	}
	t := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), "/s")
	n, unit, err := splitNumber(t)
	if err != nil || n < 0 {
		return bad()
	}
	text := strings.TrimSuffix(strings.TrimSpace(s), "/s") + "/s"
	if n == 0 {
		text = "0"
	}
	if unit == "" {
		return Rate{Records: n, text: text}, nil
	}
	for _, u := range units {
		if unit == u.name {
			return Rate{Bytes: n * u.n, text: text}, nil
		}
	}
	return bad()
}

// ParseRates reads a comma-separated list of rates.
func ParseRates(s string) ([]Rate, error) {
	var rs []Rate
	for _, f := range strings.Split(s, ",") {
		r, err := ParseRate(f)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// ParseSize reads a byte count: "1024", "1KiB", "64KB".
func ParseSize(s string) (int, error) {
	bad := func() (int, error) {
		return 0, fmt.Errorf("size %q: want bytes (1024) or a number with a unit: B, KiB, MiB, KB, MB", s)
	}
	n, unit, err := splitNumber(strings.ToLower(strings.TrimSpace(s)))
	if err != nil || n < 0 {
		return bad()
	}
	mult := 1.0
	if unit != "" {
		mult = 0
		for _, u := range units {
			if unit == u.name {
				mult = u.n
			}
		}
		if mult == 0 {
			return bad()
		}
	}
	v := n * mult
	if v != math.Trunc(v) || v > math.MaxInt32 {
		return bad()
	}
	return int(v), nil
}

// splitNumber splits "10.5mib" into 10.5 and "mib".
func splitNumber(s string) (float64, string, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(s)
	}
	n, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, "", fmt.Errorf("no number in %q", s)
	}
	return n, strings.TrimSpace(s[i:]), nil
}

// formatBytes writes n with the largest binary unit that keeps it ≥ 1.
func formatBytes(n float64) string {
	for _, u := range units {
		if strings.HasSuffix(u.name, "ib") && n >= u.n {
			return strconv.FormatFloat(n/u.n, 'g', 4, 64) + strings.ToUpper(u.name[:1]) + "iB"
		}
	}
	return strconv.FormatFloat(n, 'g', 4, 64) + "B"
}
