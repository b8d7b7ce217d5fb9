"""The reliability suite: one archive per module for the parts whose cases must change
nothing (they share it).  Its figures are printed at the end by ``tests/conftest.py``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import (
    LiveServer,
    _pg_state,
    _postgres_ready,
    _truncate_postgres,
    make_settings,
)
from tests.helpers.reliability import Tokens
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

_module_counter = itertools.count()


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def module_database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    if request.param == "sqlite":
        directory = tmp_path_factory.mktemp(f"db{next(_module_counter)}")
        return f"sqlite:///{directory / 'zarrchive.sqlite3'}"
    reason = _postgres_ready()
    if reason is not None:
        pytest.skip(reason)
    url = str(_pg_state["url"])
    _truncate_postgres(url)
    return url


@pytest.fixture(scope="module")
def module_archive(
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    module_database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Archive]:
    settings = make_settings(
        seaweedfs, bucket, module_database_url, tmp_path_factory.mktemp("archive")
    )
    archive = Archive.from_settings(settings)
    try:
        yield archive
    finally:
        archive.close()


@pytest.fixture(scope="module")
def module_tokens(module_archive: Archive) -> Tokens:
    with module_archive.db.session() as session:
        made = [create_user(session, n, admin=n == "admin")[1] for n in ("owner", "other", "admin")]
    return Tokens(*made)


@pytest.fixture
def module_api(
    live_server: LiveServer, module_archive: Archive, module_tokens: Tokens
) -> Iterator[httpx.Client]:
    """The owner's client of the live server, serving this module's archive."""
    live_server.app.state.archive = module_archive
    headers = {"Authorization": f"token {module_tokens.owner}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=60) as client:
        yield client
