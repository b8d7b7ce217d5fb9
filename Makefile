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
# Every environment is installed with its bytecode compiled, and Python may write the bytecode
# of what it imports: with PYTHONDONTWRITEBYTECODE set (as on some machines and CI images),
# every process would otherwise compile every module it imports from source, each time: 2 s
# of CPU per start of the server or a CLI, hundreds of times in `make test`.
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode
unexport PYTHONDONTWRITEBYTECODE
LOCK := requirements/zarrchive.lock
# Test processes (pytest-xdist; each test module runs whole in one of them, with its own
# SeaweedFS and PostgreSQL database): most of the suite waits on servers (SeaweedFS, the
# archive, CLIs in subprocesses), so 3 on 2 cores.  Modules start longest first
# (tests/helpers/schedule.py), so pytest-xdist's own reordering is off.
PYTEST_WORKERS ?= 3

.PHONY: serve test lint typecheck pytest install bench clean lock reliability browser unit

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv==$(UV_VERSION)'

$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(UV_INSTALL) --python $(BIN)/python --require-hashes -r $(LOCK)
	$(UV_INSTALL) --python $(BIN)/python --no-deps -e .
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
	$(UV_INSTALL) --python $(LINDI_VENV)/bin/python --require-hashes -r requirements/lindi.lock
	touch $(LINDI_STAMP)

# schemathesis, run as a CLI by the fuzz tests.
$(SCHEMATHESIS_STAMP): requirements/schemathesis.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(SCHEMATHESIS_VENV)
	$(UV_INSTALL) --python $(SCHEMATHESIS_VENV)/bin/python --require-hashes -r requirements/schemathesis.lock
	touch $(SCHEMATHESIS_STAMP)

.venv-schemathesis: $(SCHEMATHESIS_STAMP)

# s3fs + zarr: zarr-python reading the public bucket anonymously (anon=True), as DANDI's users do.
$(S3FS_STAMP): requirements/s3fs.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(S3FS_VENV)
	$(UV_INSTALL) --python $(S3FS_VENV)/bin/python --require-hashes -r requirements/s3fs.lock
	touch $(S3FS_STAMP)

# DANDI's own client (dandi + pynwb), run as a CLI by tests/dandi against `zarrchive serve`.
$(DANDI_STAMP): requirements/dandi.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(DANDI_VENV)
	$(UV_INSTALL) --python $(DANDI_VENV)/bin/python --require-hashes -r requirements/dandi.lock
	touch $(DANDI_STAMP)

.venv-dandi: $(DANDI_STAMP)

# ome-zarr-py writing real multiscale OME-Zarr images (NGFF 0.4 and 0.5) for tests/web.
$(OME_STAMP): requirements/ome.lock | $(BIN)/python
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(OME_VENV)
	$(UV_INSTALL) --python $(OME_VENV)/bin/python --require-hashes -r requirements/ome.lock
	touch $(OME_STAMP)

.venv-ome: $(OME_STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/zarrchive serve

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict src tests

# The OpenID Connect provider of the sign-in tests (panva's oidc-provider, from the lock file
# in tests/oidc_provider), installed beside the Python venvs in .venv-oidc (its package files
# are copied there; the tests copy provider.mjs in at start); without npm the tests skip
# (tests/helpers/oidc_provider.py says why).
OIDC_PROVIDER := tests/oidc_provider
OIDC_VENV := .venv-oidc
OIDC_PROVIDER_STAMP := $(OIDC_VENV)/.installed-stamp
$(OIDC_PROVIDER_STAMP): $(OIDC_PROVIDER)/package.json $(OIDC_PROVIDER)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	    mkdir -p $(OIDC_VENV) && cp $^ $(OIDC_VENV)/ && \
	    cd $(OIDC_VENV) && npm ci --no-audit --no-fund --loglevel=error && touch .installed-stamp; \
	else \
	    echo "npm is missing: the OpenID Connect sign-in tests will skip"; \
	fi

pytest: $(STAMP) $(LINDI_STAMP) $(SCHEMATHESIS_STAMP) $(S3FS_STAMP) $(DANDI_STAMP) $(OME_STAMP) $(OIDC_PROVIDER_STAMP)
	ZARRCHIVE_LINDI_PYTHON=$(CURDIR)/$(LINDI_VENV)/bin/python \
	ZARRCHIVE_OME_PYTHON=$(CURDIR)/$(OME_VENV)/bin/python \
	ZARRCHIVE_S3FS_PYTHON=$(CURDIR)/$(S3FS_VENV)/bin/python \
	ZARRCHIVE_DANDI_VENV=$(CURDIR)/$(DANDI_VENV) $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The fast tests (`pytest -m unit`: those that need no server, services on the in-memory
# object store; tests/helpers/unit_tests.py says which): about a minute on 2 idle cores.
unit: $(STAMP)
	$(BIN)/pytest -m unit -n 2 -p no:cacheprovider

# The reliability suite at full size (fuzz, races, crashes, faults, authorization, bad input):
# see docs/reliability.md.  `make test` runs the same tests on a small budget.
reliability: $(STAMP) $(SCHEMATHESIS_STAMP)
	ZARRCHIVE_RELIABILITY=full $(BIN)/pytest tests/reliability tests/multiprocess/test_multiprocess.py -v -p no:cacheprovider

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
	rm -rf $(VENV) $(LINDI_VENV) $(SCHEMATHESIS_VENV) $(S3FS_VENV) $(DANDI_VENV) $(OME_VENV) $(OIDC_VENV) .pytest_cache .mypy_cache .ruff_cache
