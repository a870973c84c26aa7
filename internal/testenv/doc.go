// Package testenv gives tests a real PostgreSQL server and a real S3 server. It never mocks them.
//
// Each test binary that uses it must route its TestMain through [Main]:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and each test asks for its own fresh, empty database with [PostgresURL]:
//
//	url := testenv.PostgresURL(t) // postgres://... of a database dropped in t.Cleanup
//
// The server is found once per test binary, on first use, in this order (DESIGN.md §12):
//
//  1. $SLUICE_TEST_DATABASE_URL (a postgres:// URL whose user may CREATE DATABASE): every test gets
//     a new database sluice_test_<random> on that server.
//  2. A throwaway cluster from the machine's initdb/postgres binaries, looked up on $PATH, then in
//     /usr/lib/postgresql/*/bin and /usr/pgsql-*/bin (highest version first). When none is found
//     and the process runs as root, `apt-get install -y postgresql` is tried once. As root, initdb
//     and postgres run as the "postgres" OS user. The cluster listens on a free 127.0.0.1 port
//     (user postgres, trust authentication) with durability turned off (fsync, synchronous_commit,
//     full_page_writes) and lives in a temporary directory that [Main] removes: in /dev/shm when
//     that is a tmpfs with at least 1 GiB free (creating a data directory's ~1000 files on some
//     virtual disks takes a second), else in the temp dir. A freshly initialized data directory is
//     cached under $XDG_CACHE_HOME/sluice-testenv (or ~/.cache/sluice-testenv) and copied for later
//     binaries instead of running initdb again. The postgres process gets SIGKILL when the test
//     binary dies (Linux parent-death signal); directories and System V shared memory left by
//     killed binaries are swept by the next binary that starts a cluster.
//  3. When a Docker engine answers (`docker info`), a PostgreSQL container started with
//     testcontainers-go (image postgres:16.6-alpine, the same fast settings), removed by [Main].
//  4. Otherwise the test fails with a message saying how to provide PostgreSQL. It never skips.
//
// The throwaway cluster needs a unix system; its process supervision is Linux-specific.
//
// [S3] gives a test its own real S3-compatible server (versitygw, posix backend, on a free
// loopback port) with a fresh bucket; it needs no TestMain. Its binary comes from
// $SLUICE_TEST_VERSITYGW (set by `make test`, which builds bin/versitygw-<version> first), else
// from a build cached under $XDG_CACHE_HOME/sluice-testenv, made on first use.
//
// [Grpcurl] gives e2e tests a grpcurl binary, found the same way: $SLUICE_TEST_GRPCURL (set by
// `make test`, which builds bin/grpcurl-<version> first), else the cached build, made on first use.
package testenv
