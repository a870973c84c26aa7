// Package e2e holds end-to-end tests that build the real sluice binary and
// run it as separate processes on loopback ports, the way a user would.
//
// Every test belongs to a family, named by its prefix, so that one family
// runs with `go test -run '^TestTiered' ./e2e/`:
//
//	TestCluster…  replication, leader election, faults (kill, pause, cut links)
//	TestSDK…      the Go SDK against faults
//	TestGroup…    consumer groups and their coordinator
//	TestTxn…      transactions and their coordinator
//	TestTiered…   tiered storage against a real S3 server
//	TestQuota…    quotas, count limits, metering, request memory
//	TestAlerts…   lag and retention-expiry alerts
//	TestKafka…    Kafka clients (franz-go, kcat, sarama, kafka-go, kafkajs) against the Kafka listener
//	TestCLI…      the sluice command line against a cluster or sluice dev
//	TestDev…      sluice dev and make dev
//	TestBench…    benchmarks run only on request (make scale)
//
// Each test starts its own cluster (its own Postgres database, data dirs
// and ports, from internal/testenv and internal/testcluster) and calls
// t.Parallel. Three run at once (TestMain's testenv.DefaultParallel: most
// of a test's time is waiting on its processes), or N with
// `go test -parallel N`. Two kinds
// do not: the measurements whose result is the machine's idle latency or
// memory (TestQuotaNoisyNeighbour, TestQuotaRequestMemoryBounded, run by
// make test without the race detector, one after the other), and
// TestBenchScale. Go runs those before any parallel test starts.
//
// Under `go test -race` with SLUICE_E2E_RACE=1 (make test-e2e-race, make
// soak) the fault families (TestCluster…, TestSDK…, TestGroup…, TestTxn…,
// TestTiered… but for the volume test TestTieredHotTailAndColdReadBack)
// start a sluice binary built with the race detector, and a data race any
// of its processes reports fails the test; otherwise every test starts a
// race-free build (sluiceBin and plainBin in cli_test.go say why), with
// GOMAXPROCS=1 unless the environment sets it (TestMain says why).
package e2e
