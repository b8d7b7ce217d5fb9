"""``zarrchive rm ADDRESS PATH...``: files and whole directories deleted, the exact checksum
after; a missing path, a published address or no confirmation delete nothing; a large
deletion applied by the archive's job is waited for."""

from __future__ import annotations

import threading

import pytest
from typer.testing import CliRunner

from tests.helpers.jobs import HeldJobQueue
from tests.helpers.seeded_zarr import chunk_files, seed_zarr
from tests.helpers.waiting import EVENT_TIMEOUT, wait_until
from tests.helpers.zarr_client import oracle_checksum
from zarrchive.cli import app
from zarrchive.cli._common import human_size
from zarrchive.client import ApiClient
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.uploads import directory_delete

FILES = {
    ".zgroup": b'{"zarr_format":2}',
    "arr/.zarray": b'{"shape":[4]}',
    "arr/0": b"zero",
    "arr/sub/deep/x": b"deep x",
    "arr/sub/deep/y": b"deep y",
    "other/only": b"only child",
}


def new_zarr(client: ApiClient, archive: Archive, dandiset: str, name: str = "rm.zarr") -> str:
    zarr_id = client.create_zarr(name, dandiset).zarr_id
    seed_zarr(archive, zarr_id, FILES)
    return zarr_id


def size_of(files: dict[str, bytes], *prefixes: str) -> str:
    """The CLI's size of the files under *prefixes*."""
    return human_size(sum(len(b) for p, b in files.items() if p.startswith(prefixes)))


def rm(env: dict[str, str], *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["rm", *args], env=env, input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_rm_files_and_directories(
    client: ApiClient, client_env: dict[str, str], archive: Archive, dandiset: str
) -> None:
    zarr_id = new_zarr(client, archive, dandiset)
    code, out, err = rm(client_env, f"{dandiset}/rm.zarr", "arr/sub/", "other", "--yes")
    assert code == 0, err
    remaining = {p: b for p, b in FILES.items() if not p.startswith(("arr/sub/", "other/"))}
    checksum = oracle_checksum(remaining)
    assert out == (
        f"Zarr {zarr_id}: deleted 3 files, {size_of(FILES, 'arr/sub/', 'other/')} "
        f"(in 2 directories); checksum {checksum}\n"
    )
    assert client.get_zarr(zarr_id).checksum == checksum
    code, out, err = rm(client_env, zarr_id, "arr/0", "-y")
    assert code == 0, err
    del remaining["arr/0"]
    assert out == f"Zarr {zarr_id}: deleted 1 file, 4 B; checksum {oracle_checksum(remaining)}\n"


def test_rm_refuses_and_deletes_nothing(
    client: ApiClient, client_env: dict[str, str], archive: Archive, dandiset: str
) -> None:
    zarr_id = new_zarr(client, archive, dandiset)
    before = client.get_zarr(zarr_id).checksum
    # a path that is neither a file nor a directory
    code, _out, err = rm(client_env, zarr_id, "arr", "nope", "arr/0/", "--yes")
    assert code == 2
    assert err == (
        f"zarrchive rm: Zarr {zarr_id} has no file or directory 'nope', 'arr/0/'; "
        "nothing was deleted\n"
    )
    # the root
    code, _out, err = rm(client_env, zarr_id, "/", "--yes")
    assert code == 2 and "the root directory can't be deleted" in err
    # a published version's address
    code, _out, err = rm(client_env, f"{dandiset}@0.250101.1200/rm.zarr", "arr", "--yes")
    assert code == 2 and "names a published version" in err
    # no terminal to confirm, no --yes
    code, _out, err = rm(client_env, zarr_id, "arr")
    assert code == 2
    assert "stdin is not a terminal to confirm; rerun with --yes" in err
    assert client.get_zarr(zarr_id).checksum == before


def test_rm_asks_first(
    client: ApiClient,
    client_env: dict[str, str],
    archive: Archive,
    dandiset: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zarr_id = new_zarr(client, archive, dandiset)
    before = client.get_zarr(zarr_id).checksum
    monkeypatch.setattr("zarrchive.cli.rm._interactive", lambda: True)
    code, _out, err = rm(client_env, zarr_id, "arr", stdin="n\n")
    assert code == 1
    assert f"Delete 4 files, {size_of(FILES, 'arr/')} (in 1 directory) from Zarr" in err
    assert err.endswith("zarrchive rm: nothing deleted\n")
    assert client.get_zarr(zarr_id).checksum == before
    code, out, err = rm(client_env, zarr_id, "arr", stdin="y\n")
    assert code == 0, err
    assert out.startswith(f"Zarr {zarr_id}: deleted 4 files")
    remaining = {p: b for p, b in FILES.items() if not p.startswith("arr/")}
    assert client.get_zarr(zarr_id).checksum == oracle_checksum(remaining)


def test_rm_waits_for_a_background_deletion(
    client: ApiClient,
    client_env: dict[str, str],
    archive: Archive,
    dandiset: str,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above the inline limit the archive answers 202 and its job deletes: ``rm`` polls
    until the Zarr is at rest and prints the final checksum; ``--no-wait`` returns at once."""
    monkeypatch.setattr(directory_delete, "INLINE_DELETE_FILES", 10)
    monkeypatch.setattr("zarrchive.cli.rm.POLL_SECONDS", 0.05)
    zarr_id = new_zarr(client, archive, dandiset)
    big = chunk_files("big", 120, width=40)
    seed_zarr(archive, zarr_id, big)
    code, out, err = rm(client_env, zarr_id, "big", "--yes", "--no-wait")
    assert code == 0, err
    assert out == (
        f"Zarr {zarr_id}: deleting 120 files, {size_of(big, 'big/')} (in 1 directory); the "
        "archive applies it in the background (upload_state 'applying' until it is done)\n"
    )
    assert client.get_zarr(zarr_id).upload_state == "applying"
    held.run("apply:")
    assert client.get_zarr(zarr_id).checksum == oracle_checksum(FILES)

    seed_zarr(archive, zarr_id, big)
    # `rm` waits in a thread; this thread is the archive's worker: it runs the deletion job
    # once `rm`'s request has queued it (whenever that is), and `rm` must then see it done
    monkeypatch.setattr("zarrchive.cli.rm.WAIT_LIMIT_SECONDS", EVENT_TIMEOUT)
    result: list[tuple[int, str, str]] = []
    waiting = threading.Thread(
        target=lambda: result.append(rm(client_env, zarr_id, "big", "other", "--yes")),
        daemon=True,  # a failure here does not wait for it
    )
    waiting.start()
    wait_until(
        lambda: held.queued("apply:") or not waiting.is_alive(),
        "`rm big other` to queue the deletion job",
    )
    held.run("apply:")
    waiting.join(EVENT_TIMEOUT + 60)  # rm gives up after WAIT_LIMIT_SECONDS
    assert not waiting.is_alive() and result, "rm did not return"
    ((code, out, err),) = result
    assert code == 0, err
    checksum = oracle_checksum({p: b for p, b in FILES.items() if not p.startswith("other/")})
    size = human_size(sum(map(len, big.values())) + len(FILES["other/only"]))
    assert out == (
        f"Zarr {zarr_id}: deleted 121 files, {size} (in 2 directories); checksum {checksum}\n"
    )
