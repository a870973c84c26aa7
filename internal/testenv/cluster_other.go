//go:build !unix

package testenv

import (
	"errors"
	"net/url"
)

// Throwaway clusters need a unix system; elsewhere only $SLUICE_TEST_DATABASE_URL works.

type pgBin struct{ dir, version string }

type localCluster struct {
	root, timing string
}

func (c *localCluster) url(string) *url.URL { return nil }

func (c *localCluster) stop() {}

func findOrInstallBinaries() (*pgBin, string, error) {
	return nil, "throwaway clusters from initdb/postgres are only supported on unix systems", nil
}

func startLocalCluster(*pgBin) (*localCluster, error) {
	return nil, errors.New("throwaway clusters are only supported on unix systems")
}
