"""DANDI's own client downloads a published version of a dandiset whose Zarr its draft kept
changing (``snapshot`` mode, the archive's "immutability once published"): the version's
Zarr asset names the pinned view of the state it published, so ``dandi download
DANDISET/VERSION`` gets the published bytes (and dandi's own checksum check passes against
the published metadata), while ``dandi download`` of the draft gets the live Zarr."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import make_settings
from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, ok
from tests.helpers.dandi import DandiArchive, SnapshotServer, require_dandi_venv, run_dandi, show
from tests.helpers.shared_zarrs import FIRST, publish
from tests.helpers.snapshots import oracle
from tests.helpers.zarr_client import create_dandiset, create_zarr, delete_files, wait_at_rest
from zarrchive.config import PublishedZarrs
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

#: Where A's Zarr asset is.
PATH = "data.zarr"
#: What A's draft does to the Zarr after the publication: a file changed, one added, one
#: deleted (x/1).
CHANGED = {"x/0": b"changed in the draft", "y/0": b"new in the draft"}


@pytest.fixture(scope="module")
def snapshot_archive(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DandiArchive]:
    """A ``zarrchive serve`` process that publishes Zarrs in ``snapshot`` mode."""
    require_dandi_venv()
    tmp = tmp_path_factory.mktemp("dandi-published-snapshot")
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


def dandi_download(
    archive: DandiArchive, dandiset: str, version: str, cwd: Path
) -> dict[str, bytes]:
    """``dandi download`` of a version of the dandiset (anonymous): the Zarr's files."""
    cwd.mkdir()
    url = f"{archive.url}/api/dandisets/{dandiset}/versions/{version}/"
    done = run_dandi(["download", url], cwd=cwd, home=archive.home, timeout=300)
    assert done.returncode == 0, show(done)
    assert "error" not in (done.stdout + done.stderr).lower(), show(done)
    (root,) = cwd.glob(f"*/{PATH}")
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_dandi_downloads_a_published_version_as_published(
    snapshot_archive: DandiArchive, tmp_path: Path
) -> None:
    with snapshot_archive.client(snapshot_archive.owner) as api:
        a = create_dandiset(api, "A")
        zarr_id = create_zarr(api, a, PATH)
        upload(api, zarr_id, FIRST)
        ok(api.post(assets_url(a), json={"metadata": {"path": PATH}, "zarr_id": zarr_id}))
        version = publish(api, a)
        # A's draft goes on changing the same Zarr (snapshot mode leaves it writable)
        upload(api, zarr_id, CHANGED)
        delete_files(api, zarr_id, ["x/1"])
        assert wait_at_rest(api, zarr_id)["checksum"] != oracle(FIRST)
    assert dandi_download(snapshot_archive, a, version, tmp_path / "published") == FIRST
    live = {".zattrs": FIRST[".zattrs"], **CHANGED}
    assert dandi_download(snapshot_archive, a, "draft", tmp_path / "draft") == live
