"""Fixtures for client tests: the live API as seen by a client, a dandiset, zarr-python Zarrs.

The client tests run on SQLite only (the server's behaviour on PostgreSQL is the
API tests' business); set ``ZARRCHIVE_CLIENT_TESTS_POSTGRES=1`` to add PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LiveServer, Users
from zarrchive.client import ApiClient
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
