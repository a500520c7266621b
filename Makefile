# Contributor entry points (CONTRIBUTING.md). Run inside the project's virtualenv, or name its
# bin directory: `make lint BIN=/path/to/venv/bin/`.
BIN ?=
PYTHON ?= $(BIN)python

# A unit test must not need PostgreSQL: test-fast points the suite's database at a port nothing
# listens on, so a unit test that asks for one fails at once instead of starting a server.
NO_DATABASE = postgresql://nobody@127.0.0.1:9/none

.PHONY: test-fast test lint typecheck bench-quick

test-fast:  ## tests/unit: the pure rules, seconds, no PostgreSQL
	CATALOG_TEST_DATABASE_URL=$(NO_DATABASE) $(PYTHON) -m pytest -q -p no:cacheprovider tests/unit

test:  ## the README's test command: the whole suite (embedded PostgreSQL, or CATALOG_TEST_DATABASE_URL)
	$(PYTHON) -m pytest

lint:  ## what CI lints: ruff, ruff's formatting, the layer contracts
	$(BIN)ruff check .
	$(BIN)ruff format --check .
	$(BIN)lint-imports

typecheck:  ## pyright over the package, imports resolved against $(PYTHON)'s packages
	PYTHON=$(PYTHON) bash scripts/typecheck.sh

bench-quick:  ## every benchmark, small (a few minutes on 2 cores); needs .[bench]
	$(PYTHON) -m bench --quick
