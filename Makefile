# zarrchive: `make serve` starts the archive, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LINDI_VENV := .venv-lindi
LINDI_STAMP := $(LINDI_VENV)/.installed-stamp
# Installs are reproducible: every environment is installed from a lock file (exact versions
# and hashes) by uv, itself pinned; `make lock` regenerates the locks after a dependency change.
UV_VERSION := 0.13.9
UV := $(BIN)/uv
LOCK := requirements/zarrchive.lock

.PHONY: serve test lint typecheck pytest install bench clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'

$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r $(LOCK)
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# Regenerate the lock from pyproject.toml (run after changing dependencies; commit the result).
COMPILE := $(UV) pip compile --universal --python-version 3.11 --generate-hashes --quiet
lock: | $(BIN)/python
	$(COMPILE) pyproject.toml --extra test -o $(LOCK)
	$(COMPILE) requirements/lindi.in -o requirements/lindi.lock

# lindi 0.4.6 pins zarr<3: it lives in its own environment, used only as a test oracle.
$(LINDI_STAMP): requirements/lindi.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(LINDI_VENV)
	$(UV) pip install --quiet --python $(LINDI_VENV)/bin/python --require-hashes -r requirements/lindi.lock
	touch $(LINDI_STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/zarrchive serve

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP) $(LINDI_STAMP)
	ZARRCHIVE_LINDI_PYTHON=$(CURDIR)/$(LINDI_VENV)/bin/python $(BIN)/pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) $(LINDI_VENV) .pytest_cache .mypy_cache .ruff_cache
