.DEFAULT_GOAL := test
GO ?= go
PKGS := ./...
BIN := bin/failoverd

.PHONY: build deps test test-short lint fuzz bench chaos mutants demo demo-redis demo-postgres clean tidy-check package etcd-probe

build:
	@echo ">> building $(BIN)"
	$(GO) build -o $(BIN) ./cmd/failoverd

deps:
	@./scripts/deps.sh

lint:
	@echo ">> checking formatting"
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	@echo ">> go vet"
	$(GO) vet $(PKGS)

# The two longest packages (test/e2e about 19 min, test/chaos about 11 min
# on 2 cores) are named first so that they start first: go test keeps the
# order (and drops the repeats of ./...), and the rest fills the other
# slot instead of queueing behind them at the end.
test: deps lint
	@echo ">> running unit and integration tests (real ZooKeeper, real sshd)"
	$(GO) test -race -count=1 -timeout 40m ./test/e2e/ ./test/chaos/ $(PKGS)

test-short: lint
	@echo ">> running unit tests only"
	$(GO) test -short -count=1 $(PKGS)

fuzz:
	@echo ">> fuzzing parsers"
	$(GO) test -run '^$$' -fuzz FuzzBreadcrumb -fuzztime 30s ./breadcrumb
	$(GO) test -run '^$$' -fuzz FuzzLoadConfig -fuzztime 30s ./config

bench: deps
	@echo ">> benchmarks (real ZooKeeper and etcd, loopback)"
	BENCH_JSON=$(CURDIR)/bench-results.json $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m ./test/bench/

# make bench-scale N=100: N failoverd clusters of 3 members each, run by one
# driver process (test/bench/scale: the real elector, lease, records and
# watches of each member, the controller replaced by a minimal loop)
# against a 3-server ZooKeeper ensemble and a 3-member etcd cluster it
# starts, the servers pinned to half the CPUs and the driver to the rest
# (PIN=0: not pinned). First, per backend, three real failoverd daemons
# idle on the same servers, the calibration the driver's load is compared
# with (CALIBRATE=0: left out). Then at each N, one phase after another:
# at rest (IDLE), net of a window without members: server CPU, requests,
# writes, watches, connections and memory; busy (BUSY=30s: every
# member's replication position moves every second); KILL=60s: the
# leaders of 1% of the clusters crashed every 30 s; MASS=1: 10% crashed
# at once (failover p50/p99); RESTART=all: the coordination-server
# restarts, one phase each, and their blast radius (the clusters whose
# leader lost its term): one follower server, the service's leader, then
# a rolling restart of all three (followers first), each stopped for
# RESTART_DOWN (default 5s) and waited for until the quorum serves;
# RESTART=follower,leader picks phases, RESTART=0 none;
# RESTART_SIGNAL=KILL stops with SIGKILL instead of SIGTERM. A phase set
# to 0 is left out. RAMP=30s starts the clusters spread over that time
# instead of all at once. N is a list (default 1,100); results in
# test/bench/results/scale-<date>.json. One backend at N=100:
# make bench-scale N=100 SCALE_BACKEND=etcd (about 6 minutes).
N ?= 1,100
SCALE_BACKEND ?= zookeeper,etcd
IDLE ?= 30s
BUSY ?= 30s
KILL ?= 60s
MASS ?= 1
RESTART ?= all
RESTART_SIGNAL ?= TERM
RESTART_DOWN ?= 5s
RAMP ?= 0
CALIBRATE ?= 1
PIN ?= 1
.PHONY: bench-scale
bench-scale: deps
	cd test/bench/scale && SCALE_CODE="$$(git rev-parse --short HEAD)$$(git diff --quiet HEAD -- ../../../cluster || echo ' with uncommitted changes in cluster/')" \
		SCALE_N=$(N) SCALE_BACKEND=$(SCALE_BACKEND) SCALE_IDLE=$(IDLE) SCALE_KILL=$(KILL) \
		SCALE_RESTART=$(RESTART) SCALE_RESTART_SIGNAL=$(RESTART_SIGNAL) SCALE_RESTART_DOWN=$(RESTART_DOWN) SCALE_RAMP=$(RAMP) \
		SCALE_BUSY=$(BUSY) SCALE_MASS=$(MASS) SCALE_CALIBRATE=$(CALIBRATE) SCALE_PIN=$(PIN) \
		$(GO) test -tags scale -run '^TestScale$$' -count=1 -v -timeout 60m .

# make etcd-probe TRIALS=20: how often etcd itself revokes a lease that is
# being renewed, when its leader is stopped past the TTL and continued
# (docs/safety.md, "The lease on etcd"; each server line, about 13 s a
# trial), and how often a follower that rejoins after a 4 s cut forces an
# election, with the longest leaderless window (docs/configuration.md,
# "Start etcd 3.4 with --pre-vote=true"; Debian's 3.4 without and with
# --pre-vote=true and the release line, about 12 s a trial, table at the
# end). PROBE=LeaderPauseLeaseLoss or PROBE=RejoinElection runs one.
TRIALS ?= 20
PROBE ?= LeaderPauseLeaseLoss|RejoinElection
etcd-probe: deps
	$(GO) test -run '^$$' -bench '$(PROBE)' -benchtime $(TRIALS)x -timeout 90m ./test/etcdtest/

demo:
	@GO="$(GO)" BACKEND="$(BACKEND)" bash examples/demo/demo.sh

# make demo-redis: a Redis primary and two replicas protected by failoverd
# (examples/redis); DEMO_KILL=daemon or redis for the other crashes;
# BACKEND=etcd runs it on a local etcd instead of ZooKeeper.
demo-redis:
	@GO="$(GO)" BACKEND="$(BACKEND)" bash examples/redis/demo.sh

# make demo-postgres: a PostgreSQL primary and two streaming standbys
# protected by failoverd (examples/postgresql); installs Debian's
# postgresql when missing; BACKEND=etcd runs it on a local etcd.
demo-postgres:
	@GO="$(GO)" BACKEND="$(BACKEND)" bash examples/postgresql/demo.sh

# make chaos DURATION=30m SEED=7: the long chaos schedule (test/chaos) on
# each backend CHAOS_BACKEND names (zookeeper, etcd, or both: the default,
# one after the other, each for DURATION), summary table at the end;
# artifacts (history, logs) in CHAOS_ARTIFACTS/<backend> or
# $TMPDIR/failoverd-chaos-<backend>-seed<SEED>-<time>. Without SEED a
# random one is drawn and printed.
DURATION ?= 30m
SEED ?=
CHAOS_BACKEND ?= both
CHAOS_TIMEOUT ?= 6h
chaos: deps
	@echo ">> chaos: long schedule, DURATION=$(DURATION) SEED=$(SEED) CHAOS_BACKEND=$(CHAOS_BACKEND)"
	CHAOS_BACKEND=$(CHAOS_BACKEND) CHAOS_DURATION=$(DURATION) CHAOS_SEED=$(SEED) $(GO) test -run '^TestChaosLong$$' -count=1 -v -timeout $(CHAOS_TIMEOUT) ./test/chaos/

# make mutants: builds deliberately broken copies of the daemon (skip fencing,
# skip the startup demote, a lease that never expires, a constant epoch, an
# unguarded breadcrumb write, promotion after a failed fence, a lease sized
# without the kill graces, max_lag or a pause ignored, any 2xx taken as an
# rpc fence, a graceful end that gives up its term or its renewals before
# its demote ended, a leader at rest that ignores its Expiry, a node that
# joins another cluster's election, a moved cluster's epoch floor dropped,
# no join check at a win, an election entry removed without its owner
# check or without the state file's lock; on etcd, unguarded breadcrumb
# and failover-request writes, a lease deadline counted from the answer,
# a first renewal timed from a late grant's answer, a serializable leader view, an unconfirmed
# renewal, a lease revoked while its term runs; with election.fence_first,
# a takeover after a fence that did not prove, a suspicion of a heartbeat
# that moves, a term removed without the heartbeat compare, a proof that
# outlives a refused removal; see test/mutants) and runs
# the tests chosen to catch each;
# fails unless every one is caught. MUTANTS=name,name runs a subset. Not
# part of make test.
MUTANTS ?=
mutants: deps
	@echo ">> mutants: broken builds the tests must catch"
	$(GO) run ./test/mutants -only "$(MUTANTS)"

# make package: dist/failoverd_VERSION_ARCH.deb with dpkg-deb (binary,
# systemd unit, /etc/failoverd/failoverd.yaml as a conffile, man page, bash
# completion; packaging/deb/build.sh). VERSION=... ARCH=arm64 to override.
package:
	@GO="$(GO)" ./packaging/deb/build.sh dist

tidy-check:
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

clean:
	rm -rf bin dist
