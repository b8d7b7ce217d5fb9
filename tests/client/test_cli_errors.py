"""Bad input to the client commands: one line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from zarrchive.cli import app
from zarrchive.client.upload import scan_local
from zarrchive.storage.seaweedfs import free_port


def run(args: list[str], env: dict[str, str], *, retried: int = 0) -> tuple[int, str]:
    """The exit code and the one line of error; *retried* lines saying a retry come first."""
    result = CliRunner().invoke(app, args, env=env)
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == retried + 1, result.stderr
    assert all("; retrying in " in line for line in lines[:retried]), result.stderr
    return result.exit_code, lines[-1].strip()


@pytest.fixture
def zarr_dir(tmp_path: Path) -> Path:
    path = tmp_path / "ok.zarr"
    path.mkdir()
    (path / "zarr.json").write_bytes(b"{}")
    return path


def test_local_problems(tmp_path: Path, client_env: dict[str, str], zarr_dir: Path) -> None:
    env = client_env
    a_file = tmp_path / "file.txt"
    a_file.write_bytes(b"x")
    code, err = run(["upload", str(a_file), "--dandiset", "000001"], env)
    assert (code, err) == (2, f"zarrchive upload: {str(a_file)!r} is not a directory")
    code, err = run(["upload", str(tmp_path / "nope"), "--dandiset", "000001"], env)
    assert code == 2 and err.endswith("no such file or directory")

    bad = tmp_path / "bad.zarr"
    bad.mkdir()
    (bad / "a\\b").write_bytes(b"x")
    code, err = run(["upload", str(bad), "--dandiset", "000001"], env)
    assert code == 2 and "contains a backslash" in err and err.startswith("zarrchive upload: ")

    loop = tmp_path / "loop.zarr"
    (loop / "sub").mkdir(parents=True)
    (loop / "sub" / "f").write_bytes(b"f")
    os.symlink("..", loop / "sub" / "back")
    code, err = run(["upload", str(loop), "--dandiset", "000001"], env)
    assert code == 2 and "symbolic link loop" in err

    big = tmp_path / "big.zarr"
    big.mkdir()
    with open(big / "huge", "wb") as f:
        f.truncate(5 * 1024**4 + 1)  # sparse: no disk space used
    code, err = run(["upload", str(big), "--dandiset", "000001"], env)
    assert code == 2 and "larger than 5 TiB" in err and "huge (5497558138881 bytes)" in err
    # over 5 GiB (one PUT's limit) is fine: such files go up in parts
    with open(big / "huge", "wb") as f:
        f.truncate(5 * 1024**3 + 1)
    assert scan_local(str(big)) == (1, 5 * 1024**3 + 1)

    code, err = run(["upload", str(zarr_dir), "--dandiset", "000001", "--jobs", "0"], env)
    assert (code, err) == (2, "zarrchive upload: --jobs must be at least 1, got 0")

    code, err = run(["download", "not-an-id", str(tmp_path / "d")], env)
    assert code == 2 and "neither a Zarr id" in err
    code, err = run(["verify", "00000000-0000-0000-0000-000000000000", str(zarr_dir)], env)
    assert code == 2 and err.startswith("zarrchive verify: not found: ")


def test_server_problems(tmp_path: Path, client_env: dict[str, str], zarr_dir: Path) -> None:
    dandiset_args = ["--dandiset", "000001"]
    code, err = run(["upload", str(zarr_dir), *dandiset_args], {**client_env, "ZARRCHIVE_URL": ""})
    assert (code, err) == (
        2,
        "zarrchive upload: no archive URL: pass --api-url or set ZARRCHIVE_URL",
    )

    wrong = {**client_env, "ZARRCHIVE_TOKEN": "not-a-token"}
    code, err = run(["upload", str(zarr_dir), *dandiset_args], wrong)
    assert code == 2 and err.startswith("zarrchive upload: the archive refused the credentials: ")
    assert "ZARRCHIVE_TOKEN" in err

    nobody = {
        **client_env,
        "ZARRCHIVE_URL": f"http://127.0.0.1:{free_port()}",
        "ZARRCHIVE_RETRIES": "2",
    }
    # the retry is said (one line), then the error (issue #41: never silent while waiting)
    code, err = run(["upload", str(zarr_dir), *dandiset_args], nobody, retried=1)
    assert code == 2 and err.startswith(
        "zarrchive upload: cannot reach the archive at http://127.0.0.1:"
    )
    code, err = run(
        ["download", "00000000-0000-0000-0000-000000000000", str(tmp_path / "d")],
        nobody,
        retried=1,
    )
    assert code == 2 and "cannot reach the archive" in err

    code, err = run(["upload", str(zarr_dir), "--dandiset", "999999"], client_env)
    assert code == 2 and err.startswith("zarrchive upload: not found: ")
