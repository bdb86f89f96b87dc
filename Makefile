# One command to set up and run, one to set up and test (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Until the API lands, "run" runs the benchmark suite and writes its tables and charts.
run: setup
	$(BIN)/topicstore bench --out bench-out

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
