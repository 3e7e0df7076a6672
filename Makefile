# Set-up is part of every target: a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
STAMP := $(VENV)/.installed

.PHONY: demo test test-huge lint bench bench-fast fuzz clean

# the demo needs only rlx and its own dependencies; the tests and lint add the dev extras
$(CORE): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(CORE)

$(STAMP): $(CORE)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(CORE)
	$(BIN)/python -m rlx demo

# --durations and --disk-writes: the 15 slowest tests and the 15 test files that wrote most
# to disk, so a test that grows shows where the time or the disk went (tests/footprint.py)
test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=15 --disk-writes=15

# the tests that write or map many gigabytes (the 2 and 8 GiB streaming bakes)
test-huge: $(STAMP)
	$(BIN)/python -m pytest -q -m huge

# ruff (pyproject.toml [tool.ruff]) on the code and the tests, mypy on the code
lint: $(STAMP)
	$(BIN)/python -m ruff check src tests scripts benchmarks
	$(BIN)/python -m mypy src

# >= 100,000 fuzz cases on 2 processes plus the full crash-safety and bit-flip runs
# (resumable; see docs/reliability.md); writes docs/fuzz-summary.json
fuzz: $(STAMP)
	$(BIN)/python scripts/fuzz.py

# Benchmarks are not part of `test`: minutes long, and they need the `bench` extras.
# `make bench BENCH_ARGS="--quick --models minilm-l3"` passes options through.
$(VENV)/.installed-bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

# the fast profile against plain f32 engines (issue 32): `make bench-fast
# FAST_ARGS="--models minilm-l3 --rounds 3"`
bench-fast: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.fast_ratio $(FAST_ARGS)

clean:
	rm -rf $(VENV) demo-out .pytest_cache
