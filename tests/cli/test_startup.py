"""CLI start-up: a command imports what it needs when it runs, nothing heavy up front.

``python -X importtime`` lists every module a process imports; ``import zarrchive.cli``,
``zarrchive --help`` and ``zarrchive checksum`` must not import zarr-python, numcodecs,
boto3, FastAPI, SQLAlchemy or h5py (each takes a large part of a second to import), and
``checksum`` needs no HTTP client either.  No timing is asserted (the machine may be
loaded): the modules imported are what decides the start-up time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Top-level packages no command may import before it runs.
HEAVY = frozenset(
    {"zarr", "numcodecs", "numpy", "boto3", "botocore", "fastapi", "sqlalchemy", "h5py"}
)

_ROW = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$")


def imported_modules(*args: str, cwd: Path | None = None) -> set[str]:
    """Every module the process ``python -X importtime ARGS`` imports."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env["ZARRCHIVE_NO_CACHE"] = "1"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = {m.group(1) for line in done.stderr.splitlines() if (m := _ROW.match(line))}
    assert "zarrchive" in found, "importtime printed nothing: " + done.stderr[-500:]
    return found


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY}


def test_import_cli_is_light() -> None:
    modules = imported_modules("-c", "import zarrchive.cli")
    assert heavy(modules) == set()
    # The client package is imported piecewise: no HTTP client for `checksum` or `--help`.
    assert "httpx" not in modules
    assert "importlib.metadata" not in modules


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["upload", "--help"],
        ["download", "--help"],
        ["verify", "--help"],
        ["admin", "--help"],
        ["publish", "--help"],
    ],
)
def test_help_is_light(argv: list[str]) -> None:
    modules = imported_modules("-m", "zarrchive.cli", *argv)
    assert heavy(modules) == set()
    assert "httpx" not in modules


def test_checksum_imports_neither_zarr_nor_http(tmp_path: Path) -> None:
    (tmp_path / "z").mkdir()
    (tmp_path / "z" / ".zgroup").write_text('{"zarr_format": 2}')
    modules = imported_modules("-m", "zarrchive.cli", "checksum", str(tmp_path / "z"))
    assert heavy(modules) == set()
    assert "httpx" not in modules
    assert "rich" not in modules  # no progress display without a terminal


def test_lazy_names_still_resolve() -> None:
    """The public names of the packages are imported on first use, and all resolve."""
    import zarrchive
    import zarrchive.client as client

    for name in client.__all__:
        assert getattr(client, name) is not None, name
    assert zarrchive.__version__
    from zarrchive.client import upload
    from zarrchive.client.upload import upload as upload_function

    assert upload is upload_function  # the function, not the submodule of the same name
