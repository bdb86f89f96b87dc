# One command to set up and run, one to set up and test (see README.md).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
#: pytest-xdist workers: this machine and CI have 2 cores.
PYTEST_WORKERS ?= 2

.PHONY: setup tools run test lint typecheck docs docs-build pytest bench clean

# setup.py and the compiled sources too: `pip install -e` compiles them.
$(STAMP): pyproject.toml setup.py matcher/_native.pyx \
		$(wildcard matcher/native/*.hpp) \
		app/_answers.pyx $(wildcard app/*.hpp)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The checkout's own modules byte-compiled (pip compiles only what it installs): every
# process a test or `make run` starts reads them instead of compiling them from source each
# time (where PYTHONDONTWRITEBYTECODE is set, as in our sandboxes, nothing else writes them
# for the checkout).
# Up-to-date modules are skipped, so a run with nothing changed takes a fraction of a second.
PACKAGES := app bench harness loader matcher migrations pipeline store tests topicstore
setup: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 $(PACKAGES)

# wrk drives the API load test (bench/tests/test_api_load.py) and chromium the web console's
# browser tests (tests/app/test_console.py, through Playwright: never `playwright install`),
# both required on CI: installed from Debian when running as root without them, as CI does.
# Elsewhere those tests are skipped, saying how to install what is missing. apt-get waits
# (up to APT_LOCK_TIMEOUT seconds) for the package lock another apt or dpkg holds, rather
# than failing at once; a tool it cannot install is named.
TOOLS := wrk:wrk chromium:chromium
APT_LOCK_TIMEOUT ?= 600
APT_GET = DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$(APT_LOCK_TIMEOUT)
tools:
	@for tool in $(TOOLS); do command=$${tool%%:*}; package=$${tool#*:}; \
		command -v $$command >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		$(APT_GET) install -y -qq $$package >/dev/null || \
		{ $(APT_GET) update -qq && $(APT_GET) install -y -qq $$package >/dev/null; } || \
		{ echo "make tools: could not install $$command (apt-get install $$package failed;" \
			"its error is above)" >&2; exit 1; }; done

# The service on the embedded DuckDB default (./data/), in development mode: it prints the
# URL, the docs URL and the admin token it made. Set TOPICSTORE_ADMIN_TOKEN (and
# TOPICSTORE_DATABASE_URL for PostgreSQL) to run it for real.
run: setup
	$(BIN)/topicstore serve --dev

test: setup lint typecheck docs-build pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# A clean clone (CI) has no mypy cache, so mypy checks the whole tree cold, the longest step
# before pytest: two worker processes share it over the machine's two cores.
typecheck: setup
	$(BIN)/mypy --num-workers 2

# The documentation site (mkdocs.yml, docs/): `docs` serves it while you edit; `docs-build`
# builds it with --strict, so a broken link or anchor, or a page left out of the
# navigation, fails `make test`. Its code samples run in tests/test_doc_samples.py.
export NO_MKDOCS_2_WARNING := 1
docs: setup
	$(BIN)/mkdocs serve

docs-build: setup
	$(BIN)/mkdocs build --strict --quiet

# pytest-xdist workers; tests that must not share a service with another worker at the same
# time are grouped onto one (conftest.py). The ten slowest tests are listed at the end.
pytest: setup tools
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --durations=10

bench: setup
	$(BIN)/topicstore bench --out bench-out

clean:
	rm -rf $(VENV) bench-out site .pytest_cache .mypy_cache .ruff_cache .hypothesis
