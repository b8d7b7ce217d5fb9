"""A ``zarrchive serve`` process for DANDI's own client (``dandi``, from ``.venv-dandi``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import make_settings
from tests.helpers.dandi import DandiArchive, require_dandi_venv
from tests.helpers.server_process import ServerProcess
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS


@pytest.fixture(scope="module")
def dandi_archive(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DandiArchive]:
    require_dandi_venv()
    tmp = tmp_path_factory.mktemp("dandi-archive")
    settings = make_settings(seaweedfs, bucket, f"sqlite:///{tmp / 'zarrchive.sqlite3'}", tmp)
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
