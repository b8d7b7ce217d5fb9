"""Which tests are unit tests (``make unit``, ``pytest -m unit``): those that need no server.

A test is marked ``unit`` at collection when none of its fixtures starts or reaches a server
(SeaweedFS, PostgreSQL, the oracles' environments, the web site's browser) and its module is
not among those that start one themselves (a ``zarrchive serve`` child, Redis, an oracle's
venv in a subprocess).  What runs on the in-memory object store
(:class:`~zarrchive.storage.memory.MemoryObjectStore`, the ``memory_archive`` fixture) and
SQLite is a unit test; the same test on SeaweedFS or PostgreSQL is not.  A new pure test is a
unit test without doing anything; a module that starts a server by other means than these
fixtures joins :data:`NOT_UNIT`.
"""

from __future__ import annotations

import pytest

#: Fixtures that start or reach a server (directly or through the fixtures they take).
SERVER_FIXTURES = frozenset(
    {
        "seaweedfs",  # ``archive``, ``api``, ``bucket``, ``s3``... take it
        "module_database_url",
        "dandi_archive",
        "site",
        "base_url",
        "range_server",
        "lindi_python",
    }
)
#: Directories and modules whose tests start servers or subprocesses of their own.
NOT_UNIT = (
    "tests/cli/",
    "tests/dandi/",
    "tests/lindi/",
    "tests/multiprocess/",
    "tests/readme/",
    "tests/reliability/",
    "tests/sandbox/",
    "tests/scale/",
    "tests/api/test_accounts.py",  # the admin commands in subprocesses
    "tests/jobs/test_jobs_redis.py",
    "tests/jobs/test_jobs_rerun.py",  # RQ workers on Redis
    "tests/db/test_migrations.py",
    "tests/storage/test_seaweedfs.py",
)


def is_unit_test(item: pytest.Item) -> bool:
    """True when *item* needs no server (see the module's documentation)."""
    if any(item.nodeid.startswith(prefix) for prefix in NOT_UNIT):
        return False
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("database_url", "sqlite") != "sqlite":
        return False
    return not SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))


def mark_unit_tests(items: list[pytest.Item]) -> None:
    """Mark every unit test ``unit`` (a conftest hook's body)."""
    for item in items:
        if is_unit_test(item):
            item.add_marker(pytest.mark.unit)
