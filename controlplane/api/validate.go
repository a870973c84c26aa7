package api

import (
	"fmt"
	"net"
	"net/mail"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// fieldError is a request field that failed validation. It becomes
// InvalidArgument with a message naming the field.
type fieldError struct {
	Field string
	Msg   string
}

func (e *fieldError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &fieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// MaxTopicNameLen is Kafka's limit (249), which keeps partition directory
// names under common 255-byte file name limits.
const MaxTopicNameLen = 249

// ValidateTopicName applies Kafka's topic name rules: 1–249 characters of
// [a-zA-Z0-9._-], not "." or "..". Names starting "__" are reserved for
// internal topics.
func ValidateTopicName(name string) error {
	switch {
	case name == "":
		return invalid("name", "must not be empty")
	case len(name) > MaxTopicNameLen:
		return invalid("name", "is %d characters long; the maximum is %d", len(name), MaxTopicNameLen)
	case name == "." || name == "..":
		return invalid("name", "%q is not allowed", name)
	case strings.HasPrefix(name, "__"):
		return invalid("name", "names starting with \"__\" are reserved for internal topics")
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return invalid("name", "character %q at position %d is not allowed; use letters, digits, '.', '_' and '-'", r, i)
		}
	}
	return nil
}

// ValidateTenantName: 3–63 characters of [a-z0-9-], starting with a letter,
// not ending with '-' (DNS-label-like, so it can appear in hostnames later).
func ValidateTenantName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return invalid("tenant_name", "must be 3–63 characters long, got %d", utf8.RuneCountInString(name))
	}
	if name[0] < 'a' || name[0] > 'z' {
		return invalid("tenant_name", "must start with a lowercase letter")
	}
	if name[len(name)-1] == '-' {
		return invalid("tenant_name", "must not end with '-'")
	}
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return invalid("tenant_name", "character %q at position %d is not allowed; use lowercase letters, digits and '-'", r, i)
		}
	}
	return nil
}

// NormalizeEmail checks that s is a bare email address (no display name)
// and returns it lowercased.
func NormalizeEmail(s string) (string, error) {
	if s == "" {
		return "", invalid("email", "must not be empty")
	}
	if len(s) > 254 {
		return "", invalid("email", "is longer than 254 characters")
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return "", invalid("email", "%q is not a valid email address", s)
	}
	local, domain, _ := strings.Cut(s, "@")
	if local == "" || !strings.Contains(domain, ".") {
		return "", invalid("email", "%q is not a valid email address", s)
	}
	return strings.ToLower(s), nil
}

// ValidateLabel checks a free-text name such as an API key's: 1–64
// printable characters.
func ValidateLabel(field, s string) error {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	if utf8.RuneCountInString(s) > 64 {
		return invalid(field, "is longer than 64 characters")
	}
	if !utf8.ValidString(s) {
		return invalid(field, "is not valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return invalid(field, "contains the non-printable character %q", r)
		}
	}
	return nil
}

// validateHostPort checks a "host:port" address a broker advertises.
func validateHostPort(field, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return invalid(field, "%q is not host:port", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return invalid(field, "port %q is not a number between 1 and 65535", port)
	}
	return nil
}
