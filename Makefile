# kinflow — the two commands that matter: `make run` and `make test`.

SHELL          := /bin/bash
GO             ?= go
TEMPORAL_CLI   := github.com/temporalio/cli/cmd/temporal@v1.5.1
# The Temporal server of the production topology and its SQL schema tool
# (v1.31 and later need a newer Go than go.mod's).
TEMPORAL_SERVER_VERSION := v1.30.4
STATICCHECK    := honnef.co/go/tools/cmd/staticcheck@v0.8.2
WORKFLOWCHECK  := go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0
GO_TEST_FLAGS  ?= -count=1 -timeout 45m
BENCH          ?= .
BENCHTIME      ?= 1s
STEPS_PY       := .venv-steps/bin/python
CLIENT_PY      := .venv-client/bin/python
ESMC_PY        := .venv-esmc/bin/python

.DEFAULT_GOAL := help

.PHONY: help build run test test-deps test-containers bench bench-load lint fmt fuzz clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_\/.-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

bin/temporal: ## build the Temporal CLI (dev server) from the Go module proxy, pinned
	@mkdir -p bin
	@GO=$(GO) bash scripts/go-install.sh "the Temporal CLI ($(TEMPORAL_CLI), the dev server of make run) into bin/" $(CURDIR)/bin $(TEMPORAL_CLI)

bin/temporal-server: ## build the Temporal server and its schema tool (bin/temporal-sql-tool) from the Go module proxy, pinned (docs/production.md)
	@mkdir -p bin/.temporal-server
	@GO=$(GO) bash scripts/go-install.sh "the Temporal server $(TEMPORAL_SERVER_VERSION) and its schema tool (for the production-topology tests) into bin/" $(CURDIR)/bin/.temporal-server go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VERSION) go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VERSION)
	mv bin/.temporal-server/sql bin/temporal-sql-tool
	mv bin/.temporal-server/server bin/temporal-server
	rmdir bin/.temporal-server

build: ## build bin/kinflow
	@[ -e bin/kinflow ] || echo "building bin/kinflow (first time: downloads and compiles its Go modules, a minute or two)…"
	$(GO) build -o bin/kinflow ./cmd/kinflow

run: bin/temporal build ## build and start everything on embedded defaults (Ctrl-C stops it all); ports on the make line: KINFLOW_API_LISTEN, KINFLOW_TEMPORAL_ADDRESS, KINFLOW_TEMPORAL_UI_PORT, KINFLOW_GPU_LISTEN
	@mkdir -p .data media
	exec ./bin/kinflow dev --temporal-cli bin/temporal --data-dir .data

test-deps: bin/temporal bin/temporal-server ## install and start what the tests need (Postgres, MMseqs2, Python numpy/torch/RDKit/Open Babel, the step venvs (PyPI torch), Chromium, the OpenAPI linter; the Temporal CLI and server into bin/)
	bash scripts/test-deps.sh

test: test-deps ## run every test, unit and integration, against real Temporal, Postgres, HTTP and files
	$(GO) vet ./...
	$(GO) test $(GO_TEST_FLAGS) ./...
	$(STEPS_PY) -m pytest steps -q -m 'not esmc'
	$(ESMC_PY) -m pytest steps -q -m esmc
	$(MAKE) build
	cd clients/python && ../../$(CLIENT_PY) -m pytest -q
	$(MAKE) test-containers

test-containers: ## build the images from local base images and run the README's first job through docker compose, then tear it down (scripts/container-deps.sh installs and starts the Docker engine, docker-compose and debootstrap; needs root)
	bash scripts/container-deps.sh || { [ "$${CI:-}" != true ] && echo "test-containers: no Docker engine here; the container test will skip"; }
	$(GO) test -tags containers -count=1 -timeout 60m -v -run '^TestComposeUpFirstJob$$' ./docker

bench: bin/temporal bin/temporal-server ## run the Go benchmarks (BenchmarkRealServerAhead: the GPU host sending ahead to the real step server on the CPU; BenchmarkPlanPresence300k: a plan against 300,000 cached files of one family, about 1.3 GB of temp disk) and the step server's CPU overlap benchmark (figures go to docs/BENCHMARKS.md)
	KINFLOW_BENCH_PRESENCE=1 $(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -benchtime $(BENCHTIME) ./...
	$(STEPS_PY) steps/bench.py --model esm2 --size tiny --esm2-step g --n 300 --min-len 20 --max-len 60 --toks-per-batch 1024 --set KINFLOW_STEPS_DEVICE=cpu --pipeline-compare

# make bench-load PROFILE=dir also profiles one more burst of each size
# (kinflow: Go pprof; the Temporal dev server: perf) into dir;
# LOAD_FLAGS narrows the run, e.g. LOAD_FLAGS='-workers 1 -bursts 200 -big 0'.
PROFILE        ?=
LOAD_FLAGS     ?=
bench-load: bin/temporal bin/temporal-server build ## many users at once: 3-row jobs one at a time, in bursts of 50 and 200 (each followed by as many no-op workflows of the same Temporal shape, and the requests per job where the two differ), and 1 and 100 of them submitted 5 s into a 10,000-row job, on kinflow dev with 1 and 2 CPU workers; one key's 150-row job behind another key's six, first come first served and fair by key, on kinflow dev and the production topology, and keys of weights 1 and 2 (jobs/s, p50/p99 latency, CPU ms per job of Temporal, kinflow and the synthetic step servers, Temporal persistence requests per job, kinflow's share in the kernel and new files per job, /status/ req/s); PROFILE=dir writes CPU profiles (docs/BENCHMARKS.md)
	$(GO) run ./tools/loadbench -kinflow bin/kinflow -temporal-cli bin/temporal -workers 1,2 -bursts 1,50,200 -big 10000 -fair 6 -floor $(if $(PROFILE),-profile $(PROFILE)) $(LOAD_FLAGS)
	$(GO) test ./internal/e2e -run '^$$' -bench FairShareOnProductionTopology -benchtime 1x -timeout 30m

lint: ## gofmt, citations (scripts/check-citations.sh), go vet, staticcheck, workflowcheck (determinism of workflow code); ruff (check + format) on steps/ (from .venv-steps); mypy --strict + ruff on clients/python
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	bash scripts/check-citations.sh
	$(GO) vet ./...
	$(GO) vet -tags containers ./docker
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(WORKFLOWCHECK) ./...
	bash scripts/steps-venv.sh
	.venv-steps/bin/ruff check steps
	.venv-steps/bin/ruff format --check steps
	bash scripts/client-venv.sh
	cd clients/python && ../../.venv-client/bin/mypy && ../../.venv-client/bin/ruff check . && ../../.venv-client/bin/ruff format --check .

fmt: ## format the Go code
	gofmt -w $$(git ls-files '*.go')

fuzz: ## run every fuzz target for FUZZTIME each (default 30s)
	bash scripts/fuzz.sh $${FUZZTIME:-30s}

clean: ## remove build outputs and the dev data (.data, media)
	rm -rf bin/kinflow .data media
