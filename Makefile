# zarrchive: `make serve` starts the archive, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LINDI_VENV := .venv-lindi
LINDI_STAMP := $(LINDI_VENV)/.installed-stamp
SCHEMATHESIS_VENV := .venv-schemathesis
SCHEMATHESIS_STAMP := $(SCHEMATHESIS_VENV)/.installed-stamp

.PHONY: serve test lint typecheck pytest install bench clean
.PHONY: reliability

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# lindi 0.4.6 pins zarr<3: it lives in its own environment, used only as a test oracle.
$(LINDI_STAMP):
	$(PYTHON) -m venv $(LINDI_VENV)
	$(LINDI_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LINDI_VENV)/bin/python -m pip install --quiet 'lindi==0.4.6' 'h5py>=3.11,<4'
	touch $(LINDI_STAMP)

# schemathesis pins libraries that may clash with ours: its own environment, run as a CLI.
$(SCHEMATHESIS_STAMP):
	$(PYTHON) -m venv $(SCHEMATHESIS_VENV)
	$(SCHEMATHESIS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SCHEMATHESIS_VENV)/bin/python -m pip install --quiet 'schemathesis>=4.3,<5'
	touch $(SCHEMATHESIS_STAMP)

.venv-schemathesis: $(SCHEMATHESIS_STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/zarrchive serve

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict src

pytest: $(STAMP) $(LINDI_STAMP) $(SCHEMATHESIS_STAMP)
	ZARRCHIVE_LINDI_PYTHON=$(CURDIR)/$(LINDI_VENV)/bin/python $(BIN)/pytest

# The reliability suite at full size (fuzz, races, crashes, faults, authorization, bad input):
# see README "Reliability".  `make test` runs the same tests on a small budget.
reliability: $(STAMP) $(SCHEMATHESIS_STAMP)
	ZARRCHIVE_RELIABILITY=full $(BIN)/pytest tests/reliability -v -p no:cacheprovider

test: lint typecheck pytest

clean:
	rm -rf $(VENV) $(LINDI_VENV) $(SCHEMATHESIS_VENV) .pytest_cache .mypy_cache .ruff_cache
