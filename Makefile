# Build and test entry points. CI runs `bash .ci/run`, which installs and
# starts ZooKeeper and then calls `make build test`.

GO       ?= go
BUILD    ?= build
# staticcheck at a pinned version, with its default checks; `go run`
# fetches it through the module proxy on first use.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# Fuzz budgets are counts of executions, not durations: with a duration,
# Go 1.26's fuzz coordinator can fail a target with "context deadline
# exceeded" at the deadline while a worker is still busy (golang/go#75804).
# FUZZEXECS is the default; FUZZ_EXECS_SLOW sets it for targets whose every
# execution opens a store on disk, or checks a whole data structure (about
# ten seconds of fuzzing each here).
# Minimising a new input is bounded by a count too (-fuzzminimizetime).
FUZZEXECS ?= 100000
FUZZ_EXECS_SLOW ?= ./broker/store:FuzzRecovery=3000 ./broker/store:FuzzSpanList=20000
# Fuzz targets as <package>:<FuzzName>. A target whose package does not
# define it (yet) is skipped, so this list may name targets that are still
# being written.
FUZZ_TARGETS ?= \
	./broker/wire:FuzzDecode \
	./broker/store:FuzzDecodeRecord \
	./broker/store:FuzzRecovery \
	./broker/config:FuzzParse \
	./broker/config:FuzzParseCron \
	./broker/config:FuzzSlave

.PHONY: all build test unit testrace vet lint fmt fuzz integ bench tidy clean soak

all: build test

## build: every command under cmd/ into $(BUILD)/
build:
	@mkdir -p $(BUILD)
	$(GO) build -o $(BUILD)/ ./cmd/...

## test: format, vet and lint checks, the whole suite with -race against a real
## ZooKeeper (started here when METAQ_TEST_ZK is unset), then short fuzz runs.
test:
	@set -e; \
	bash .ci/deps.sh; \
	if [ -z "$$METAQ_TEST_ZK" ]; then \
		zkdir=$$(mktemp -d); \
		port=$$(bash .ci/freeport.sh); \
		trap 'bash .ci/zookeeper.sh stop "$$zkdir"; rm -rf "$$zkdir"' EXIT; \
		trap 'exit 1' INT TERM HUP PIPE; \
		METAQ_TEST_ZK=$$(bash .ci/zookeeper.sh start "$$port" "$$zkdir"); \
		export METAQ_TEST_ZK; \
		echo "started ZooKeeper at $$METAQ_TEST_ZK"; \
	fi; \
	$(MAKE) --no-print-directory fmt vet lint testrace fuzz

## soak: seeded fault schedules (internal/faultsched) against three metaq-server
## processes, one after the other, until interrupted or for SOAK_DURATION (a Go
## duration, e.g. 20m; empty runs until Ctrl-C), each SOAK_SCHEDULE_SECONDS
## long; the report (schedules, faults by kind, puts by outcome, violations by
## kind, convergence percentiles) is printed and written to SOAK_REPORT, and
## the files of failing runs are kept under SOAK_DIR.
SOAK_SCHEDULE_SECONDS ?= 30
SOAK_REPORT ?= soak-report.txt
SOAK_DIR ?= soak-runs
soak:
	@bash .ci/deps.sh
	SOAK_DURATION=$(SOAK_DURATION) SOAK_SCHEDULE_SECONDS=$(SOAK_SCHEDULE_SECONDS) \
		$(GO) run ./cmd/metaq-soak -dir $(SOAK_DIR) -report $(SOAK_REPORT) $(SOAK_FLAGS)

## fmt: fail when a file is not gofmt'ed
fmt:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './build/*')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

## lint: staticcheck's default checks over every package, tests included
lint:
	$(GO) run $(STATICCHECK) ./...

## unit: the suite without -race (integration tests skip without METAQ_TEST_ZK)
unit:
	$(GO) test -count=1 ./...

testrace:
	$(GO) test -race -count=1 -timeout 20m ./...

## fuzz: FUZZEXECS executions per target, listed above or found in the tree (so a new
## target needs no edit here), that exists
fuzz:
	@set -e; \
	found=$$(grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' . 2>/dev/null | while read -r f; do \
		for n in $$(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$$f" | cut -d' ' -f2); do \
			d=$$(dirname "$$f"); echo "./$${d#./}:$$n"; done; done); \
	for t in $$(printf '%s\n' $(FUZZ_TARGETS) $$found | sort -u); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		if [ ! -d "$$pkg" ]; then echo "fuzz: skip $$t (no package)"; continue; fi; \
		if ! $(GO) test -list "^$$name\$$" "$$pkg" 2>/dev/null | grep -qx "$$name"; then \
			echo "fuzz: skip $$t (not defined)"; continue; fi; \
		n=$(FUZZEXECS); \
		for slow in $(FUZZ_EXECS_SLOW); do \
			if [ "$${slow%%=*}" = "$$t" ]; then n=$${slow##*=}; fi; done; \
		echo "fuzz: $$t for $$n executions"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime "$${n}x" -fuzzminimizetime 2000x "$$pkg"; \
	done

## integ: only the tests that need ZooKeeper, against a fresh one
integ:
	@set -e; zkdir=$$(mktemp -d); port=$$(bash .ci/freeport.sh); \
	trap 'bash .ci/zookeeper.sh stop "$$zkdir"; rm -rf "$$zkdir"' EXIT; \
	trap 'exit 1' INT TERM HUP PIPE; \
	METAQ_TEST_ZK=$$(bash .ci/zookeeper.sh start "$$port" "$$zkdir") \
		$(GO) test -race -count=1 ./broker/registry/... ./cmd/...

bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

## tidy: fails when go.mod or go.sum would change
tidy:
	@cp go.mod go.mod.orig; cp go.sum go.sum.orig; \
	$(GO) mod tidy; rc=0; \
	cmp -s go.mod go.mod.orig && cmp -s go.sum go.sum.orig || rc=1; \
	mv go.mod.orig go.mod; mv go.sum.orig go.sum; \
	if [ $$rc != 0 ]; then echo "go.mod/go.sum are not tidy"; exit 1; fi

clean:
	rm -rf $(BUILD)
