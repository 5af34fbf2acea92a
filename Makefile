# One way to run everything; .ci/run calls `make test`.
#
#   make test            build (or reuse) the control plane, venv, chromium, unit + e2e tests
#   make test-unit       unit tests only (no cluster)
#   make test-flakes     the unit suite RUNS=20 times in random order on busy CPUs (1-5 min a run)
#   make cluster-up      a local control plane in the background (make cluster-down)
#   make -s cluster-kubeconfig   path of its admin kubeconfig
#   make -s cluster-extender-port   port where its kube-scheduler calls the extender
#   make demo            fifo vs gpuroster on the local control plane, live (~6 min)
#   make bench           the seven scenarios in the simulator + plan-time scaling table
#   make bench-full      fast vs full mode (CP-SAT) vs an upper bound on value
#   make bench-slo       service level vs value: 100 wrong-forecast instances, the seven, 40 day-earlier (~1 min)
#   make bench-steps     fifo, priority-easy, gpuroster at 60, 30 and 15-minute steps (~30 s)
#   make bench-traffic   production-shaped traffic and wrong forecasts against priority-easy (~8 min)
#   make bench-cluster   the seven scenarios replayed on the local control plane
#   make bench-peers     the same under fifo, the stock scheduler, Kueue (two ways) and gpuroster
#   make lint            ruff, mypy --strict, the words check, import contracts, helm lint, hadolint
#   make results         rewrite the published simulator tables from their commands (~8 min)
#   make bench-extender  extender verbs' p50/p99 over loopback, 1,000 nodes, 3 runs (worst judged)
#   make load / soak     loopback load on the extender; 5-minute soak with memory check
#   make bench-scale     5,000 pods over 512 fake GPU nodes through the real scheduler
#   make bench-round     one controller round (snapshot, plan, commit) without I/O
#   make bench-replicas  one service's set for one step, by GPUs per replica (64 and 512 nodes)
#   make audit           pip-audit of the installed dependencies
#   make manifests       re-render deploy/manifests/gpuroster.yaml from the chart

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
GPUROSTER := $(VENV)/bin/gpuroster
PYTEST := $(PY) -m pytest
# Every e2e test shares one cluster; a hung test must not hang CI.
E2E_TIMEOUT ?= 900

.PHONY: help manifests results venv cluster-bin cluster-up cluster-down cluster-kubeconfig cluster-extender-port \
        cluster-status browser test test-unit test-flakes test-e2e lint demo bench bench-slo bench-steps bench-traffic bench-cluster \
        bench-peers

help:
	@sed -n 's/^#   //p' Makefile

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok,
# helm: pinned, built from Go modules into ~/.cache/gpuroster (reused when there)
# by the package's build script (extender/localcluster/build-control-plane.sh).
cluster-bin: venv
	$(GPUROSTER) cluster build >/dev/null

# e.g. make cluster-up CLUSTER_ARGS="--nodes 8 --gpus-per-node 8 --extender-port 8888"
# GPUs as DRA devices (a fake DRA driver's ResourceSlices, docs/dra.md): CLUSTER_ARGS="--gpus dra"
CLUSTER_ARGS ?=
cluster-up: venv cluster-bin
	$(GPUROSTER) cluster up $(CLUSTER_ARGS)

cluster-down:
	$(GPUROSTER) cluster down

cluster-kubeconfig:
	@$(GPUROSTER) cluster kubeconfig

cluster-extender-port:
	@$(GPUROSTER) cluster extender-port

cluster-status:
	@$(GPUROSTER) cluster status

test-unit: venv
	$(PYTEST) -m 'not e2e' tests

# The flake hunt (docs/testing.md): the unit suite RUNS times, each shuffled with a seed
# of its own, beside BURN CPU-burning processes; lists every test that failed with its
# seeds and writes the result into RECORD (empty: nowhere). Not part of `make test`.
RUNS ?= 20
BURN ?= 2
BUCKET ?= module
RECORD ?= docs/testing.md
test-flakes: venv
	$(PY) bench/flakehunt.py --runs $(RUNS) --burn $(BURN) --bucket $(BUCKET) \
		$(if $(RECORD),--record $(RECORD))

test-e2e: venv cluster-bin browser
	run=$$(date +%s)-$$$$; rc=0; \
	GPUROSTER_RUN_ID=$$run $(PYTEST) -m e2e --timeout=$(E2E_TIMEOUT) --durations=10 e2e || rc=$$?; \
	$(GPUROSTER) cluster leftovers --run-id $$run || rc=1; \
	exit $$rc

# Debian's chromium for the plan page's browser test, installed with apt-get when missing.
browser:
	bash e2e/chromium.sh

# Everything; fails on any failure, after running all of it.
test: venv cluster-bin browser
	run=$$(date +%s)-$$$$; rc=0; \
	( $(LINT) ) || rc=$$?; \
	$(PYTEST) -m 'not e2e' tests || rc=$$?; \
	GPUROSTER_RUN_ID=$$run $(PYTEST) -m e2e --timeout=$(E2E_TIMEOUT) --durations=10 e2e || rc=$$?; \
	$(GPUROSTER) cluster leftovers --run-id $$run || rc=1; \
	exit $$rc

# --- quality gates -------------------------------------------------------------
HELM = $$($(GPUROSTER) cluster bin-dir)/helm

LINT = $(PY) -m ruff check extender tests e2e bench tools \
	&& $(PY) -m mypy extender tests e2e bench tools \
	&& $(PY) tools/check_words.py && $(VENV)/bin/lint-imports && $(HELM) lint --strict helm/gpuroster \
	&& $(VENV)/bin/hadolint Containerfile

lint: venv cluster-bin
	$(LINT)

# Every simulator table in README.md and docs/benchmarks.md, rewritten between its
# markers by the command that measures it (tools/results.py; tests/test_results.py
# fails when one differs). `make results RESULTS="seven steps"` for some of them.
RESULTS ?=
results: venv
	$(PY) tools/results.py $(RESULTS)

# The raw manifests (kubectl apply, no Helm): the chart's default render.
manifests: venv cluster-bin
	$(PY) deploy/manifests/render.py --write

# Known vulnerabilities in the installed dependencies. --strict fails when a package
# cannot be audited (no advisory service reachable) instead of passing silently.
audit: venv
	$(PY) -m pip install -q pip-audit
	$(PY) -m pip_audit --strict --progress-spinner off

# Extender latency with 1,000 nodes (filter+prioritize p50/p99, filter req/s), Go client.
bench-extender: venv
	$(PY) -m extender.api.loadbench --runs 3

# Loopback load on filter/prioritize, 1,000 nodes: 50, 200 and 1,000 connections.
load: venv
	$(PY) bench/load.py --levels 50,200,1000 --seconds 20

# 5 minutes at 200 connections, server RSS sampled; fails on errors or > 20 MiB growth.
soak: venv
	$(PY) bench/load.py --soak 300 --connections 200 --max-growth-mb 20

# 5,000 pods over 512 fake GPU nodes through the real kube-scheduler.
bench-scale: venv cluster-bin
	$(PY) bench/cluster_scale.py --pods 5000 --nodes 512 --step-seconds 90

# One controller round, every pod queued: 64 nodes / 500 pods and 512 / 5,000.
bench-round: venv
	$(PY) bench/round.py

# scaling.assign per call: replicas of 1, 2, 4 and 8 GPUs at 512 and 4,096 GPUs.
bench-replicas: venv
	$(PY) bench/replicas.py

# --- the main jobs ---------------------------------------------------------------

# The point in a few minutes: fifo vs gpuroster on the local control plane.
demo: venv cluster-bin
	$(VENV)/bin/gpuroster demo

# The seven scenarios in the simulator, every policy, result files and pictures.
bench: venv
	$(VENV)/bin/gpuroster bench --out out/bench --latency

# Full mode (CP-SAT) and the value upper bound (HiGHS) beside the fast plan.
bench-slo: venv
	$(PY) bench/slo.py --count 100 --out out/bench-slo

# Production-shaped traffic and the wrong-forecast families against priority-easy (~8 min).
bench-traffic: venv
	$(PY) bench/traffic.py --count 100 --held-out 50 --wrong 100

bench-steps: venv
	$(PY) bench/steps.py

bench-full: venv
	$(VENV)/bin/gpuroster bench --policies fifo,gpuroster --full --out out/bench-full

# The seven scenarios replayed on the local control plane, fifo and gpuroster.
bench-cluster: venv cluster-bin
	$(VENV)/bin/gpuroster bench --cluster local --out out/bench-cluster

# The seven replayed under the schedulers a cluster could run instead (the stock
# kube-scheduler; Kueue v0.17.0, services at their peak or scaled reactively) beside
# fifo and gpuroster, every one at 3 s a step (docs/benchmarks.md says why).
PEERS_STEP_SECONDS ?= 3
bench-peers: venv cluster-bin
	$(VENV)/bin/gpuroster bench --cluster local --step-seconds $(PEERS_STEP_SECONDS) \
		--policies fifo,default,kueue,kueue-reactive,gpuroster --out out/bench-peers \
		training-heavy mixed-control fragmentation priority-inversion forecast-error \
		uniform-priority scale-test
