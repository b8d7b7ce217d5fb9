"""Fixtures for client tests: the live API as seen by a client, a dandiset, zarr-python Zarrs.

The client tests run on SQLite only (the server's behaviour on PostgreSQL is the
API tests' business); set ``ZARRCHIVE_CLIENT_TESTS_POSTGRES=1`` to add PostgreSQL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import yield_files_local

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


def zarr_checksum_of(path: Path) -> str:
    """The checksum by the reference implementation, zarr-checksum."""
    return str(compute_zarr_checksum(yield_files_local(path)).digest)


def make_zarr(path: Path, *, seed: int = 0, coarse: int = 1) -> dict[str, np.ndarray]:
    """A zarr-python Zarr of about ``1850 / coarse`` small files; returns its arrays."""
    rng = np.random.default_rng(seed)
    root = zarr.open_group(path, mode="w")
    arrays = {
        "a": rng.integers(0, 1000, size=(260, 200), dtype="int32"),
        "g/b": rng.random((100, 100, 4)),
        "g/c": rng.integers(0, 255, size=(60, 100), dtype="uint8"),
    }
    chunks = {"a": (5 * coarse, 10), "g/b": (5 * coarse, 5, 4), "g/c": (3 * coarse, 5)}
    for name, data in arrays.items():
        array = root.create_array(name, shape=data.shape, chunks=chunks[name], dtype=data.dtype)
        array[...] = data
    root.attrs["title"] = "client test"
    return arrays


def file_count(path: Path) -> int:
    return sum(1 for p in path.rglob("*") if p.is_file())
