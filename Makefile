# Sluice — run `make help` for the targets.
SHELL := /bin/bash
BIN := $(CURDIR)/bin
export PATH := $(BIN):$(PATH)

BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
STATICCHECK_VERSION := v0.8.2
# The S3 server for tests (internal/testenv.S3); keep equal to testenv.VersitygwVersion.
VERSITYGW_VERSION := v1.8.0
VERSITYGW := $(BIN)/versitygw-$(VERSITYGW_VERSION)
export SLUICE_TEST_VERSITYGW ?= $(VERSITYGW)
# grpcurl for the e2e discovery test (internal/testenv.Grpcurl); keep equal to testenv.GrpcurlVersion.
GRPCURL_VERSION := v1.9.4
GRPCURL := $(BIN)/grpcurl-$(GRPCURL_VERSION)
export SLUICE_TEST_GRPCURL ?= $(GRPCURL)
# helm for the chart tests (infra/helm); keep equal to infra/helm's HelmVersion.
HELM_VERSION := v4.3.2
HELM := $(BIN)/helm-$(HELM_VERSION)
export SLUICE_TEST_HELM ?= $(HELM)

GO_TEST_FLAGS ?= -race -count=1 -timeout 25m
# The packages whose tests take longest are named first in make test, so
# that go (which starts package runs in command-line order, two at a time
# here: one per core) starts them first and the short ones fill in around
# them. Three at a time (-p 3) kept the cores busier but overloaded the
# client package's in-process cluster: its brokers' heartbeats queued
# behind the SQLite store's one writer until their leases lapsed. That was
# before heartbeats went first in the store's write queue (sqlstore's
# SingleWriter); -p 3 was not tried again, as e2e now runs three tests at
# a time itself and the run is bound by CPU.
TEST_PARALLEL_PACKAGES ?= 2
SLOW_PACKAGES := ./e2e/ ./client/ ./dataplane/broker/ ./controlplane/

.PHONY: help build generate check-generate lint test test-e2e-race test-busy soak dev bench scale tools

help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# The version `sluice version` prints; the Dockerfile runs the same build line with its VERSION
# build argument (infra/compose's TestDockerfile checks that they agree).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
build: ## Build the static sluice binary into bin/sluice, stamped with VERSION (default: git describe).
	CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/sluicemq/sluice/cmd/sluice/cli.version=$(VERSION)" -o $(BIN)/sluice ./cmd/sluice

$(BIN)/buf:
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-connect-go:
	GOBIN=$(BIN) go install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
$(BIN)/staticcheck:
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
# Named by version so that a bump rebuilds it; the first build takes a few minutes.
$(VERSITYGW):
	rm -rf $(BIN)/.versitygw && GOBIN=$(BIN)/.versitygw go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv $(BIN)/.versitygw/versitygw $@ && rmdir $(BIN)/.versitygw
$(GRPCURL):
	rm -rf $(BIN)/.grpcurl && GOBIN=$(BIN)/.grpcurl go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	mv $(BIN)/.grpcurl/grpcurl $@ && rmdir $(BIN)/.grpcurl
$(HELM):
	rm -rf $(BIN)/.helm && GOBIN=$(BIN)/.helm go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
	mv $(BIN)/.helm/helm $@ && rmdir $(BIN)/.helm

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go $(BIN)/staticcheck ## Install the pinned code generators and linters into bin/.

generate: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-connect-go ## Regenerate gen/ from proto/ with the pinned tools.
	buf generate

check-generate: generate ## Fail when gen/ differs from what proto/ generates.
	git diff --exit-code -- gen/
	@test -z "$$(git status --porcelain -- gen/)" || { git status --porcelain -- gen/; exit 1; }

lint: $(BIN)/buf $(BIN)/staticcheck ## gofmt, go vet, staticcheck, buf lint, the dependency rules between packages (internal/layering) and the rules for tests (internal/testrules: no sleep as synchronisation).
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	go vet ./...
	staticcheck ./...
	buf lint
	go test -count=1 -run 'TestLayering' ./internal/layering/
	go test -count=1 ./internal/testrules/

# The tests' files (logs, data dirs, object-store folders) go to a fresh
# directory on a RAM file system when TEST_TMPFS is one with
# TEST_TMPFS_MIN_MB free (make test peaks near 400 MB), else to $TMPDIR;
# go's own build files stay in $TMPDIR (GOTMPDIR). Every fsync of a virtual
# disk costs a VM exit: the dataplane/broker tests alone took 92 CPU-s on
# tmpfs instead of 107, and make test 11:21 instead of 12:13, idle, warm
# build cache (with the parallel tests of dataplane/kafka, partition and
# controlplane). A crash test kills processes, not the machine, so it
# proves the same there. The directory is removed when every test passed;
# after a failure it is kept (with the clusters failed e2e tests keep) and
# named. TEST_TMPFS= turns it off.
TEST_TMPFS ?= /dev/shm
TEST_TMPFS_MIN_MB ?= 4096
TEST_TIMING_RUN := '^(TestCooperativeRebalance.*|TestQuotaNoisyNeighbour|TestQuotaRequestMemoryBounded)$$'

test: $(VERSITYGW) $(GRPCURL) $(HELM) ## Run every test (race detector on), then the timing tests that need a race-free build. Starts a throwaway Postgres (installing it when missing); builds the versitygw S3 server, grpcurl and helm for tests into bin/. Test files go to a RAM file system when there is one with room (TEST_TMPFS).
	@tmp=; \
	if [ -n "$(TEST_TMPFS)" ] && [ -d "$(TEST_TMPFS)" ] && [ -w "$(TEST_TMPFS)" ] && \
	   [ "$$(df -Pm "$(TEST_TMPFS)" | awk 'NR==2 {print $$4}')" -ge $(TEST_TMPFS_MIN_MB) ] && \
	   [ "$$(stat -f -c %T "$(TEST_TMPFS)")" = tmpfs ] && \
	   tmp=$$(mktemp -d "$(TEST_TMPFS)/sluice-test.XXXXXX"); then \
		trap 'rm -rf "$$tmp"; exit 130' INT TERM; \
		export GOTMPDIR="$${GOTMPDIR:-$${TMPDIR:-/tmp}}" TMPDIR="$$tmp"; \
		echo "test files in $$tmp (tmpfs; TEST_TMPFS= turns this off)"; \
	fi; \
	status=0; \
	echo go test $(GO_TEST_FLAGS) -p $(TEST_PARALLEL_PACKAGES) $(SLOW_PACKAGES) ./...; \
	go test $(GO_TEST_FLAGS) -p $(TEST_PARALLEL_PACKAGES) $(SLOW_PACKAGES) ./... || status=$$?; \
	if [ $$status -eq 0 ]; then \
		echo go test -count=1 -run $(TEST_TIMING_RUN) ./client/ ./e2e/; \
		go test -count=1 -run $(TEST_TIMING_RUN) ./client/ ./e2e/ || status=$$?; \
	fi; \
	if [ -n "$$tmp" ] && [ $$status -eq 0 ]; then rm -rf "$$tmp"; \
	elif [ -n "$$tmp" ]; then echo "test files kept in $$tmp (what failed tests kept; a RAM file system: remove it when done)"; fi; \
	exit $$status

test-e2e-race: $(VERSITYGW) ## Run the e2e fault families (TestCluster, TestSDK, TestGroup, TestTxn, TestTiered) against sluice binaries built with the race detector: a data race in any process they start fails the test (make test runs them race-free; e2e/doc.go says why).
	SLUICE_E2E_RACE=1 go test $(GO_TEST_FLAGS) -run '^Test(Cluster|SDK|Group|Txn|Tiered)' ./e2e/

BUSY_RUNS ?= 3
test-busy: $(VERSITYGW) $(GRPCURL) ## Run make test BUSY_RUNS times (default 3) with every core kept busy by stress-ng (or yes), to catch tests that pass only on an idle machine.
	@n=$$(nproc); if command -v stress-ng >/dev/null; then stress-ng --cpu $$n --quiet & else for i in $$(seq $$n); do yes >/dev/null & done; fi; \
	trap 'kill $$(jobs -p) 2>/dev/null' EXIT; \
	for i in $$(seq $(BUSY_RUNS)); do echo "== make test with $$n busy cores: run $$i of $(BUSY_RUNS)"; $(MAKE) test || exit 1; done

soak: ## Longer fault runs: the log crash test with 300 kills, then the cluster fault scenarios and the SDK whole-cluster crash loop (5 seeds, 4 s and 20 s delivery timeouts) at soak size, 3 times, against race-detector builds of sluice.
	SLUICE_SOAK=1 go test -count=1 -timeout 60m -run 'TestLogCrash' ./dataplane/log/
	SLUICE_SOAK=1 SLUICE_E2E_RACE=1 go test -race -count=3 -timeout 90m -run 'TestCluster|TestSDKWholeClusterCrashLoop' ./e2e/

# Built, then run with exec (not go run, which exits 1 whenever it is
# interrupted, whatever the program did): on Ctrl-C sluice dev stops cleanly
# and exits 0, so make reports no error.
dev: ## Run Sluice locally in one process (data in ./.sluice); flags in ARGS, e.g. make dev ARGS='--listen-addr 127.0.0.1:8081'.
	go build -o $(BIN)/sluice ./cmd/sluice
	exec $(BIN)/sluice dev $(ARGS)

bench: ## Run the Go benchmarks (log append vs raw writes, placement, store, a lag round, a 3-broker produce benchmark).
	go test -run='^$$' -bench=. -benchmem ./...

SLUICE_SCALE_SIZES ?= 3,30,300,1500
scale: ## Partition-density benchmark (issue 15): per size in SLUICE_SCALE_SIZES (default 3,30,300,1500; 3000 and 6000 take many minutes each) a fresh 3-broker cluster, time to lead after create, idle CPU/RSS/goroutines/fds, produce over N partitions, failover and rejoin; prints a table.
	SLUICE_SCALE=1 SLUICE_SCALE_SIZES=$(SLUICE_SCALE_SIZES) go test -count=1 -timeout 240m -run '^TestBenchScale$$' -v ./e2e/
