# ibdiag — set-up and everyday targets. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.ibdiag-installed
TSTAMP  = $(VENV)/.ibdiag-test-installed
LSTAMP  = $(VENV)/.ibdiag-lint-installed

.PHONY: demo test test-fast test-rdma lint venv test-venv fixtures completions bench bench-scripts system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[fabric,report]'
	touch $@

$(TSTAMP): $(STAMP) pyproject.toml
	# the CPU build this machine kind carries on disk; the extra itself only asks torch>=2.1
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,fabric,report,collective]'
	touch $@

$(LSTAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[lint]'
	touch $@

venv: $(STAMP)
test-venv: $(TSTAMP)

## demo: the main job on the bundled healthy DGX H100-like fixture, ending with a verdict on that node
demo: $(STAMP)
	$(BIN)/ibdiag topo --root fixtures/sysfs/dgx-h100
	$(BIN)/ibdiag counters --root fixtures/sysfs/dgx-h100
	$(BIN)/ibdiag verdict --params 8e9 --dtype bf16 --ranks 512 --compute-s 2 --busbw 360 --root fixtures/sysfs/dgx-h100
	# a saved rail-optimised fat tree with two planted faults: exit 1 is its answer (a faulty fabric)
	$(BIN)/ibdiag fabric --from fixtures/fabric/rail-fat-tree-faulty; test $$? -eq 1

## test: the whole suite (real processes, namespaces and torch process groups included)
test: $(TSTAMP)
	$(BIN)/python -m pytest -q

## lint: ruff (lint + format check), mypy on ibdiag/, and the layer contracts (import-linter); CI runs it
lint: $(LSTAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

## test-fast: the quick loop (no slow tests)
test-fast: $(TSTAMP)
	$(BIN)/python -m pytest -q -m 'not slow'

## test-rdma: the RDMA tests on a real kernel stack: boots qemu guests with Soft-RoCE (tests/rdmavm/; root installs qemu)
test-rdma: $(TSTAMP)
	IBDIAG_RDMAVM=1 $(BIN)/python -m pytest -q -o timeout=900 tests/rdmavm

## fuzz: the control-protocol fuzz at length (FUZZ_CASES connections, seeded by FUZZ_SEED) against a real server
FUZZ_CASES ?= 30000
FUZZ_SEED  ?= 16
.PHONY: fuzz
fuzz: $(TSTAMP)
	IBDIAG_FUZZ_CASES=$(FUZZ_CASES) IBDIAG_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest -q -s -o timeout=3600 tests/adversarial/test_net_fuzz.py

## fixtures: rewrite fixtures/sysfs/*/sys from tests/sysfsgen/profiles
fixtures:
	$(PYTHON) -m tests.sysfsgen fixtures/sysfs

## completions: regenerate completions/ from the app
completions: $(STAMP)
	$(BIN)/python -m ibdiag.cli.completions completions

## system-deps: Debian packages the tests use (run as root; .ci/run does this)
system-deps:
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyverbs rdma-core perftest ibverbs-utils iperf3 qperf sockperf hwloc pciutils iproute2 nftables tmux prometheus-node-exporter ibsim-utils libumad2sim0 opensm infiniband-diags slurmctld slurm-client >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null  # headless browser test of ibdiag report -o html
	# the operations recipes run in the real consumers: slurmctld + slurmd (contrib/slurm), promtool (alert rules), bash-completion
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client prometheus bash-completion strace >/dev/null

## bench: the benchmark scripts behind the README's numbers (needs the test extras and system-deps)
# Scripts that compare with a target append "name: ratio ... target ... PASS|MISS" to the summary file
# (benchmarks/ratios.py); bench prints it after all scripts ran.
BENCH_SUMMARY ?= build/bench-summary.txt
bench: bench-scripts
	@echo; echo "== ratios and targets ($(BENCH_SUMMARY)) =="; cat $(BENCH_SUMMARY)
bench-scripts: export IBDIAG_BENCH_SUMMARY = $(abspath $(BENCH_SUMMARY))
bench-scripts: $(TSTAMP)
	@mkdir -p $(dir $(BENCH_SUMMARY)) && : > $(BENCH_SUMMARY)
	$(BIN)/python benchmarks/topo_startup.py
	$(BIN)/python benchmarks/counters_sample.py
	$(BIN)/python benchmarks/p2p_vs_iperf3.py
	$(BIN)/python benchmarks/tcp_lat_cost.py --two-process
	$(BIN)/python benchmarks/collective_vs_torch.py
	$(BIN)/python benchmarks/verdict_overlap.py
	$(BIN)/python benchmarks/sweep_scale.py
	$(BIN)/python benchmarks/import_streaming.py
	$(BIN)/python benchmarks/fabric_scale.py
	@# boots the Soft-RoCE guest (root, qemu; ~15 min); exit 3 = no test bed here, noted in the summary
	$(BIN)/python benchmarks/rdma_vs_perftest.py || test $$? -eq 3
	$(BIN)/python benchmarks/rdma_post_cost.py || test $$? -eq 3
	$(BIN)/python benchmarks/rdma_lat_sides.py || test $$? -eq 3

## gpu-check: the NCCL path on this machine's GPU(s), < 5 min, report in gpu-check.json (fails without a GPU);
## runs under the machine's own python3 (its CUDA build of torch), not the venv: see docs/bench-collective.md
GPU_CHECK_OUT ?= gpu-check.json
.PHONY: gpu-check
gpu-check:
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/gpu_check.py --out $(GPU_CHECK_OUT)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
