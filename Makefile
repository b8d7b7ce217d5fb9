# zarrchive: `make serve` starts the archive, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LINDI_VENV := .venv-lindi
LINDI_STAMP := $(LINDI_VENV)/.installed-stamp
SCHEMATHESIS_VENV := .venv-schemathesis
SCHEMATHESIS_STAMP := $(SCHEMATHESIS_VENV)/.installed-stamp
S3FS_VENV := .venv-s3fs
S3FS_STAMP := $(S3FS_VENV)/.installed-stamp
DANDI_VENV := .venv-dandi
DANDI_STAMP := $(DANDI_VENV)/.installed-stamp
OME_VENV := .venv-ome
OME_STAMP := $(OME_VENV)/.installed-stamp
# Installs are reproducible: every environment is installed from a lock file (exact versions
# and hashes) by uv, itself pinned; `make lock` regenerates the locks after a dependency change.
UV_VERSION := 0.13.9
UV := $(BIN)/uv
LOCK := requirements/zarrchive.lock
# Test processes (pytest-xdist; each test module runs whole in one of them, with its own
# SeaweedFS and PostgreSQL database): most of the suite waits on servers, so 2 on 2 cores.
PYTEST_WORKERS ?= 2

.PHONY: serve test lint typecheck pytest install bench clean lock reliability browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'

$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(UV) pip install --quiet --python $(BIN)/python --require-hashes -r $(LOCK)
	$(UV) pip install --quiet --python $(BIN)/python --no-deps -e .
	touch $(STAMP)

# Regenerate the locks (run after changing dependencies; commit the result).
COMPILE := $(UV) pip compile --universal --python-version 3.11 --generate-hashes --quiet
lock: | $(BIN)/python
	$(COMPILE) pyproject.toml --extra test -o $(LOCK)
	$(COMPILE) requirements/lindi.in -o requirements/lindi.lock
	$(COMPILE) requirements/schemathesis.in -o requirements/schemathesis.lock
	$(COMPILE) requirements/s3fs.in -o requirements/s3fs.lock
	$(COMPILE) requirements/dandi.in -o requirements/dandi.lock
	$(COMPILE) requirements/ome.in -o requirements/ome.lock

# Test oracles live in environments of their own (each pins what clashes with ours).
# lindi 0.4.6 pins zarr<3.
$(LINDI_STAMP): requirements/lindi.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(LINDI_VENV)
	$(UV) pip install --quiet --python $(LINDI_VENV)/bin/python --require-hashes -r requirements/lindi.lock
	touch $(LINDI_STAMP)

# schemathesis, run as a CLI by the fuzz tests.
$(SCHEMATHESIS_STAMP): requirements/schemathesis.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SCHEMATHESIS_VENV)
	$(UV) pip install --quiet --python $(SCHEMATHESIS_VENV)/bin/python --require-hashes -r requirements/schemathesis.lock
	touch $(SCHEMATHESIS_STAMP)

.venv-schemathesis: $(SCHEMATHESIS_STAMP)

# s3fs + zarr: zarr-python reading the public bucket anonymously (anon=True), as DANDI's users do.
$(S3FS_STAMP): requirements/s3fs.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(S3FS_VENV)
	$(UV) pip install --quiet --python $(S3FS_VENV)/bin/python --require-hashes -r requirements/s3fs.lock
	touch $(S3FS_STAMP)

# DANDI's own client (dandi + pynwb), run as a CLI by tests/dandi against `zarrchive serve`.
$(DANDI_STAMP): requirements/dandi.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(DANDI_VENV)
	$(UV) pip install --quiet --python $(DANDI_VENV)/bin/python --require-hashes -r requirements/dandi.lock
	touch $(DANDI_STAMP)

.venv-dandi: $(DANDI_STAMP)

# ome-zarr-py writing real multiscale OME-Zarr images (NGFF 0.4 and 0.5) for tests/web.
$(OME_STAMP): requirements/ome.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(OME_VENV)
	$(UV) pip install --quiet --python $(OME_VENV)/bin/python --require-hashes -r requirements/ome.lock
	touch $(OME_STAMP)

.venv-ome: $(OME_STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/zarrchive serve

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP) $(LINDI_STAMP) $(SCHEMATHESIS_STAMP) $(S3FS_STAMP) $(DANDI_STAMP) $(OME_STAMP)
	ZARRCHIVE_LINDI_PYTHON=$(CURDIR)/$(LINDI_VENV)/bin/python \
	ZARRCHIVE_OME_PYTHON=$(CURDIR)/$(OME_VENV)/bin/python \
	ZARRCHIVE_S3FS_PYTHON=$(CURDIR)/$(S3FS_VENV)/bin/python \
	ZARRCHIVE_DANDI_VENV=$(CURDIR)/$(DANDI_VENV) $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

# The reliability suite at full size (fuzz, races, crashes, faults, authorization, bad input):
# see README "Reliability".  `make test` runs the same tests on a small budget.
reliability: $(STAMP) $(SCHEMATHESIS_STAMP)
	ZARRCHIVE_RELIABILITY=full $(BIN)/pytest tests/reliability -v -p no:cacheprovider

# The web pages' browser tests drive Debian's headless chromium: `make test` installs it when
# it can (root, with apt); otherwise they skip, and the run's end names them and says why.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ ! -x $(CHROMIUM) ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests (tests/web/test_browser.py)"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	        || echo "could not install chromium: the browser tests will skip"; \
	fi

test: lint typecheck browser pytest

clean:
	rm -rf $(VENV) $(LINDI_VENV) $(SCHEMATHESIS_VENV) $(S3FS_VENV) $(DANDI_VENV) $(OME_VENV) .pytest_cache .mypy_cache .ruff_cache
