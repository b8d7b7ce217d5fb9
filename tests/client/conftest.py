"""Fixtures for client tests: the live API as seen by a client, a dandiset, zarr-python Zarrs.

The client tests run on SQLite only (the server's behaviour on PostgreSQL is the
API tests' business); set ``ZARRCHIVE_CLIENT_TESTS_POSTGRES=1`` to add PostgreSQL.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveServer, Users
from tests.helpers.digest_caches import LATER
from zarrchive.client import ApiClient
from zarrchive.client.local import digest_cache, hashing
from zarrchive.client.local.digest_cache import DigestCache
from zarrchive.client.upload import BatchRecords
from zarrchive.services.runtime import Archive

_DATABASES = ["sqlite"]
if os.environ.get("ZARRCHIVE_CLIENT_TESTS_POSTGRES"):
    _DATABASES.append(pytest.param("postgresql", marks=pytest.mark.postgres))  # type: ignore[arg-type]


@pytest.fixture(params=_DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"
    from tests.conftest import _postgres_ready, _postgres_url, _truncate_postgres

    reason = _postgres_ready()
    if reason is not None:
        pytest.skip(reason)
    url = _postgres_url()
    _truncate_postgres(url)
    return url


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The client's state directory (batch records), private to the test."""
    path = tmp_path / "client-state"
    monkeypatch.setenv("ZARRCHIVE_STATE_DIR", str(path))
    return path


@pytest.fixture
def client_env(
    live_server: LiveServer, archive: Archive, users: Users, state_dir: Path
) -> dict[str, str]:
    """Environment variables that point a client (library or CLI) at the live server."""
    live_server.app.state.archive = archive
    return {
        "ZARRCHIVE_URL": live_server.url,
        "ZARRCHIVE_TOKEN": users.owner,
        "ZARRCHIVE_STATE_DIR": str(state_dir),
    }


@pytest.fixture
def client(client_env: dict[str, str]) -> Iterator[ApiClient]:
    with ApiClient.from_env(environ=client_env) as api_client:
        yield api_client


@pytest.fixture
def records(state_dir: Path) -> BatchRecords:
    return BatchRecords(state_dir)


@pytest.fixture
def dandiset(client: ApiClient) -> str:
    return client.create_dandiset("client tests")


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest cache warns anew (its once-per-process warnings forgotten)."""
    monkeypatch.setattr(digest_cache, "_warned", set())


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[DigestCache]:
    """A digest cache in the test's directory (overrides pytest's own ``cache`` here)."""
    opened = DigestCache.open(tmp_path / "cache" / "digests.sqlite3")
    assert opened is not None
    yield opened
    opened.close()


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk's clock runs LATER ahead: the files just written look settled."""
    monkeypatch.setattr(hashing, "clock_ns", lambda: time.time_ns() + LATER)
