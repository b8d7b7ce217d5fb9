"""The client reads published states exactly: ``zarrchive download/verify
DANDISET@VERSION/PATH`` and ``open_store("DANDISET@VERSION/PATH")`` while the draft changes
the same Zarr, before and after ``zarrchive admin gc --apply``."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.helpers.local_zarr import make_zarr, zarr_checksum_of
from tests.helpers.snapshots import admin_env
from tests.helpers.zarr_nodes import as_array
from zarrchive.cli import app
from zarrchive.client import ApiClient, Uploader
from zarrchive.client.store import SnapshotStore, open_store
from zarrchive.client.upload import BatchRecords
from zarrchive.config import PublishedZarrs, Settings
from zarrchive.errors import InvalidInput, NotFound
from zarrchive.services.zarr_engine.snapshots import SNAPSHOT_CACHE

pytestmark = pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def arrays_of(group: zarr.Group) -> dict[str, np.ndarray]:
    return {
        name: np.asarray(as_array(group[name])[...])
        for name in ("a", "g/b", "g/c", "d")
        if name in group
    }


def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_versions_download_verify_and_open_exactly(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    settings: Settings,
    dandiset: str,
    records: BatchRecords,
) -> None:
    source = tmp_path / "brain.zarr"
    make_zarr(source, seed=3, coarse=8)
    uploader = Uploader(client, jobs=4, records=records)
    states: dict[str, Path] = {}
    versions: list[str] = []
    for step in range(3):
        if step == 1:  # change a, delete g/c, add d
            group = zarr.open_group(source, mode="a")
            as_array(group["a"])[0:5, :] = -7
            shutil.rmtree(source / "g" / "c")
            d = group.create_array("d", shape=(10,), chunks=(4,), dtype="int8")
            d[...] = np.arange(10, dtype="int8")
        if step == 2:  # the draft only: change d, delete a
            as_array(zarr.open_group(source, mode="a")["d"])[...] = 99
            shutil.rmtree(source / "a")
        result = uploader.upload(source, dandiset=dandiset)
        assert result.ok
        if step < 2:
            response = client.request("POST", f"/api/dandisets/{dandiset}/versions/draft/publish/")
            versions.append(str(response.json()["version"]))
            shutil.copytree(source, tmp_path / f"state{step}")
            states[versions[-1]] = tmp_path / f"state{step}"
    draft = tree(source)

    def check_all(round_: str) -> None:
        for version, state in states.items():
            address = f"{dandiset}@{version}/brain.zarr"
            dest = tmp_path / f"{round_}-{version}"
            code, out, err = run(client_env, "download", address, str(dest), "--jobs", "4")
            assert code == 0, err
            assert "(matches the archive)" in out
            assert tree(dest) == tree(state)  # byte for byte
            assert zarr_checksum_of(dest) == zarr_checksum_of(state)
            code, out, err = run(client_env, "verify", address, str(dest))
            assert code == 0 and out.startswith("OK"), (out, err)
            # zarr-python through open_store, anonymous (no token)
            store = open_store(address, api_url=client_env["ZARRCHIVE_URL"], token=None)
            try:
                assert isinstance(store, SnapshotStore)
                got = arrays_of(zarr.open_group(store, mode="r"))
                want = arrays_of(zarr.open_group(state, mode="r"))
                assert got.keys() == want.keys()
                for name in want:
                    np.testing.assert_array_equal(got[name], want[name])
            finally:
                store.close()
        # the draft is its latest state
        dest = tmp_path / f"{round_}-draft"
        code, _, err = run(client_env, "download", f"{dandiset}@draft/brain.zarr", str(dest))
        assert code == 0, err
        assert tree(dest) == draft

    check_all("before-gc")
    # verify tells the versions apart
    v1, v2 = versions
    code, out, _ = run(client_env, "verify", f"{dandiset}@{v2}/brain.zarr", str(states[v1]))
    assert code == 1 and "missing\td/" in out and "extra\tg/c/" in out

    env = admin_env(settings)
    # retention 0: every noncurrent version goes that no kept manifest (pinned, current) names
    code, out, err = run(env, "admin", "gc", "--retention-days", "0")
    assert code == 0, err
    assert "would remove" in err and "rerun with --apply" in err
    listed = [line for line in out.splitlines() if line.startswith("would remove\t")]
    assert listed  # noncurrent .checksum nodes and replaced chunks of no snapshot
    code, out, err = run(env, "admin", "gc", "--apply", "--retention-days", "0")
    assert code == 0, err
    assert len([line for line in out.splitlines() if line.startswith("removed\t")]) == len(listed)
    SNAPSHOT_CACHE.clear()
    check_all("after-gc")


def test_bad_addresses(client: ApiClient, client_env: dict[str, str], dandiset: str) -> None:
    url = client_env["ZARRCHIVE_URL"]
    with pytest.raises(InvalidInput):
        open_store(f"{dandiset}@latest/x.zarr", api_url=url)
    with pytest.raises(NotFound):
        open_store(f"{dandiset}@0.260101.0000/x.zarr", api_url=url)
    code, _, err = run(client_env, "download", "1@0.260101.0000/x", "/tmp/never")
    assert code == 2 and "six digits" in err


def test_upload_note_follows_the_mode(
    tmp_path: Path, client_env: dict[str, str], dandiset: str
) -> None:
    local = tmp_path / "note.zarr"
    local.mkdir()
    (local / "zarr.json").write_bytes(b"{}")
    code, _, err = run(client_env, "upload", str(local), "--dandiset", dandiset)
    assert code == 0, err
    assert err == (
        f"zarrchive: NOTE: publishing dandiset {dandiset} pins this Zarr's current state for "
        "the version; the draft's Zarr stays writable\n"
    )
