"""The README's commands, pasted top to bottom in a fresh shell, work: its marked blocks
("A first upload", deleting, publishing, DANDI's client, then the reading examples in Python:
``open_store`` and the fsspec reference file, with stock tools) run in order in one bash, in
a directory laid out as the clone (``.venv``, ``.venv-dandi``, ``examples/``; the stock tools'
``.venv-stock``), against ``zarrchive serve`` started there as ``make serve`` starts it; and
what their comments say they print is what they print.  The Zarr they made has its
thumbnail (issue #41)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.helpers.dandi import require_dandi_venv
from tests.helpers.readme import (
    PYTHON_MARKER,
    REPO,
    RUN_MARKER,
    STOCK_PYTHON_MARKER,
    MakeServe,
    marked_blocks,
    readme_script,
    runnable_blocks,
)
from tests.helpers.s3fs_oracle import S3FS_PYTHON_ENV

README = REPO / "README.md"


def stock_venv() -> Path:
    """The stock tools' venv (zarr-python, fsspec, aiohttp; no zarrchive): the s3fs oracle's,
    named by its variable or found in the clone; the test skips without it."""
    named = os.environ.get(S3FS_PYTHON_ENV)
    python = Path(named) if named else REPO / ".venv-s3fs" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no stock-tools Python: run `make .venv-s3fs/.installed-stamp` ({python})")
    return python.parent.parent


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[tuple[Path, MakeServe]]:
    """A directory like the clone, with ``make serve`` running in it."""
    dandi_venv = require_dandi_venv()
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (work / ".venv-dandi").symlink_to(dandi_venv)
    (work / ".venv-stock").symlink_to(stock_venv())
    (work / "examples").symlink_to(REPO / "examples")
    server = MakeServe(work)
    server.start()
    try:
        yield work, server
    finally:
        server.stop()


def fresh_shell(home: Path) -> dict[str, str]:
    """A new terminal's environment: no ``ZARRCHIVE_*``; ``dandi`` kept off the user's
    keyring and cache and from phoning home (test isolation, not something the README needs)."""
    home.mkdir()
    return {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
        "DANDI_CACHE": "ignore",
        "DANDI_NO_ET": "1",
        "PYTHONWARNINGS": "ignore",
    }


@pytest.mark.slow
def test_readme_commands_work_when_pasted(clone: tuple[Path, MakeServe], tmp_path: Path) -> None:
    work, server = clone
    assert "this archive has no users yet" in server.log()  # how to create the first one
    kinds = [marker for marker, _language, _code in marked_blocks(README)]
    assert kinds == [RUN_MARKER] * 4 + [PYTHON_MARKER, STOCK_PYTHON_MARKER], kinds
    script = readme_script(README)
    script = script.replace("127.0.0.1:8000", server.url.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=work,
        env=fresh_shell(tmp_path / "home"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    shown = f"--- stdout ---\n{done.stdout[-5000:]}\n--- stderr ---\n{done.stderr[-5000:]}"
    assert done.returncode == 0, shown
    out = done.stdout.splitlines()
    # "A first upload": the identifier, two uploads, the local checksum
    assert out[0] == "000001", shown
    uploads = [line for line in out if line.startswith("Zarr ") and " uploaded " in line]
    assert len(uploads) == 2, shown
    assert "uploaded 101 files" in uploads[0] and "skipped 0;" in uploads[0]
    assert "uploaded 0 files (0 B), deleted 0, skipped 101;" in uploads[1]
    checksum = out[out.index(uploads[1]) + 1]
    assert all(f"checksum {checksum} (matches the local one)" in u for u in uploads), shown
    # ... as the README's comments show them
    readme = README.read_text()
    head, files, size = re.findall(r"checksum (\w+)\.\.\.-(\d+)--(\d+) \(matches", readme)[0]
    assert checksum.startswith(head) and checksum.endswith(f"-{files}--{size}"), checksum
    # the publishing note, once: when the Zarr joined the dandiset
    assert done.stderr.count("zarrchive: NOTE: publishing dandiset 000001") == 1, shown
    # DANDI's client: the NWB file made by examples/make_nwb.py went up and came back
    made = work / "000002" / "sub-mouse1" / "sub-mouse1_ses-1.nwb"
    back = work / "downloaded" / "000002" / "sub-mouse1" / "sub-mouse1_ses-1.nwb"
    assert made.read_bytes() == back.read_bytes()
    assert "sub-mouse1_ses-1.nwb" in out, shown
    assert "# 000002/sub-mouse1/sub-mouse1_ses-1.nwb" in readme
    assert "000002/sub-mouse1/sub-mouse1_ses-1.nwb" in out
    # deleting: a file and a directory of ten
    (deleted,) = [line for line in out if line.startswith("Zarr ") and " deleted 11 " in line]
    assert "(in 1 directory)" in deleted, shown
    # publishing: the metadata set from the file, the draft Valid (its Zarr asset too, as
    # `zarrchive upload` made it), then published
    assert "dandiset 000001 draft: Valid" in out and "# dandiset 000001 draft: Valid" in readme
    assert any(
        re.fullmatch(r"published dandiset 000001 as version 0\.\d{6}\.\d{4}", x) for x in out
    )
    zarr_id = out[out.index("dandiset 000001 draft: Valid") + 2]
    assert re.fullmatch(r"[0-9a-f-]{36}", zarr_id), shown
    # the reading examples, on that Zarr: the values the README's comments show
    assert "(100, 100) 8900.0" in out and "# (100, 100) 8900.0" in readme, shown
    assert out[-1] == "8900.0" and "# 8900.0" in readme, shown
    # its page's thumbnail: 100 x 100 in 100 chunks of 10 x 10 (issue #41)
    thumbnail = httpx.get(f"{server.url}/thumbnail/zarr/{zarr_id}/", timeout=60)
    assert thumbnail.status_code == 200, thumbnail.text
    assert Image.open(io.BytesIO(thumbnail.content)).size == (100, 100)
    # `make serve` says its steps, not Alembic's
    assert "alembic" not in server.log(), server.log()


def test_readme_marks_only_sh_blocks() -> None:
    """A marker before anything but a ```sh block would silently leave it untested."""
    text = README.read_text()
    markers = [line for line in text.splitlines() if line.strip() == RUN_MARKER]
    assert len(markers) == len(runnable_blocks(README)) == 4
    every = [line for line in text.splitlines() if line.strip().startswith("<!-- readme-test")]
    assert len(every) == len(marked_blocks(README)) == 6
    readme_script(README)  # each marker before a block of its language
