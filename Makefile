# zarrchive: `make serve` starts the archive, `make test` runs every check.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
LINDI_VENV := .venv-lindi
LINDI_STAMP := $(LINDI_VENV)/.installed-stamp

.PHONY: serve test lint typecheck pytest install bench clean

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
