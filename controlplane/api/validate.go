package api

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicemq/sluice/internal/endpoint"
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

// Email address limits (RFC 5321 §4.5.3.1: a local part of at most 64
// octets; a path of at most 256 octets, that is an address of at most 254
// between its angle brackets).
const (
	MaxEmailLen      = 254
	MaxEmailLocalLen = 64
	maxDomainLabel   = 63
)

// NormalizeEmail checks that s is a plain Internet mail address and returns
// it lowercased. Stricter than RFC 5322 on purpose: the local part is a
// dot-atom (RFC 5322 §3.2.3: atoms of letters, digits and
// !#$%&'*+-/=?^_`{|}~ joined by single dots; no quoted strings, no
// comments); the domain is a host name of at least two LDH labels (letters,
// digits and '-', 1–63 characters, not starting or ending with '-'; an
// internationalised domain in its xn-- form) whose last label is not all
// digits; no IP literals ("a@[127.0.0.1]"), no display name, no trailing
// dot; at most 64 characters before the '@' and 254 in all. ASCII only.
func NormalizeEmail(s string) (string, error) {
	bad := func(why string) error { return invalid("email", "%q is not a valid email address: %s", s, why) }
	if s == "" {
		return "", invalid("email", "must not be empty")
	}
	if len(s) > MaxEmailLen {
		return "", invalid("email", "is %d characters long; the maximum is %d", len(s), MaxEmailLen)
	}
	local, domain, ok := strings.Cut(s, "@")
	switch {
	case !ok:
		return "", bad("no '@'")
	case strings.Contains(domain, "@"):
		return "", bad("more than one '@'")
	case local == "":
		return "", bad("nothing before the '@'")
	case len(local) > MaxEmailLocalLen:
		return "", bad(fmt.Sprintf("the part before the '@' is %d characters long; the maximum is %d", len(local), MaxEmailLocalLen))
	}
	if err := checkDotAtom(local); err != "" {
		return "", bad(err)
	}
	if err := checkMailDomain(domain); err != "" {
		return "", bad(err)
	}
	return strings.ToLower(s), nil
}

// checkDotAtom returns why local is not a dot-atom, or "".
func checkDotAtom(local string) string {
	for i, atom := range strings.Split(local, ".") {
		if atom == "" {
			if i == 0 {
				return "the part before the '@' starts with '.'"
			}
			return "the part before the '@' has an empty part between dots or ends with '.'"
		}
		for _, c := range []byte(atom) {
			if !isAtext(c) {
				return fmt.Sprintf("character %q is not allowed before the '@'", rune(c))
			}
		}
	}
	return ""
}

// isAtext reports whether c is an RFC 5322 atext character.
func isAtext(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

// checkMailDomain returns why domain is not a host name of two or more LDH
// labels with a TLD that is not all digits, or "".
func checkMailDomain(domain string) string {
	switch {
	case domain == "":
		return "nothing after the '@'"
	case strings.HasPrefix(domain, "["):
		return "IP address literals are not accepted; use a domain name"
	}
	labels := strings.Split(domain, ".")
	if len(labels) < 2 {
		return "the domain needs at least two labels (example.com)"
	}
	for _, l := range labels {
		switch {
		case l == "":
			return "the domain has an empty label (two dots in a row, or a leading or trailing dot)"
		case len(l) > maxDomainLabel:
			return fmt.Sprintf("domain label %q is longer than %d characters", l, maxDomainLabel)
		case l[0] == '-' || l[len(l)-1] == '-':
			return fmt.Sprintf("domain label %q starts or ends with '-'", l)
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Sprintf("character %q is not allowed in the domain (letters, digits and '-')", rune(c))
			}
		}
	}
	tld := labels[len(labels)-1]
	if strings.Trim(tld, "0123456789") == "" {
		return "the domain's last label is all digits (an IP address is not accepted)"
	}
	return ""
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

// validateAddress checks the address a broker advertises: host:port, or
// http(s)://host:port (internal/endpoint).
func validateAddress(field, s string) error {
	if err := endpoint.Validate(s); err != nil {
		return invalid(field, "%s", err)
	}
	return nil
}

// validateHostPort checks a host:port address (a Kafka listener's: no
// scheme) with a port in 1-65535.
func validateHostPort(field, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return invalid(field, "%q is not host:port: %v", s, err)
	}
	if host == "" {
		return invalid(field, "%q has no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return invalid(field, "%q: port must be 1-65535", s)
	}
	return nil
}
