"""Shared fixtures: a real SeaweedFS, real databases (SQLite and PostgreSQL), a live API.

- ``seaweedfs``: one ``weed mini`` per test session on free 127.0.0.1 ports.
- ``bucket``: a fresh versioned bucket per test (clean state).
- ``database_url``: parametrised over SQLite (a fresh file per test) and PostgreSQL
  (``ZARRCHIVE_TEST_DATABASE_URL``, default the ``test`` database on 127.0.0.1;
  tables truncated per test; skipped with the reason when unreachable).
- ``archive``: the runtime over both; ``api``: an httpx client of a real uvicorn
  server (one per session, pointed at each test's archive).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import uvicorn
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.helpers import reliability as reliability_figures
from tests.helpers import session_end
from tests.helpers.databases import deselect_other_databases, new_sqlite_database
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.memory_archive import memory_archive as memory_archive_of
from tests.helpers.schedule import longest_modules_first
from tests.helpers.setup_costs import share_botocore_loader, share_default_tls_context
from tests.helpers.unit_tests import mark_unit_tests
from zarrchive.api import create_app
from zarrchive.config import Settings
from zarrchive.db.models import Base
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.seaweedfs import SeaweedFS, free_port

REPO = Path(__file__).resolve().parents[1]

# Hypothesis' per-example deadline measures the machine's load, not the code: under
# ``make test`` (several workers, servers, CLIs on 2 cores) a 2 KiB md5 can take 200 ms.
# Speed is the benchmarks' business (bench/); property tests check properties only.
hypothesis.settings.register_profile("zarrchive", deadline=None)
hypothesis.settings.load_profile("zarrchive")
# Clients' setup costs paid once per test process, not per test (tests/helpers/setup_costs.py).
share_botocore_loader()
share_default_tls_context()
TEST_ACCESS_KEY = "zarrchive-test"
TEST_SECRET_KEY = "zarrchive-test-secret"
#: Test buckets named so are world-readable (anonymous GET), like the archive's public bucket.
PUBLIC_BUCKET_PREFIX = "zpub-"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

# The client's digest cache (client/local/digest_cache.py): the tests' own, never the user's (tests
# hash throwaway trees); the commands the tests run inherit it.
_TEST_CACHE = Path(tempfile.mkdtemp(prefix="zarrchive-test-cache-"))
os.environ.setdefault("ZARRCHIVE_CACHE_DIR", str(_TEST_CACHE))
atexit.register(shutil.rmtree, _TEST_CACHE, ignore_errors=True)


# -- S3 -------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = SeaweedFS(
        tmp_path_factory.mktemp("seaweedfs"),
        TEST_ACCESS_KEY,
        TEST_SECRET_KEY,
        public_read_buckets=[f"{PUBLIC_BUCKET_PREFIX}*"],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


_bucket_counter = itertools.count()


def _new_bucket(seaweedfs: SeaweedFS, prefix: str) -> str:
    name = f"{prefix}{os.getpid()}-{next(_bucket_counter)}-{uuid.uuid4().hex[:6]}"
    client: Any = seaweedfs.client()
    client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


@pytest.fixture(scope="session")
def bucket(seaweedfs: SeaweedFS) -> str:
    """The versioned, world-readable bucket of the session (the archive's public bucket).

    Tests share it: each works under keys of its own Zarrs and blobs (fresh UUIDs), so
    state never leaks between tests, and SeaweedFS is spared a collection per test.
    """
    return _new_bucket(seaweedfs, PUBLIC_BUCKET_PREFIX)


@pytest.fixture(scope="session")
def embargo_bucket(seaweedfs: SeaweedFS, bucket: str) -> str:
    """The versioned, private bucket of the session (the archive's embargo bucket)."""
    name = bucket.replace(PUBLIC_BUCKET_PREFIX, "zemb-", 1)
    client: Any = seaweedfs.client()
    # pytest may make this session fixture again for a later module (after one whose
    # parametrised fixtures differ): the bucket of the same name is already there
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=name)
    client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


@pytest.fixture
def fresh_bucket(seaweedfs: SeaweedFS) -> str:
    """A new, empty, versioned, world-readable bucket for this test alone."""
    return _new_bucket(seaweedfs, PUBLIC_BUCKET_PREFIX)


@pytest.fixture
def s3(seaweedfs: SeaweedFS) -> Any:
    """A raw boto3 client of the test SeaweedFS."""
    return seaweedfs.client()


# -- databases ------------------------------------------------------------------------------
_pg_state: dict[str, Any] = {}


def _postgres_url() -> str:
    return os.environ.get("ZARRCHIVE_TEST_DATABASE_URL", DEFAULT_PG_URL)


def _postgres_ready() -> str | None:
    """None if PostgreSQL is usable, else why not.

    The session gets a database of its own (``{db}_{pid}``, dropped at exit) so that
    concurrent test sessions on one server never disturb each other; without the right
    to create databases it falls back to resetting the configured one.
    """
    if "error" in _pg_state:
        return str(_pg_state["error"]) if _pg_state["error"] else None
    url = make_url(_postgres_url())
    try:
        admin = create_engine(
            url, connect_args={"connect_timeout": 3}, isolation_level="AUTOCOMMIT"
        )
        own = url.set(database=f"{url.database}_{os.getpid()}")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{own.database}"'))
                conn.execute(text(f'CREATE DATABASE "{own.database}"'))
            _pg_state["url"] = own.render_as_string(hide_password=False)
            atexit.register(_drop_database, admin, str(own.database))
        except Exception:  # no right to create databases: reset the configured one
            with admin.connect() as conn:
                conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
            _pg_state["url"] = url.render_as_string(hide_password=False)
        _pg_state["error"] = None
    except Exception as exc:  # any failure means: skip, and say why
        _pg_state["error"] = (
            f"PostgreSQL is not reachable at {url.render_as_string()} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); set ZARRCHIVE_TEST_DATABASE_URL "
            "or start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"
        )
    return str(_pg_state["error"]) if _pg_state["error"] else None


def _drop_database(admin: Any, name: str) -> None:
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    except Exception:  # best effort at exit
        pass
    admin.dispose()


def _truncate_postgres(url: str) -> None:
    engine = create_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with engine.begin() as conn:
        exists = conn.execute(text("SELECT to_regclass('public.zarrs')")).scalar()
        if exists is not None:
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":  # a copy of a migrated database (tests/helpers/databases.py)
        return new_sqlite_database(tmp_path / "zarrchive.sqlite3")
    reason = _postgres_ready()
    if reason is not None:
        pytest.skip(reason)
    url = str(_pg_state["url"])
    _truncate_postgres(url)
    return url


# -- the archive and its API --------------------------------------------------------------
def make_settings(
    seaweedfs: SeaweedFS, bucket: str, database_url: str, tmp_path: Path, **kw: Any
) -> Settings:
    base = Settings.from_env({})
    values: dict[str, Any] = {
        "data_dir": tmp_path,
        "database_url": database_url,
        "s3_endpoint_url": seaweedfs.endpoint_url,
        "s3_bucket": bucket,
        "s3_embargo_bucket": bucket.replace(PUBLIC_BUCKET_PREFIX, "zemb-", 1),
        "s3_access_key_id": TEST_ACCESS_KEY,
        "s3_secret_access_key": TEST_SECRET_KEY,
        # an ORM object used after its session fails the test (tests/services/test_sessions.py)
        "strict_sessions": True,
        # most tests publish drafts to test something else than metadata validation (Zarr
        # pins, snapshots, downloads): those that test validation set it (settings marker)
        "publish_requires_valid": False,
    }
    values.update(kw)
    return base.with_overrides(**values)


@pytest.fixture
def settings(
    request: pytest.FixtureRequest,
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    tmp_path: Path,
) -> Settings:
    """The test archive's settings; a module or test changes some with
    ``@pytest.mark.settings(name=value, ...)`` (e.g. ``published_zarrs``)."""
    marker = request.node.get_closest_marker("settings")
    overrides = marker.kwargs if marker is not None else {}
    return make_settings(seaweedfs, bucket, database_url, tmp_path, **overrides)


@pytest.fixture
def archive(settings: Settings) -> Iterator[Archive]:
    archive = Archive.from_settings(settings)
    try:
        yield archive
    finally:
        archive.close()


@pytest.fixture
def memory_archive(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path
) -> Iterator[Archive]:
    """The archive on the in-memory object store (tests/helpers/memory_archive.py), on each
    database: on SQLite a unit test (``make unit``); ``@pytest.mark.settings`` applies."""
    marker = request.node.get_closest_marker("settings")
    overrides = marker.kwargs if marker is not None else {}
    with memory_archive_of(tmp_path, database_url=database_url, **overrides) as archive:
        yield archive


class LiveServer:
    """A real uvicorn server in a thread, serving whichever archive a test sets."""

    def __init__(self) -> None:
        self.port = free_port()
        self.app = create_app(None)  # type: ignore[arg-type]
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 120  # generous: the machine may be loaded (issue #41)
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test API server did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    server = LiveServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class Users:
    owner: str
    other: str
    admin: str


@pytest.fixture
def users(archive: Archive) -> Users:
    tokens = []
    with archive.db.session() as session:
        for name, admin in (("owner", False), ("other", False), ("admin", True)):
            tokens.append(create_user(session, name, admin=admin)[1])
    return Users(*tokens)


@pytest.fixture
def api(live_server: LiveServer, archive: Archive, users: Users) -> Iterator[httpx.Client]:
    """An httpx client of the live server, authenticated as the owner."""
    live_server.app.state.archive = archive
    with httpx.Client(
        base_url=live_server.url,
        headers={"Authorization": f"token {users.owner}"},
        timeout=60,
    ) as client:
        yield client


@pytest.fixture
def anon(live_server: LiveServer, archive: Archive) -> Iterator[httpx.Client]:
    live_server.app.state.archive = archive
    with httpx.Client(base_url=live_server.url, timeout=60) as client:
        yield client


@pytest.fixture
def other(api: httpx.Client, users: Users) -> Iterator[httpx.Client]:
    """An httpx client of the live server, authenticated as the other user (not an owner)."""
    with httpx.Client(
        base_url=str(api.base_url), headers={"Authorization": f"token {users.other}"}, timeout=60
    ) as client:
        yield client


@pytest.fixture
def dandiset(api: httpx.Client) -> str:
    """A new dandiset owned by the ``api`` client's user."""
    response = api.post("/api/dandisets/", json={"name": "test dandiset"})
    assert response.status_code == 200, response.text
    identifier: str = response.json()["identifier"]
    return identifier


@pytest.fixture
def zarr_id(api: httpx.Client, dandiset: str) -> str:
    """A new, empty Zarr ``test.zarr`` in :func:`dandiset`."""
    response = api.post("/api/zarr/", json={"name": "test.zarr", "dandiset": dandiset})
    assert response.status_code == 200, response.text
    zid: str = response.json()["zarr_id"]
    return zid


@pytest.fixture
def embargoed(api: httpx.Client) -> tuple[str, str]:
    """A new embargoed dandiset and a Zarr ``s.zarr`` in it: (identifier, Zarr id)."""
    response = api.post("/api/dandisets/", json={"name": "secret", "embargo": True})
    assert response.status_code == 200
    dandiset = response.json()
    assert dandiset["embargoed"] is True and dandiset["embargo_status"] == "EMBARGOED"
    zarr = api.post("/api/zarr/", json={"name": "s.zarr", "dandiset": dandiset["identifier"]})
    return dandiset["identifier"], zarr.json()["zarr_id"]


@pytest.fixture
def held(archive: Archive) -> Iterator[HeldJobQueue]:
    """The archive's job queue holds jobs until the test runs them (and is the current archive)."""
    queue = HeldJobQueue()
    archive.jobs = queue
    set_current_archive(archive)
    try:
        yield queue
    finally:
        archive.jobs = None
        set_current_archive(None)


# -- the end of a run: skipped browser tests named, no stray traceback --------------------
def pytest_configure(config: pytest.Config) -> None:
    session_end.register(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect_other_databases(config, items)
    mark_unit_tests(items)  # `make unit` (tests/helpers/unit_tests.py)
    longest_modules_first(items)  # with pytest-xdist's --no-loadscope-reorder (Makefile)


# -- the reliability suite's figures, printed at the end (also under pytest-xdist) ---------
def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: hand the figures to the controller
        workeroutput["reliability"] = reliability_figures.export()


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without the plugin
def pytest_testnodedown(node: Any, error: Any) -> None:
    reliability_figures.merge(getattr(node, "workeroutput", {}).get("reliability", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    parts = reliability_figures.summary()
    if not parts:
        return
    terminalreporter.section(
        f"reliability figures ({'full' if reliability_figures.FULL else 'small budget'})"
    )
    for f in parts:
        line = f"{f.part:<14} cases {f.cases:>6}  faults {f.faults:>5}  5xx {f.server_errors:>4}"
        terminalreporter.write_line(line + (f"  ({'; '.join(f.notes)})" if f.notes else ""))
    target = os.environ.get("ZARRCHIVE_RELIABILITY_FIGURES")
    if target:
        reliability_figures.write_summary(Path(target))
