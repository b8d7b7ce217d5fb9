"""DANDI's own client (dandi 0.81, whose validation passes) uploads an NWB file to a dandiset
with complete metadata; the archive validates it with dandischema in the background (as DANDI
does) and then publishes it, with the blob's sha256 that published assets need."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_settings
from tests.helpers.dandi import DandiArchive, require_dandi_venv, run_dandi, show
from tests.helpers.metadata import dandiset_metadata
from tests.helpers.nwb import make_nwb
from tests.helpers.server_process import ServerProcess
from zarrchive.services.dandi import validation
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

NWB_PATH = "sub-mouse1/sub-mouse1_ses-1.nwb"


@pytest.fixture(scope="module")
def strict_archive(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DandiArchive]:
    """A served archive that publishes only valid drafts (the default)."""
    require_dandi_venv()
    tmp = tmp_path_factory.mktemp("dandi-valid")
    settings = make_settings(
        seaweedfs,
        bucket,
        f"sqlite:///{tmp / 'zarrchive.sqlite3'}",
        tmp,
        publish_requires_valid=True,
    )
    archive = Archive.from_settings(settings)
    with archive.db.session() as session:
        owner = create_user(session, "owner")[1]
        stranger = create_user(session, "stranger")[1]
    archive.close()
    server = ServerProcess(settings, tmp / "server.log")
    server.start()
    try:
        yield DandiArchive(server, owner, stranger, tmp / "home")
    finally:
        server.stop()


def wait_validated(archive: DandiArchive, dandiset: str, timeout: float = 120) -> dict[str, Any]:
    """The draft's info once its validation is done (as ``dandi``'s wait_until_valid)."""
    deadline = time.monotonic() + timeout
    with archive.client(archive.owner) as api:
        while True:
            body: dict[str, Any] = api.get(f"/api/dandisets/{dandiset}/versions/draft/info/").json()
            busy = body["status"] in ("Pending", "Validating") or any(
                e["message"] == validation.PENDING_MESSAGE for e in body["asset_validation_errors"]
            )
            if not busy or time.monotonic() > deadline:
                return body
            time.sleep(0.5)


def test_a_dandi_upload_with_complete_metadata_validates_and_publishes(
    strict_archive: DandiArchive, tmp_path: Path
) -> None:
    with strict_archive.client(strict_archive.owner) as api:
        created = api.post(
            "/api/dandisets/",
            json={"name": "valid upload", "metadata": dandiset_metadata("valid upload")},
        )
        assert created.status_code == 200, created.text
        dandiset = created.json()["identifier"]
        # nothing uploaded yet: dandischema finds a draft without files invalid
        early = wait_validated(strict_archive, dandiset)
        assert early["status"] == "Invalid"
        assert api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/").status_code == 400

    url = f"{strict_archive.url}/api/dandisets/{dandiset}/versions/draft/"
    key = strict_archive.key(strict_archive.owner)
    done = run_dandi(["download", url], cwd=tmp_path, home=strict_archive.home, api_keys=key)
    assert done.returncode == 0, show(done)
    folder = tmp_path / dandiset
    nwb = make_nwb(folder / NWB_PATH, 4096, seed=7)
    done = run_dandi(
        ["upload", "-i", strict_archive.url], cwd=folder, home=strict_archive.home, api_keys=key
    )
    assert done.returncode == 0, show(done)

    body = wait_validated(strict_archive, dandiset)
    assert body["status"] == "Valid", body
    assert body["version_validation_errors"] == [] and body["asset_validation_errors"] == []
    with strict_archive.client(strict_archive.owner) as api:
        published = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
        assert published.status_code == 200, published.text
        version = published.json()["version"]
        listed = api.get(
            f"/api/dandisets/{dandiset}/versions/{version}/assets/", params={"metadata": "true"}
        ).json()["results"]
    (asset,) = listed
    digest = asset["metadata"]["digest"]
    assert digest["dandi:sha2-256"] == hashlib.sha256(nwb.read_bytes()).hexdigest()
    assert validation.check(asset["metadata"], "PublishedAsset") == []
    # and dandi downloads the published version
    (tmp_path / "published").mkdir()
    done = run_dandi(
        ["download", f"{strict_archive.url}/api/dandisets/{dandiset}/versions/{version}/"],
        cwd=tmp_path / "published",
        home=strict_archive.home,
    )
    assert done.returncode == 0, show(done)
    assert (tmp_path / "published" / dandiset / NWB_PATH).read_bytes() == nwb.read_bytes()
