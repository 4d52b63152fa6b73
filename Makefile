# The everyday commands.  PY is the dev venv's Python (README "Set up"); the shared one here:
#   make lint PY=/opt/skdev/bin/python
# The test targets need a PostgreSQL: SKIPLOCK_TEST_DSN, else the embedded server.
PY ?= .venv/bin/python
SOURCES = src tests tools bench

.PHONY: help generate check-generated format lint typecheck test-quick test-smoke test check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed -E 's/:.*## /\t/'

generate:  ## rewrite the sync twins from their async sources (src/skiplock/_db/*_async.py)
	$(PY) tools/async_to_sync.py

check-generated:  ## fail when a sync twin is out of date (CI, pre-commit)
	$(PY) tools/async_to_sync.py --check

format:  ## format the code in place
	$(PY) -m ruff format $(SOURCES)

lint:  ## ruff (formatting and rules) and the sync twins, as CI runs them
	$(PY) -m ruff check $(SOURCES)
	$(PY) -m ruff format --check $(SOURCES)
	$(PY) tools/async_to_sync.py --check

typecheck:  ## mypy, strict, on src/skiplock
	$(PY) -m mypy

test-quick:  ## the unit tests: pure logic, no worker
	$(PY) -m pytest -p no:cacheprovider -q tests/unit

test-smoke:  ## a quick subset across the tiers (pytest -m smoke)
	$(PY) -m pytest -p no:cacheprovider -q -m smoke

test:  ## every test, chaos and hostile suites at their quick sizes (what CI runs)
	$(PY) -m pytest -p no:cacheprovider

check: lint typecheck test-quick  ## before a commit
