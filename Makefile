# make demo: set up .venv and crawl the demo shop.  make test: set up and run every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo

.PHONY: demo test lint typecheck audit check bench clean

# Everything: crashsafe, PostgreSQL's driver, Scrapy, and the test and lint tools.
$(STAMP): pyproject.toml
	@echo "make: creating $(VENV) with crashsafe and its test tools (about a minute)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo needs crashsafe alone, not the test tools.
$(DEMO_STAMP): pyproject.toml
	@echo "make demo: creating $(VENV) with crashsafe alone (no test tools)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@echo "make demo: installed; starting the demo shop and crawling it"
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/crashsafe demo

# Four test processes: most tests wait on sockets and child processes; with two, a 2-core
# machine was half idle (measured 2026-12-02, 583 tests: -n 2 410 s, 1.07 cores busy;
# -n 4 301 s, 1.65 cores).
test: $(STAMP)
	@# The tests start ~2 000 Python processes: compiled once here, they start faster
	@# (where PYTHONDONTWRITEBYTECODE is set, as on the CI machines, nothing else would).
	$(BIN)/python -m compileall -q src
	$(BIN)/python -m pytest -q -n 4

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The installed packages against the advisory database (PyPI's); offline, pip-audit says
# what it could not audit and exits 0, so this never blocks a machine without the internet.
audit: $(STAMP)
	$(BIN)/pip-audit --local --progress-spinner off --skip-editable

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python benchmarks/crawl_throughput.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache crashsafe-demo.db*
