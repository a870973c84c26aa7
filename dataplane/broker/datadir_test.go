//go:build unix

package broker

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/dirlock"
	"github.com/sluicemq/sluice/tiered/objstore/folder"
)

// TestBrokerDataDirLock: a second broker on a data dir in use is refused
// with the holder's pid, before it touches anything there (not even the
// tier cache it would empty); once the first broker's Run returns, the dir
// is free again.
func TestBrokerDataDirLock(t *testing.T) {
	t.Parallel()
	tier, err := folder.New(t.TempDir())
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.ID = 1
	cfg.DataDir = filepath.Join(t.TempDir(), "broker")
	cfg.BrokerToken = "broker-token-0123456789"
	cfg.ControlPlane = "http://127.0.0.1:1" // nothing there: the lease loop retries until Run ends
	first, err := New(cfg, Deps{TierStore: tier})
	require.NoError(t, err)
	cached := filepath.Join(cfg.DataDir, ".tier-cache", "chunk")
	require.NoError(t, os.WriteFile(cached, []byte("x"), 0o644))

	refused := func() {
		t.Helper()
		other := cfg
		other.ID = 2
		_, err := New(other, Deps{TierStore: tier})
		var held *dirlock.HeldError
		require.True(t, errors.As(err, &held), "%v", err)
		require.Equal(t, os.Getpid(), held.PID)
		require.ErrorContains(t, err, "pid "+strconv.Itoa(os.Getpid()))
		require.ErrorContains(t, err, cfg.DataDir)
		require.FileExists(t, cached, "the refused broker left the data dir alone")
	}
	refused()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx, ln, nil) }()
	refused() // while it runs
	cancel()
	require.NoError(t, <-done)

	again, err := New(cfg, Deps{TierStore: tier})
	require.NoError(t, err, "free once Run returned")
	require.NoError(t, again.tier.Close())
	require.NoError(t, again.dirLock.Release())
}
