package flagenv

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func TestFlagenvPrecedence(t *testing.T) {
	t.Setenv("SLUICE_LISTEN_ADDR", "127.0.0.1:1")
	t.Setenv("SLUICE_TOKEN_TTL", "2m")
	t.Setenv("SLUICE_ISSUER", "from-env")

	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	addr := fs.String("listen-addr", "def", "where to listen")
	ttl := fs.Duration("token-ttl", time.Minute, "ttl")
	iss := fs.String("issuer", "def", "issuer")
	other := fs.String("other", "def", "untouched")
	Annotate(fs, "SLUICE")
	require.NoError(t, fs.Parse([]string{"--issuer", "from-flag"}))
	require.NoError(t, Apply(fs, "SLUICE"))

	require.Equal(t, "127.0.0.1:1", *addr)
	require.Equal(t, 2*time.Minute, *ttl)
	require.Equal(t, "from-flag", *iss, "command line wins over the environment")
	require.Equal(t, "def", *other)
	require.Contains(t, fs.Lookup("listen-addr").Usage, "[$SLUICE_LISTEN_ADDR]")
}

func TestFlagenvInvalidValue(t *testing.T) {
	t.Setenv("SLUICE_TOKEN_TTL", "soon")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.Duration("token-ttl", time.Minute, "ttl")
	require.NoError(t, fs.Parse(nil))
	err := Apply(fs, "SLUICE")
	require.ErrorContains(t, err, "$SLUICE_TOKEN_TTL")
	require.ErrorContains(t, err, "--token-ttl")
}

func TestFlagenvExclude(t *testing.T) {
	t.Setenv("SLUICE_VALUE", "from-env")
	t.Setenv("SLUICE_ACKS", "1")
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	value := fs.String("value", "def", "a record")
	acks := fs.String("acks", "all", "acks")
	Exclude(fs, "value")
	Annotate(fs, "SLUICE")
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, Apply(fs, "SLUICE"))
	require.Equal(t, "def", *value, "an excluded flag reads no variable")
	require.NotContains(t, fs.Lookup("value").Usage, "$SLUICE_VALUE")
	require.Equal(t, "1", *acks)
	require.Equal(t, []string{"--acks ($SLUICE_ACKS)"}, FromEnvironment(fs))
	require.True(t, Excluded(fs.Lookup("value")))
	require.False(t, Excluded(fs.Lookup("acks")))
}
