package api

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestValidateTopicName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"a", true},
		{"Orders.v1_2-x", true},
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{"", false},
		{".", false},
		{"..", false},
		{"...", true},
		{"__consumer_offsets", false},
		{"_private", true},
		{"a b", false},
		{"a/b", false},
		{"ü", false},
		{"a\x00", false},
	} {
		err := ValidateTopicName(tt.name)
		if tt.ok {
			require.NoError(t, err, "%q", tt.name)
		} else {
			require.Error(t, err, "%q", tt.name)
			var fe *fieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, "name", fe.Field)
		}
	}
}

func TestValidateTenantName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"acme", true},
		{"acme-2", true},
		{"ab", false},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 64), false},
		{"2acme", false},
		{"Acme", false},
		{"acme-", false},
		{"ac_me", false},
	} {
		err := ValidateTenantName(tt.name)
		require.Equal(t, tt.ok, err == nil, "%q: %v", tt.name, err)
	}
}

func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	local64 := strings.Repeat("a", 64)
	label63 := strings.Repeat("b", 63)
	// 64 + 1 + 63 + 1 + 63 + 1 + 61 = 254 characters.
	longest := local64 + "@" + label63 + "." + label63 + "." + strings.Repeat("c", 57) + ".com"
	require.Len(t, longest, 254)
	for _, tc := range []struct {
		in, want string
		why      string // part of the error; empty when valid
	}{
		{in: "Alice@Example.COM", want: "alice@example.com"},
		{in: "a@example.com", want: "a@example.com"},
		{in: "first.last+tag@mail.example.co.uk", want: "first.last+tag@mail.example.co.uk"},
		{in: "o'brien_x-y!#$%&*/=?^`{|}~@example.com", want: "o'brien_x-y!#$%&*/=?^`{|}~@example.com"},
		{in: "a@xn--bcher-kva.example", want: "a@xn--bcher-kva.example"},
		{in: "a@ex-ample.com", want: "a@ex-ample.com"},
		{in: "a@1example.com", want: "a@1example.com"},
		{in: "a@example.c0m", want: "a@example.c0m"},
		{in: local64 + "@example.com", want: local64 + "@example.com"},
		{in: "a@" + label63 + ".com", want: "a@" + label63 + ".com"},
		{in: longest, want: longest},

		{in: "", why: "must not be empty"},
		{in: "alice", why: "no '@'"},
		{in: "alice@", why: "nothing after the '@'"},
		{in: "@example.com", why: "nothing before the '@'"},
		{in: "a@b@example.com", why: "more than one '@'"},
		{in: "Alice <alice@example.com>", why: "not allowed before the '@'"},
		{in: `"a b"@example.com`, why: "not allowed before the '@'"},
		{in: "a(comment)@example.com", why: "not allowed before the '@'"},
		{in: ".a@example.com", why: "starts with '.'"},
		{in: "a.@example.com", why: "ends with '.'"},
		{in: "a..b@example.com", why: "empty part between dots"},
		{in: "a b@example.com", why: "not allowed before the '@'"},
		{in: "ä@example.com", why: "not allowed before the '@'"},
		{in: local64 + "a@example.com", why: "the maximum is 64"},
		{in: longest[:len(longest)-4] + "x.com", why: "the maximum is 254"},
		{in: "a@[127.0.0.1]", why: "IP address literals"},
		{in: "a@[IPv6:::1]", why: "IP address literals"},
		{in: "a@127.0.0.1", why: "all digits"},
		{in: "a@example.123", why: "all digits"},
		{in: "a@localhost", why: "at least two labels"},
		{in: "a@exa_mple.com", why: `character '_' is not allowed in the domain`},
		{in: "a@-example.com", why: "starts or ends with '-'"},
		{in: "a@example-.com", why: "starts or ends with '-'"},
		{in: "a@example.-com", why: "starts or ends with '-'"},
		{in: "a@example..com", why: "empty label"},
		{in: "a@.example.com", why: "empty label"},
		{in: "a@example.com.", why: "empty label"},
		{in: "a@" + label63 + "b.com", why: "longer than 63"},
		{in: "a@exämple.com", why: "not allowed in the domain"},
		{in: "a@example.com\n", why: "not allowed in the domain"},
		{in: "a@exa mple.com", why: "not allowed in the domain"},
	} {
		got, err := NormalizeEmail(tc.in)
		if tc.why == "" {
			require.NoError(t, err, "%q", tc.in)
			require.Equal(t, tc.want, got, "%q", tc.in)
			continue
		}
		require.Error(t, err, "%q", tc.in)
		require.ErrorContains(t, err, "email: ", "%q: the message names the field", tc.in)
		require.ErrorContains(t, err, tc.why, "%q", tc.in)
	}
}

func TestValidateLabel(t *testing.T) {
	t.Parallel()
	require.NoError(t, ValidateLabel("name", "ci key ✓"))
	require.Error(t, ValidateLabel("name", ""))
	require.Error(t, ValidateLabel("name", strings.Repeat("x", 65)))
	require.Error(t, ValidateLabel("name", "tab\there"))
	require.Error(t, ValidateLabel("name", "\xff"))
}

func TestValidateAddress(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"127.0.0.1:9092", "broker-0.sluice:9092", "[::1]:9092", "https://broker-0.sluice:9092", "http://b:1"} {
		require.NoError(t, validateAddress("address", ok), "%q", ok)
	}
	for _, bad := range []string{"", "host", ":9092", "host:", "host:0", "host:70000", "host:http", "tcp://host:9092", "https://host:9092/path"} {
		var fe *fieldError
		require.ErrorAs(t, validateAddress("address", bad), &fe, "%q", bad)
		require.Equal(t, "address", fe.Field)
	}
}

func TestFmtDelay(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Second: "1s", 45 * time.Second: "45s", 10 * time.Minute: "10m", 9*time.Minute + 58*time.Second: "9m58s",
		time.Hour: "1h", 90 * time.Minute: "1h30m", time.Hour + 5*time.Second: "1h0m5s",
	} {
		require.Equal(t, want, fmtDelay(d), "%v", d)
	}
}
