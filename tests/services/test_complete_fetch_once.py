"""``complete`` (and ``open``) read what they need once and pass it down (#40, "fetch once"):
the Zarr's row is read once to check the caller (then only locked), its open batch once, the
caller's ownership checked once; a batch changed while it was verified is refused, not queued
with files nobody verified.  On the in-memory object store; the apply is left to the job
(``held``), whose reads are its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import event

from tests.helpers.api_uploads import batches, open_batch, put_files
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.zarr_client import md5
from zarrchive.db.models import UploadBatch, User
from zarrchive.errors import Conflict
from zarrchive.services.identity.auth import Caller, require_owner
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import uploads
from zarrchive.services.zarr_engine.uploads import records

#: A SELECT of the Zarr's row (plain or ``FOR UPDATE``), not of other tables joined to it.
ZARR_ROW = re.compile(r"^\s*SELECT\s.*\bzarrs\.id\b.*\bFROM zarrs\b", re.S | re.I)
#: A SELECT of a batch's row (all its columns: the ORM loading an UploadBatch).
BATCH_ROW = re.compile(r"^\s*SELECT\s.*\bupload_batches\.uid\b.*\bFROM upload_batches\b", re.S)


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


@dataclass
class Reads:
    statements: list[str] = field(default_factory=list)
    owner_checks: int = 0

    def count(self, pattern: re.Pattern[str]) -> int:
        return sum(1 for s in self.statements if pattern.search(s))


@contextmanager
def counting(archive: Archive, monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    """Every statement sent on the archive's engine, and every ownership check, meanwhile."""
    reads = Reads()

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        reads.statements.append(statement)

    def owner_check(*args: Any, **kwargs: Any) -> None:
        reads.owner_checks += 1
        require_owner(*args, **kwargs)

    monkeypatch.setattr(records, "require_owner", owner_check)
    event.listen(archive.db.engine, "before_cursor_execute", seen)
    try:
        yield reads
    finally:
        event.remove(archive.db.engine, "before_cursor_execute", seen)
        monkeypatch.setattr(records, "require_owner", require_owner)


def owner_of(archive: Archive) -> Caller:
    with archive.db.session() as session:
        return Caller.of(session.query(User).filter_by(username="owner").one())


@pytest.mark.parametrize("verify_on_apply", [False, True], ids=["verify-now", "verify-on-apply"])
def test_complete_reads_the_zarr_and_its_batch_once(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
    verify_on_apply: bool,
) -> None:
    files = {"a": b"1", "d/b": b"2"}
    announced = [
        {"path": p, "etag": md5(b), **({"size": len(b)} if verify_on_apply else {})}
        for p, b in files.items()
    ]
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=announced)
    assert response.status_code == 200, response.text
    put_files(response.json(), files)
    owner = owner_of(archive)
    with counting(archive, monkeypatch) as reads:
        uid = uploads.complete_batch(archive, owner, zarr_id, verify_on_apply=verify_on_apply)
    assert uid is not None
    assert batches(archive, zarr_id) == [("queued", 1)]
    # one read to check the caller, one to take the lock (nothing read again only for the
    # dandiset's embargo); the open batch once; the owner once
    assert reads.count(ZARR_ROW) == 2, [s for s in reads.statements if ZARR_ROW.search(s)]
    assert reads.count(BATCH_ROW) == 1, [s for s in reads.statements if BATCH_ROW.search(s)]
    assert reads.owner_checks == 1


def test_a_batch_extended_while_it_was_verified_is_not_queued(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DANDI's ``files/`` announces a file to the open batch between ``complete``'s
    verification and its lock: the batch is refused (409) and stays open with every file,
    instead of being queued with a file nobody verified."""
    files = {"a": b"1"}
    put_files(open_batch(api, zarr_id, files), files)
    owner = owner_of(archive)
    verify = uploads.batches._verify_staged

    def verify_then_extend(*args: Any, **kwargs: Any) -> Any:
        result = verify(*args, **kwargs)
        uploads.extend_batch(archive, owner, zarr_id, [("late", md5(b"late"))])
        return result

    monkeypatch.setattr(uploads.batches, "_verify_staged", verify_then_extend)
    with pytest.raises(Conflict):
        uploads.complete_batch(archive, owner, zarr_id)
    with archive.db.session() as session:
        batch = session.query(UploadBatch).one()
        assert batch.state == "open"
        assert sorted((f.path, f.staged_version) for f in batch.files) == [
            ("a", None),
            ("late", None),
        ]


def test_open_reads_the_zarr_once_then_locks_it(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening a batch: the caller checked with the Zarr read once, the clash check and the
    URLs use that read (no read only for the bucket), the lock is taken once."""
    owner = owner_of(archive)
    with counting(archive, monkeypatch) as reads:
        opened = uploads.start_batch(archive, owner, zarr_id, [("a", md5(b"1"))])
    assert [u.path for u in opened.urls] == ["a"]
    assert reads.count(ZARR_ROW) == 2, [s for s in reads.statements if ZARR_ROW.search(s)]
    assert reads.owner_checks == 1
