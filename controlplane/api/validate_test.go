package api

import (
	"strings"
	"testing"

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
	got, err := NormalizeEmail("Alice@Example.COM")
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", got)
	for _, bad := range []string{"", "alice", "alice@", "@example.com", "Alice <alice@example.com>", "alice@localhost", strings.Repeat("a", 250) + "@example.com"} {
		_, err := NormalizeEmail(bad)
		require.Error(t, err, "%q", bad)
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

func TestValidateHostPort(t *testing.T) {
	t.Parallel()
	require.NoError(t, validateHostPort("address", "127.0.0.1:9092"))
	require.NoError(t, validateHostPort("address", "broker-0.sluice:9092"))
	require.NoError(t, validateHostPort("address", "[::1]:9092"))
	for _, bad := range []string{"", "host", ":9092", "host:", "host:0", "host:70000", "host:http"} {
		require.Error(t, validateHostPort("address", bad), "%q", bad)
	}
}
