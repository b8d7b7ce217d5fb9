"""Fixtures of the LINDI tests: a loopback HTTP server with ranges, the lindi oracle."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.lindi import LINDI_PYTHON_ENV, RangeServer, range_server_process


@pytest.fixture
def range_server(tmp_path: Path) -> Iterator[RangeServer]:
    root = tmp_path / "served"
    root.mkdir()
    with range_server_process(root, tmp_path / "requests.log") as server:
        yield server


@pytest.fixture
def lindi_python() -> str:
    """The interpreter of the environment with lindi 0.4.6 (the oracle); skip without it."""
    python = os.environ.get(LINDI_PYTHON_ENV)
    if not python:
        pytest.skip(
            f"{LINDI_PYTHON_ENV} is not set: run `make pytest` (it builds .venv-lindi with"
            " lindi 0.4.6) to run the interoperability tests"
        )
    if not Path(python).exists():
        pytest.fail(
            f"{LINDI_PYTHON_ENV}={python} does not exist: run `make .venv-lindi/.installed-stamp`"
        )
    return python
