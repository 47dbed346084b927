# Setup is idempotent: `.venv` is created once and refreshed when pyproject.toml changes.
# torch is installed first, pinned, so that the package's range `torch>=2.4` installs nothing more.
# Which build pip picks is the index's choice: from PyPI, Linux x86-64 gets the CUDA build.
# TORCH_INDEX (empty by default: pip's own configuration) is the index torch alone is installed
# from, e.g. the CPU-only builds: make report TORCH_INDEX=https://download.pytorch.org/whl/cpu
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
TORCH_PIP := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup report verify test test-fast lint docs docs-serve wheel-check clean data browser publish-check pages

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(TORCH_PIP) $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The main job: every claim -> experiment -> verdict computed from measurements (E1 runs verify).
# Quick is a smaller copy of full, on the same data sets: Fashion-MNIST comes first (`data`).
report: setup data
	$(BIN)/implicit-em report --quick --out report

verify: setup
	$(BIN)/implicit-em verify

# The tests read Fashion-MNIST (`data`, needed) and open the tracer's health page in headless
# Chromium (`browser`; where it cannot be installed, that one test is skipped with the reason).
test: setup data
	@$(MAKE) --no-print-directory browser || echo "make test: no Chromium here; the browser test is skipped"
	$(BIN)/python -m pytest -q

test-fast: setup data
	@$(MAKE) --no-print-directory browser || echo "make test-fast: no Chromium here; the browser test is skipped"
	$(BIN)/python -m pytest -q -m "not slow"

# The published full-size report (results/full) still matches the code that produced it: its
# measurement and judgement keys. Any drift fails, and so does an experiment published before
# the keys were recorded.
publish-check: setup
	$(BIN)/implicit-em publish --check

# Rewrite every page written from data: the items table (items.json), the experiments' gates and
# criteria and the protocol versions (the protocols and their registry), the findings (by the
# command their page records), and the tables read from the published full run.
pages: setup
	$(BIN)/python -m implicit_em.report.items.table docs/theory.md
	$(BIN)/python -m implicit_em.report.rendering.protocol_lines docs/report.md
	$(BIN)/python -m implicit_em.report.rendering.protocol_history docs/report.md
	$(BIN)/python -m implicit_em.report.rendering.findings --again docs/findings.md
	$(BIN)/python -m implicit_em.report.rendering.reference_table docs/windtunnel.md results/full/results.json
	$(BIN)/python -m implicit_em.report.rendering.provenance_table docs/results-full.md results/full/results.json
	$(BIN)/python -m implicit_em.report.rendering.cost_table docs/windtunnel.md results/full/results.json

# Fashion-MNIST for the claims report (quick and full) and its known-answer controls: Debian's
# dataset-fashion-mnist package puts its IDX files in /usr/share/datasets/fashion-mnist.
# Nothing in the package downloads data.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
FASHION := /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
data:
	@if [ -f $(FASHION) ] || [ -n "$$IMPLICIT_EM_DATA" ]; then \
		echo "Fashion-MNIST is installed"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y dataset-fashion-mnist; \
	else \
		echo "make data: apt-get is not available here. Copy the four Fashion-MNIST files"; \
		echo "(train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,"; \
		echo "t10k-labels-idx1-ubyte.gz) into a folder and set IMPLICIT_EM_DATA to that folder."; \
		exit 1; \
	fi

# Headless Chromium (Debian's chromium package), for the test that opens the tracer's health page
# (`implicit-em trace report`) in a real browser; without it that test is skipped.
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		echo "chromium is installed"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		$(SUDO) apt-get update && $(SUDO) apt-get install -y chromium; \
	else \
		echo "make browser: apt-get is not available here; install Chromium and put it on PATH"; \
		exit 1; \
	fi

lint: setup
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

# The documentation site, built into site/; any warning fails the build.
docs: setup
	$(BIN)/mkdocs build --strict

docs-serve: setup
	$(BIN)/mkdocs serve

# sdist and wheel into dist/, the wheel installed in a fresh virtualenv with $(TORCH) (from
# $(TORCH_INDEX) when set), then
# `implicit-em verify` and a README example run against it from a temporary folder.
wheel-check: setup
	PYTHON=$(PYTHON) TORCH=$(TORCH) TORCH_INDEX=$(TORCH_INDEX) .ci/wheel_check.sh $(BIN)/python

clean:
	rm -rf $(VENV) build dist site *.egg-info src/*.egg-info .pytest_cache report
