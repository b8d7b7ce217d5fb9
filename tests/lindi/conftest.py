"""Fixtures of the LINDI tests: a loopback HTTP server with ranges, the lindi oracle, the
path of an HDF5 file to write."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.lindi import LINDI_PYTHON_ENV, RangeServer, range_server_process
from tests.helpers.oracle_env import oracle_python


@pytest.fixture
def range_server(tmp_path: Path) -> Iterator[RangeServer]:
    root = tmp_path / "served"
    root.mkdir()
    with range_server_process(root, tmp_path / "requests.log") as server:
        yield server


@pytest.fixture
def lindi_python() -> str:
    """The interpreter of the environment with lindi 0.4.6 (the oracle); skip without it."""
    return oracle_python(
        LINDI_PYTHON_ENV,
        ".venv-lindi/.installed-stamp",
        ".venv-lindi with lindi 0.4.6, for the interoperability tests",
    )


@pytest.fixture
def h5path(tmp_path: Path) -> Path:
    """Where a test writes its HDF5 file (not created)."""
    return tmp_path / "f.h5"
