# One command to set up and run, one to set up and test (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint typecheck pytest bench clean

# setup.py and the native sources too: `pip install -e` compiles the native matcher.
$(STAMP): pyproject.toml setup.py matcher/_native.pyx matcher/native_core.hpp
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# The service on the embedded DuckDB default (./data/), in development mode: it prints the
# URL, the docs URL and the admin token it made. Set TOPICSTORE_ADMIN_TOKEN (and
# TOPICSTORE_DATABASE_URL for PostgreSQL) to run it for real.
run: setup
	$(BIN)/topicstore serve --dev

test: setup lint typecheck pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

pytest: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/topicstore bench --out bench-out

clean:
	rm -rf $(VENV) bench-out .pytest_cache .mypy_cache .ruff_cache .hypothesis
