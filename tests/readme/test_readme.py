"""The README's commands, pasted top to bottom in a fresh shell, work: its marked ```sh
blocks ("A first upload", DANDI's client) run with bash, in a directory laid out as the clone
(``.venv``, ``.venv-dandi``, ``examples/``), against ``zarrchive serve`` started there as
``make serve`` starts it; and what their comments say they print is what they print."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.dandi import require_dandi_venv
from tests.helpers.readme import REPO, RUN_MARKER, MakeServe, runnable_blocks

README = REPO / "README.md"


@pytest.fixture
def clone(tmp_path: Path) -> Iterator[tuple[Path, MakeServe]]:
    """A directory like the clone, with ``make serve`` running in it."""
    dandi_venv = require_dandi_venv()
    work = tmp_path / "clone"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.executable).parent.parent)
    (work / ".venv-dandi").symlink_to(dandi_venv)
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
    blocks = runnable_blocks(README)
    assert len(blocks) == 2, f"expected the 2 blocks marked {RUN_MARKER} (A first upload, dandi)"
    script = "set -euo pipefail\n" + "\n".join(blocks)
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
    uploads = [line for line in out if line.startswith("Zarr ")]
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
    assert out[-1] == "sub-mouse1_ses-1.nwb", shown
    assert "# 000002/sub-mouse1/sub-mouse1_ses-1.nwb" in readme
    assert "000002/sub-mouse1/sub-mouse1_ses-1.nwb" in out


def test_readme_marks_only_sh_blocks() -> None:
    """A marker before anything but a ```sh block would silently leave it untested."""
    text = README.read_text()
    markers = [line for line in text.splitlines() if line.strip() == RUN_MARKER]
    assert len(markers) == len(runnable_blocks(README)) == 2
