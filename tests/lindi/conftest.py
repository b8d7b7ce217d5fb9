"""Fixtures of the LINDI tests: a loopback HTTP server with ranges, the lindi oracle."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.lindi._lindi_helpers import LINDI_PYTHON_ENV, RangeServer, _Handler


@pytest.fixture
def range_server(tmp_path: Path) -> Iterator[RangeServer]:
    root = tmp_path / "served"
    root.mkdir()
    state = RangeServer(root=root, base_url="")
    handler = type("Handler", (_Handler,), {"server_state": state})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


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
