# ibdiag — set-up and everyday targets. `make demo` and `make test` work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.ibdiag-installed
TSTAMP  = $(VENV)/.ibdiag-test-installed

.PHONY: demo test test-fast test-rdma venv test-venv fixtures completions bench system-deps clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(TSTAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[test,analysis,collective]'
	touch $@

venv: $(STAMP)
test-venv: $(TSTAMP)

## demo: the main job on the bundled healthy DGX H100-like fixture, ending with a verdict on that node
demo: $(STAMP)
	$(BIN)/ibdiag topo --root fixtures/sysfs/dgx-h100
	$(BIN)/ibdiag counters --root fixtures/sysfs/dgx-h100
	$(BIN)/ibdiag verdict --params 8e9 --dtype bf16 --ranks 512 --compute-s 2 --busbw 360 --root fixtures/sysfs/dgx-h100

## test: the whole suite (real processes, namespaces and torch process groups included)
test: $(TSTAMP)
	$(BIN)/python -m pytest -q

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
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pyverbs rdma-core iperf3 qperf sockperf hwloc pciutils iproute2 tmux >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null  # headless browser test of ibdiag report -o html

## bench: the benchmark scripts behind the README's numbers (needs the test extras and system-deps)
bench: $(TSTAMP)
	$(BIN)/python benchmarks/topo_startup.py
	$(BIN)/python benchmarks/counters_sample.py
	$(BIN)/python benchmarks/p2p_vs_iperf3.py
	$(BIN)/python benchmarks/collective_vs_torch.py
	$(BIN)/python benchmarks/verdict_overlap.py
	$(BIN)/python benchmarks/sweep_scale.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
