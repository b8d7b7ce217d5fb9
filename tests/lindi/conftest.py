"""Fixtures of the LINDI tests: HDF5 builders, a loopback HTTP server with ranges, the lindi oracle."""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

LINDI_PYTHON_ENV = "ZARRCHIVE_LINDI_PYTHON"


@dataclass
class RangeServer:
    """A loopback HTTP server of a directory that honours ``Range`` requests."""

    root: Path
    base_url: str
    requests: list[tuple[str, str | None]] = field(default_factory=list)

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    def ranged(self, name: str) -> int:
        return sum(1 for path, rng in self.requests if path == f"/{name}" and rng)


_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class _Handler(SimpleHTTPRequestHandler):
    server_state: RangeServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        rng = self.headers.get("Range")
        self.server_state.requests.append((self.path, rng))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data_size = path.stat().st_size
        match = _RANGE.match(rng or "")
        if match is None:
            body = path.read_bytes()
            self.send_response(200)
        else:
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else data_size - 1
            end = min(end, data_size - 1)
            if start >= data_size:
                self.send_error(416)
                return
            with path.open("rb") as fh:
                fh.seek(start)
                body = fh.read(end - start + 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{data_size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self.server_state.requests.append((self.path, None))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()


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


def run_oracle(python: str, script: str, *args: str | os.PathLike[str], cwd: Path) -> Any:
    """Run *script* with the lindi interpreter; it prints one JSON document, returned parsed."""
    proc = subprocess.run(
        [python, "-c", textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"lindi script failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
