# Quick start:  make sweep   (the label-noise grid on the bundled digits data)
#               make test    (the test suite, CPU only)
# Both create or reuse the virtual environment $(VENV). An importable torch is kept as it is
# (a CUDA build stays a CUDA build); only when none is found is torch==$(TORCH_VERSION) installed.
PYTHON ?= python3
VENV ?= .venv
TORCH_VERSION ?= 2.13.0
PY := $(VENV)/bin/python
SWEEP_ARGS ?=

.PHONY: install sweep smoke test test-fast lint bench bench-quick bench-gpu gpu-check analysis clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  if $(PYTHON) -c "import torch" 2>/dev/null; then \
	    echo "keeping the torch of $(PYTHON): venv with --system-site-packages"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	  else $(PYTHON) -m venv $(VENV); fi; fi
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -e ".[dev,trackers]"
	@touch $@

sweep: install
	$(PY) sweeps/noise_grid.py $(SWEEP_ARGS)

smoke: install
	$(PY) sweeps/noise_grid.py --smoke-test $(SWEEP_ARGS)

test: install  # two pytest-xdist workers, each with its own Ray heads, S3 server and temp dirs (tests/conftest.py)
	$(PY) -m pytest tests -q -n 2 --dist loadgroup --durations=40

lint: install  # ruff (configured in pyproject.toml): lint and format check, as .ci/run does
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test-fast: install  # the unit tests: no Ray, no sweep subprocess (tests/README.md)
	$(PY) -m pytest tests/unit -q -n 2 --durations=10

BENCH_OUT ?= benchmarks/results
bench: install  # full forms: tens of minutes on 2 cores
	@mkdir -p $(BENCH_OUT)
	for b in startup sweep_efficiency trainable_overhead shared_data_memory analysis_load search_vs_grid status_speed seeds_auto work_tree_setup; do \
	  $(PY) benchmarks/$$b.py --json $(BENCH_OUT)/$$b.json || exit 1; done

bench-quick: install  # what CI runs: the quick forms, then the regression gate on their same-run ratios (benchmarks/gate.py)
	@mkdir -p $(BENCH_OUT)/quick
	for b in startup sweep_efficiency trainable_overhead shared_data_memory analysis_load search_vs_grid gpu_packing status_speed seeds_auto work_tree_setup; do \
	  $(PY) benchmarks/$$b.py --quick --json $(BENCH_OUT)/quick/$$b.json || exit 1; done
	$(PY) benchmarks/gate.py --startup $(BENCH_OUT)/quick/startup.json --trainable-overhead $(BENCH_OUT)/quick/trainable_overhead.json
	@echo "the gate's own test: a build whose reports each sleep half an epoch must fail it"
	$(PY) benchmarks/trainable_overhead.py --quick --models cnn --no-bare --slow-report 0.5 --json $(BENCH_OUT)/quick/slowed.json
	$(PY) benchmarks/gate.py --trainable-overhead $(BENCH_OUT)/quick/slowed.json --expect-fail

bench-gpu: install  # on a GPU machine: trials packed 1, 2, 4, 8 per GPU (table, JSON, plot); without a GPU it says so
	@mkdir -p $(BENCH_OUT)
	$(PY) benchmarks/gpu_packing.py --json $(BENCH_OUT)/gpu_packing.json --plot $(BENCH_OUT)/gpu_packing.png

gpu-check: install  # on a CUDA machine: every GPU path checked, one table, exit 1 on a failure (docs/gpus-and-clusters.md)
	$(PY) benchmarks/gpu_check.py

analysis: install
	$(PY) -m analysis runs/noise_grid

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
