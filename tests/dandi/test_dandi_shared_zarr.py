"""DANDI's own client downloads dandiset B, whose asset is a Zarr of dandiset A (#39 item 2):
the files of the state B's asset pinned, byte for byte, under B's asset path, with dandi's
own checksum verification against B's asset: a frozen Zarr (``freeze`` mode), and a
published snapshot of a Zarr that A's draft changed since (``snapshot`` mode: B's asset
names the state's read-only view)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.helpers.api_uploads import upload
from tests.helpers.dandi import DandiArchive, SnapshotServer, require_dandi_venv, run_dandi, show
from tests.helpers.shared_zarrs import FIRST, SHARED_PATH, published_zarr, share
from tests.helpers.snapshots import oracle
from tests.helpers.zarr_client import create_dandiset, delete_files, wait_at_rest
from zarrchive.config import PublishedZarrs
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS


@pytest.fixture(scope="module")
def snapshot_archive(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DandiArchive]:
    """A ``zarrchive serve`` process that publishes Zarrs in ``snapshot`` mode."""
    require_dandi_venv()
    tmp = tmp_path_factory.mktemp("dandi-snapshot-archive")
    database = f"sqlite:///{tmp / 'zarrchive.sqlite3'}"
    settings = make_settings(
        seaweedfs, bucket, database, tmp, published_zarrs=PublishedZarrs.SNAPSHOT
    )
    archive = Archive.from_settings(settings)
    with archive.db.session() as session:
        owner = create_user(session, "owner")[1]
        stranger = create_user(session, "stranger")[1]
    archive.close()
    server = SnapshotServer(settings, tmp / "server.log")
    server.start()
    try:
        yield DandiArchive(server, owner, stranger, tmp / "home")
    finally:
        server.stop()


def dandi_download(archive: DandiArchive, dandiset: str, tmp_path: Path) -> dict[str, bytes]:
    """``dandi download`` of the dandiset's draft: the files under B's asset path."""
    url = f"{archive.url}/api/dandisets/{dandiset}/versions/draft/"
    home, key = archive.home, archive.key(archive.owner)
    done = run_dandi(["download", url], cwd=tmp_path, home=home, api_keys=key, timeout=300)
    assert done.returncode == 0, show(done)
    assert "error" not in (done.stdout + done.stderr).lower(), show(done)
    root = tmp_path / dandiset / SHARED_PATH
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_dandi_downloads_a_shared_zarr_as_b_s_own(
    dandi_archive: DandiArchive, tmp_path: Path
) -> None:
    with dandi_archive.client(dandi_archive.owner) as api:
        _, zarr_id, _ = published_zarr(api, FIRST)
        b = create_dandiset(api, "B")
        assert share(api, b, zarr_id)["shared_zarr"]["mode"] == "freeze"
    assert dandi_download(dandi_archive, b, tmp_path) == FIRST


def test_dandi_downloads_the_pinned_snapshot_not_a_s_draft(
    snapshot_archive: DandiArchive, tmp_path: Path
) -> None:
    with snapshot_archive.client(snapshot_archive.owner) as api:
        _, zarr_id, _ = published_zarr(api, FIRST)
        # A's draft changes a file, deletes one and adds more after the publication
        upload(api, zarr_id, {"x/0": b"changed in A's draft", "y/0": b"new", "y/1": b"more"})
        delete_files(api, zarr_id, ["x/1"])
        assert wait_at_rest(api, zarr_id)["checksum"] != oracle(FIRST)
        b = create_dandiset(api, "B")
        shared = share(api, b, zarr_id)
        assert shared["shared_zarr"]["mode"] == "snapshot"
        assert shared["shared_zarr"]["checksum"] == oracle(FIRST)
    assert dandi_download(snapshot_archive, b, tmp_path) == FIRST
