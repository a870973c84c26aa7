package cli

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
)

// usageDimensions are the metered dimensions, in the API's order. A
// dimension's name, in --dimension, --price and --free, CSV and help, is
// the API's (the enum's name without USAGE_DIMENSION_, in lower case: the
// store's, the billing events' and the docs' too); old is the CLI's name
// before, still read; column is the table's header.
var usageDimensions = []struct {
	old    string // the CLI's name before issue 30, still read
	column string // table header
	dim    sluicev1.UsageDimension
	base   string // the API's base unit
}{
	{"ingress", "INGRESS", sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, "bytes"},
	{"egress", "EGRESS", sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES, "bytes"},
	{"requests", "REQUESTS", sluicev1.UsageDimension_USAGE_DIMENSION_REQUESTS, "requests"},
	{"hot-storage", "HOT STORAGE", sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, "byte-seconds"},
	{"cold-storage", "COLD STORAGE", sluicev1.UsageDimension_USAGE_DIMENSION_COLD_STORAGE_BYTE_SECONDS, "byte-seconds"},
	{"partitions", "PARTITIONS", sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS, "partition-seconds"},
}

// dimensionNames lists the dimensions' names, for help and errors.
func dimensionNames() []string {
	out := make([]string, len(usageDimensions))
	for i, d := range usageDimensions {
		out[i] = dimensionName(d.dim)
	}
	return out
}

// parseDimension reads a dimension by its name ("hot_storage_byte_seconds"),
// its enum's name ("USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS") or the
// CLI's old name ("hot-storage"), in any case.
func parseDimension(s string) (sluicev1.UsageDimension, error) {
	for _, d := range usageDimensions {
		if strings.EqualFold(s, dimensionName(d.dim)) || strings.EqualFold(s, d.old) || strings.EqualFold(s, d.dim.String()) {
			return d.dim, nil
		}
	}
	return 0, fmt.Errorf("dimension %q: choose %s", s, strings.Join(dimensionNames(), ", "))
}

// dimensionName is a dimension's name: its enum's without the prefix, in
// lower case ("ingress_bytes").
func dimensionName(d sluicev1.UsageDimension) string {
	return strings.ToLower(strings.TrimPrefix(d.String(), "USAGE_DIMENSION_"))
}

// fmtBytes writes a byte count for people, in binary units: "0 B",
// "512 B", "1.50 KiB", "12.3 MiB", "2.00 GiB", "1.25 TiB".
func fmtBytes(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	neg := n < 0
	if neg {
		n = -n
	}
	for n >= 1024 && i < len(units)-1 {
		n /= 1024
		i++
	}
	var s string
	switch {
	case i == 0:
		s = fmt.Sprintf("%.0f B", n)
	case n < 10:
		s = fmt.Sprintf("%.2f %s", n, units[i])
	case n < 100:
		s = fmt.Sprintf("%.1f %s", n, units[i])
	default:
		s = fmt.Sprintf("%.0f %s", n, units[i])
	}
	if neg {
		s = "-" + s
	}
	return s
}

// fmtDecimal writes x with up to prec decimals, trailing zeros dropped:
// 2.50 → "2.5", 3.000 → "3".
func fmtDecimal(x float64, prec int) string {
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}

// fmtAmount writes an amount of a dimension, in base units, for people:
// bytes in binary units, byte-seconds as byte-hours ("1.50 GiB-hours"),
// partition-seconds as partition-hours, requests as they are.
func fmtAmount(d sluicev1.UsageDimension, n int64) string {
	switch d {
	case sluicev1.UsageDimension_USAGE_DIMENSION_INGRESS_BYTES, sluicev1.UsageDimension_USAGE_DIMENSION_EGRESS_BYTES:
		return fmtBytes(float64(n))
	case sluicev1.UsageDimension_USAGE_DIMENSION_HOT_STORAGE_BYTE_SECONDS, sluicev1.UsageDimension_USAGE_DIMENSION_COLD_STORAGE_BYTE_SECONDS:
		return fmtBytes(float64(n)/3600) + "-hours"
	case sluicev1.UsageDimension_USAGE_DIMENSION_PARTITION_SECONDS:
		return fmtDecimal(float64(n)/3600, 2) + " partition-hours"
	}
	return strconv.FormatInt(n, 10)
}

// currencyDigits is how many minor-unit digits a currency has (ISO 4217):
// 2 unless listed.
var currencyDigits = map[string]int{"JPY": 0, "KRW": 0, "VND": 0, "CLP": 0, "ISK": 0, "UGX": 0, "BHD": 3, "KWD": 3, "OMR": 3, "JOD": 3, "TND": 3}

func minorDigits(currency string) int {
	if d, ok := currencyDigits[strings.ToUpper(currency)]; ok {
		return d
	}
	return 2
}

// fmtMinor writes minor units as a decimal of the currency: 1234 USD
// cents → "12.34"; exact (integers only).
func fmtMinor(minor int64, currency string) string {
	return fmtScaled(minor, minorDigits(currency))
}

// fmtScaled writes n / 10^digits exactly, with all digits: (1234, 2) →
// "12.34", (-5, 2) → "-0.05".
func fmtScaled(n int64, digits int) string {
	if digits == 0 {
		return strconv.FormatInt(n, 10)
	}
	neg := n < 0
	s := strconv.FormatInt(n, 10)
	if neg {
		s = s[1:]
	}
	for len(s) <= digits {
		s = "0" + s
	}
	s = s[:len(s)-digits] + "." + s[len(s)-digits:]
	if neg {
		s = "-" + s
	}
	return s
}

// fmtMoney writes Money for people: "12.34 USD".
func fmtMoney(m *sluicev1.Money) string {
	if m == nil {
		return "-"
	}
	return fmtMinor(m.GetMinorUnits(), m.GetCurrencyCode()) + " " + m.GetCurrencyCode()
}

// fmtMicros writes millionths of a currency as a decimal without trailing
// zeros: 23000 → "0.023", 1500000 → "1.5".
func fmtMicros(micros int64) string {
	s := fmtScaled(micros, 6)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// parseMicros reads a decimal amount of a currency ("0.023", "1.5", "2")
// as millionths, exactly (no float): more than 6 decimals, a sign or
// anything but digits and one point is refused.
func parseMicros(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || strings.Trim(whole+frac, "0123456789") != "" || len(frac) > 6 {
		return 0, fmt.Errorf("%q is not an amount of at most 6 decimals, such as 0.023", s)
	}
	frac += strings.Repeat("0", 6-len(frac))
	n, err := strconv.ParseInt(cmpOr(whole, "0")+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// fmtUnits writes base units as billing units of unitSize each, exactly
// when it can and with at most 6 decimals otherwise: (1610612736, 2^30) →
// "1.5".
func fmtUnits(base, unitSize int64) string {
	if unitSize <= 0 {
		return strconv.FormatInt(base, 10)
	}
	r := new(big.Rat).SetFrac64(base, unitSize)
	s := r.FloatString(6)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// parseUnits reads a quantity in billing units ("10", "0.5") as base
// units of unitSize each, rounded down to a whole base unit.
func parseUnits(s string, unitSize int64) (int64, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok || r.Sign() < 0 || strings.ContainsAny(s, "/eE") {
		return 0, fmt.Errorf("%q is not a quantity such as 10 or 0.5", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(max(unitSize, 1)))
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return q.Int64(), nil
}

// parseBytes reads a byte count: an integer, or one with a binary suffix
// (KiB, MiB, GiB, TiB, PiB; K, M, G, T, P and KB … mean the same).
func parseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
suffixes:
	for i, p := range []string{"K", "M", "G", "T", "P"} {
		for _, suf := range []string{p + "IB", p + "B", p} {
			if rest, ok := strings.CutSuffix(t, suf); ok {
				t, mult = rest, 1<<(10*(i+1))
				break suffixes
			}
		}
	}
	if mult == 1 {
		t = strings.TrimSuffix(t, "B")
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte count such as 1073741824, 512MiB or 10GiB", s)
	}
	if n > 0 && mult > (1<<63-1)/n {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return n * mult, nil
}

// bytesValue is a flag holding a byte count (parseBytes).
type bytesValue struct{ n *int64 }

func (b bytesValue) String() string {
	if b.n == nil {
		return "0"
	}
	return strconv.FormatInt(*b.n, 10)
}

func (b bytesValue) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.n = n
	return nil
}

func (bytesValue) Type() string { return "bytes" }
