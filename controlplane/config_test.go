package controlplane

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConfigRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:secret@db:5432/sluice":           "postgres://u:xxxxx@db:5432/sluice",
		"postgres://u:p%40ss@h/db":                     "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=hunter2&sslmode=x": "postgres://u@h/db?password=xxxxx&sslmode=x",
		"postgres://u@h/db?sslpassword=hunter2":        "postgres://u@h/db?sslpassword=xxxxx",
		"sqlite:/tmp/x.db":                             "sqlite:/tmp/x.db",
	} {
		got := redact(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "secret")
		require.NotContains(t, got, "hunter2")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig()
	ok.DatabaseURL = "sqlite:/tmp/x.db"
	require.NoError(t, ok.Validate())
	off := ok
	off.MetricsAddr = "" // no operator listener
	require.NoError(t, off.Validate())
	for _, tt := range []struct {
		mutate func(*Config)
		msg    string
	}{
		{func(c *Config) { c.DatabaseURL = "" }, "--database-url is required"},
		{func(c *Config) { c.MetricsAddr = "9643" }, "--metrics-addr must be host:port"},
		{func(c *Config) { c.DatabaseURL = "mysql://x" }, "--database-url must start with"},
		{func(c *Config) { c.TokenTTL = 1 }, "--token-ttl"},
		{func(c *Config) { c.KeyRotation = c.TokenTTL / 2 }, "--key-rotation"},
		{func(c *Config) { c.OperatorToken = "short" }, "--operator-token"},
		{func(c *Config) { c.BrokerToken = "short" }, "--broker-token"},
		{func(c *Config) { c.BrokerLease = 0 }, "--broker-lease"},
		{func(c *Config) { c.DefaultReplicationFactor = 0 }, "--default-replication-factor"},
		{func(c *Config) { c.MaxRequestBytes = 10 }, "--max-request-bytes"},
		{func(c *Config) { c.Issuer = "" }, "--issuer"},
		{func(c *Config) { c.Controller.LeaseTTL = 100 * time.Millisecond }, "--controller-lease"},
		{func(c *Config) { c.Controller.Interval = 2 * time.Second }, "controller interval"},
		{func(c *Config) { c.Controller.PreferredLeaderDelay = -time.Second }, "--preferred-leader-delay"},
		{func(c *Config) { c.ClientLimits.Signup.Burst = -1 }, "--signup-limit"},
		{func(c *Config) { c.ClientLimits.TrustedProxies = []string{"lb.internal"} }, "--trusted-proxies"},
	} {
		c := ok
		tt.mutate(&c)
		require.ErrorContains(t, c.Validate(), tt.msg)
	}
}
