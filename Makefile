.DEFAULT_GOAL := test
GO ?= go
PKGS := ./...
BIN := bin/failoverd

.PHONY: build deps test test-short lint fuzz bench chaos demo clean tidy-check

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

test: deps lint
	@echo ">> running unit and integration tests (real ZooKeeper, real sshd)"
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

test-short: lint
	@echo ">> running unit tests only"
	$(GO) test -short -count=1 $(PKGS)

fuzz:
	@echo ">> fuzzing parsers"
	$(GO) test -run '^$$' -fuzz FuzzBreadcrumb -fuzztime 30s ./breadcrumb

bench: deps
	@echo ">> benchmarks (real ZooKeeper, loopback)"
	BENCH_JSON=$(CURDIR)/bench-results.json $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 90m ./test/bench/

demo:
	@GO="$(GO)" bash examples/demo/demo.sh

tidy-check:
	$(GO) mod tidy && git diff --exit-code go.mod go.sum

clean:
	rm -rf bin
