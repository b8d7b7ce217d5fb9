"""``zarrchive checksum``: against ``zarrsum local`` on Zarrs written by zarr-python 3."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer
import zarr
from typer.testing import CliRunner
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import yield_files_local

from zarrchive.cli.checksum import checksum

BIN = Path(sys.executable).parent
RUN_CLI = "from zarrchive.cli import main; main()"

# The command alone, so these tests do not depend on the other commands' modules.
app = typer.Typer()
app.command()(checksum)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [*args])
    return result.exit_code, result.stdout, result.stderr


def zarrsum(path: Path) -> str:
    """The checksum printed by zarr-checksum's CLI: ``zarrsum local DIR``."""
    out = subprocess.run(
        [str(BIN / "zarrsum"), "local", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def zarrs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("zarrs")
    # Zarr format 2: default "." chunk keys, a "/"-separated array, a subgroup, attributes.
    v2 = zarr.open_group(base / "v2.zarr", mode="w", zarr_format=2)
    v2.attrs["title"] = "données d'essai ✓"
    flat = v2.create_array("flat", shape=(20, 30), chunks=(7, 8), dtype="i4")
    flat[:] = np.arange(600, dtype="i4").reshape(20, 30)
    nested = v2.create_array(
        "nested",
        shape=(10, 10, 4),
        chunks=(3, 3, 2),
        dtype="f8",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    nested[:5] = 1.5  # only some chunks exist
    sub = v2.create_group("sub")
    sub.create_array("x", shape=(25,), chunks=(2,), dtype="u1")[:] = np.arange(25, dtype="u1")
    # Zarr format 3: "c/0/0" chunk keys.
    v3 = zarr.open_group(base / "v3.zarr", mode="w", zarr_format=3)
    grid = v3.create_array("grid", shape=(16, 16, 3), chunks=(4, 4, 1), dtype="i2")
    grid[:] = np.arange(16 * 16 * 3, dtype="i2").reshape(16, 16, 3)
    v3.create_group("empty-group")
    return {"v2": base / "v2.zarr", "v3": base / "v3.zarr"}


@pytest.mark.parametrize("kind", ["v2", "v3"])
def test_equals_zarrsum(zarrs: dict[str, Path], kind: str) -> None:
    path = zarrs[kind]
    expected = zarrsum(path)
    assert expected.endswith(f"--{sum(f.stat().st_size for f in path.rglob('*') if f.is_file())}")
    code, out, err = run(str(path))
    assert (code, out, err) == (0, expected + "\n", "")
    for jobs in ("1", "3"):
        assert run(str(path), "--jobs", jobs) == (0, expected + "\n", "")
    assert run(str(path), "-j", "2") == (0, expected + "\n", "")


def test_zarr_layouts_are_what_the_test_means(zarrs: dict[str, Path]) -> None:
    v2, v3 = zarrs["v2"], zarrs["v3"]
    assert (v2 / "flat" / "2.3").is_file()
    assert (v2 / "nested" / "1" / "3" / "1").is_file()
    assert not (v2 / "nested" / "3").exists()
    assert (v2 / "sub" / "x" / "12").is_file()
    assert (v3 / "grid" / "c" / "3" / "3" / "2").is_file()
    assert (v3 / "empty-group" / "zarr.json").is_file()


def test_json(zarrs: dict[str, Path]) -> None:
    path = zarrs["v2"]
    code, out, err = run(str(path), "--json")
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert list(document) == ["checksum", "directories"]
    assert document["checksum"] == zarrsum(path)
    directories = document["directories"]
    expected_dirs = {""} | {
        str(p.relative_to(path)) for p in path.rglob("*") if p.is_dir() and any(p.iterdir())
    }
    assert set(directories) == expected_dirs
    assert list(directories) == sorted(expected_dirs)
    assert {"flat", "nested", "nested/0", "nested/1/3", "sub", "sub/x"} <= expected_dirs
    assert directories[""] == document["checksum"]
    for directory, digest in directories.items():
        reference = compute_zarr_checksum(yield_files_local(path / directory)).digest
        assert digest == reference, directory


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "nothing" / "here").mkdir(parents=True)
    assert run(str(tmp_path)) == (0, "481a2f77ab786a0f45aafd5db0971caa-0--0\n", "")
    code, out, _ = run(str(tmp_path), "--json")
    assert code == 0
    assert json.loads(out) == {
        "checksum": "481a2f77ab786a0f45aafd5db0971caa-0--0",
        "directories": {"": "481a2f77ab786a0f45aafd5db0971caa-0--0"},
    }


def _assert_one_line_error(result: tuple[int, str, str], message: str) -> None:
    code, out, err = result
    assert (code, out) == (2, "")
    assert err == f"zarrchive checksum: {message}\n"


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    _assert_one_line_error(run(str(missing)), f"'{missing}': no such file or directory")
    _assert_one_line_error(run(str(missing), "--json"), f"'{missing}': no such file or directory")


def test_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    _assert_one_line_error(run(str(tmp_path / "file")), f"'{tmp_path / 'file'}' is not a directory")


def test_unreadable_file(tmp_path: Path) -> None:
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /proc")
    (tmp_path / "ok").write_bytes(b"ok")
    (tmp_path / "mem").symlink_to("/proc/self/mem")  # open works, read fails (EIO)
    _assert_one_line_error(
        run(str(tmp_path)), f"cannot read '{tmp_path / 'mem'}': Input/output error"
    )


def test_invalid_path_and_bad_jobs(tmp_path: Path) -> None:
    (tmp_path / "back\\slash").write_bytes(b"x")
    _assert_one_line_error(
        run(str(tmp_path)), "'back\\\\slash' contains a backslash: separate directories with '/'"
    )
    _assert_one_line_error(run(str(tmp_path), "--jobs", "0"), "jobs must be at least 1, got 0")


# -- the installed command, in a real process ------------------------------------------------
def test_real_process(zarrs: dict[str, Path], tmp_path: Path) -> None:
    path = zarrs["v3"]
    done = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "checksum", str(path)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, zarrsum(path) + "\n", "")
    missing = subprocess.run(
        [sys.executable, "-c", RUN_CLI, "checksum", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2
    assert missing.stdout == ""
    assert (
        missing.stderr == f"zarrchive checksum: '{tmp_path / 'nope'}': no such file or directory\n"
    )


def test_progress_only_on_a_terminal(zarrs: dict[str, Path]) -> None:
    path = zarrs["v2"]
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, "checksum", str(path)],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    terminal = b""
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        terminal += chunk
    stdout, _ = process.communicate(timeout=60)
    os.close(master)
    assert process.returncode == 0
    assert stdout.decode() == zarrsum(path) + "\n"  # stdout: only the checksum
    assert b"hashing:" in terminal
    assert b"files" in terminal
