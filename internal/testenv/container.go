package testenv

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerImage is the PostgreSQL image started when only a Docker engine
// is available. Pinned so test runs are reproducible.
const containerImage = "postgres:16.6-alpine"

// startContainer runs PostgreSQL in a container with testcontainers-go
// (step 3 of the package doc) and returns the maintenance database's URL
// and a function that removes the container.
func startContainer() (*url.URL, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		// The same fast, non-durable settings as the throwaway cluster.
		testcontainers.WithCmd("postgres", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=300"),
	)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return nil, nil, fmt.Errorf("testenv: start PostgreSQL container %s: %w", containerImage, err)
	}
	raw, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, nil, fmt.Errorf("testenv: PostgreSQL container address: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return nil, nil, fmt.Errorf("testenv: PostgreSQL container address %q: %w", raw, err)
	}
	return u, func() { _ = testcontainers.TerminateContainer(c) }, nil
}
