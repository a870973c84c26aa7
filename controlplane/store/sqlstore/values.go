package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ScanTime reads a timestamp column into *dst, whichever way the engine
// stores it (a time on Postgres, unix milliseconds on SQLite), in UTC; NULL
// reads as the zero time.
func ScanTime(dst *time.Time) sql.Scanner { return timeScanner{dst} }

type timeScanner struct{ dst *time.Time }

func (s timeScanner) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*s.dst = time.Time{}
	case time.Time:
		*s.dst = v.UTC()
	case int64:
		*s.dst = time.UnixMilli(v).UTC()
	default:
		return fmt.Errorf("scan time: unsupported %T", src)
	}
	return nil
}

// ScanInt32s reads a list column encoded by Dialect.Int32s into *dst; the
// empty list reads as nil.
func ScanInt32s(dst *[]int32) sql.Scanner { return int32sScanner{dst} }

type int32sScanner struct{ dst *[]int32 }

// Scan parses "[1,2]" (JSON, SQLite) or "{1,2}" (a Postgres array in text,
// as database/sql receives it from pgx) in place, without decoding through
// strings: partition reads scan two lists a row.
func (s int32sScanner) Scan(src any) error {
	var raw string
	switch v := src.(type) {
	case string:
		raw = v
	case []byte:
		raw = string(v)
	default:
		return fmt.Errorf("scan list: unsupported %T", src)
	}
	v, err := parseInt32s(raw)
	if err != nil {
		return fmt.Errorf("decode list %q: %w", raw, err)
	}
	*s.dst = v
	return nil
}

func parseInt32s(raw string) ([]int32, error) {
	raw = strings.TrimSpace(raw)
	if len(raw) < 2 || !(raw[0] == '[' && raw[len(raw)-1] == ']' || raw[0] == '{' && raw[len(raw)-1] == '}') {
		return nil, fmt.Errorf("not a list")
	}
	body := raw[1 : len(raw)-1]
	if strings.TrimSpace(body) == "" {
		return nil, nil
	}
	out := make([]int32, 0, strings.Count(body, ",")+1)
	for len(body) > 0 {
		e, rest, _ := strings.Cut(body, ",")
		n, err := strconv.ParseInt(strings.TrimSpace(e), 10, 32)
		if err != nil {
			return nil, err
		}
		out = append(out, int32(n))
		body = rest
	}
	return out, nil
}

// ScanStrings reads a list column encoded by Dialect.Strings into *dst; the
// empty list reads as nil.
func ScanStrings(dst *[]string) sql.Scanner {
	return listScanner{func(elems []string, isJSON bool, raw []byte) error {
		if isJSON {
			var v []string
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			*dst = nilIfEmpty(v)
			return nil
		}
		*dst = elems
		return nil
	}}
}

func nilIfEmpty[T any](v []T) []T {
	if len(v) == 0 {
		return nil
	}
	return v
}

// listScanner reads a JSON list (SQLite) or a Postgres array in its text
// form ("{1,2}", `{a,"b c"}`: database/sql receives arrays as text from pgx).
type listScanner struct {
	set func(elems []string, isJSON bool, raw []byte) error
}

func (s listScanner) Scan(src any) error {
	var raw []byte
	switch v := src.(type) {
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		return fmt.Errorf("scan list: unsupported %T", src)
	}
	if len(raw) > 0 && raw[0] == '[' {
		if err := s.set(nil, true, raw); err != nil {
			return fmt.Errorf("decode list %q: %w", raw, err)
		}
		return nil
	}
	elems, err := parseArray(string(raw))
	if err == nil {
		err = s.set(elems, false, nil)
	}
	if err != nil {
		return fmt.Errorf("decode list %q: %w", raw, err)
	}
	return nil
}

// parseArray parses a one-dimensional Postgres array in text form; "{}" is
// nil. Elements are unquoted or double-quoted with backslash escapes; an
// unquoted NULL is refused (the store's lists hold no NULLs).
func parseArray(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("not an array")
	}
	body := s[1 : len(s)-1]
	if body == "" {
		return nil, nil
	}
	var (
		out []string
		b   strings.Builder
	)
	for i := 0; i <= len(body); {
		b.Reset()
		if i < len(body) && body[i] == '"' {
			i++
			for ; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' && i+1 < len(body) {
					i++
				}
				b.WriteByte(body[i])
			}
			if i >= len(body) {
				return nil, fmt.Errorf("unterminated quote")
			}
			i++ // closing quote
		} else {
			j := strings.IndexByte(body[i:], ',')
			if j < 0 {
				j = len(body) - i
			}
			e := body[i : i+j]
			if e == "NULL" {
				return nil, fmt.Errorf("NULL element")
			}
			if strings.ContainsAny(e, "{}") {
				return nil, fmt.Errorf("nested array")
			}
			b.WriteString(e)
			i += j
		}
		out = append(out, b.String())
		if i == len(body) {
			break
		}
		if body[i] != ',' {
			return nil, fmt.Errorf("expected ',' at %d", i)
		}
		i++
	}
	return out, nil
}
