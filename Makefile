# Setup is idempotent: `.venv` is created once and refreshed when pyproject.toml changes.
# torch is pinned to the CPU wheel first so that the package's range `torch>=2.4` installs nothing more.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0

.PHONY: setup report verify test test-fast lint clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job: every claim -> experiment -> verdict computed from measurements (E1 runs verify).
report: setup
	$(BIN)/implicit-em report --quick --out report

verify: setup
	$(BIN)/implicit-em verify

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow"

lint: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache report
