"""The upload service applying batches (``apply_pending``: claims, concurrent appliers) and
completing only the batch it verified (``complete_batch``), on the in-memory object store
(S3's own behaviour is the conformance suite's)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from tests.helpers.api_uploads import (
    assert_clean,
    batches,
    complete,
    info,
    open_and_put,
    open_batch,
    put_files,
    s3_body,
)
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.waiting import EVENT_TIMEOUT
from tests.helpers.zarr_client import md5, oracle_checksum
from zarrchive.db.models import BatchState, UploadBatch, User, utcnow
from zarrchive.errors import NoUploadInProgress
from zarrchive.services.identity.auth import Caller
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import uploads


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def test_a_live_claim_is_respected_and_an_expired_one_taken_over(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files = {"a": b"1"}
    open_and_put(api, zarr_id, files)
    complete(api, zarr_id)

    def claim(until: datetime) -> None:
        with archive.db.write_session() as session:
            session.execute(
                update(UploadBatch)
                .where(UploadBatch.zarr_id == zarr_id)
                .values(state=BatchState.APPLYING, claimed_by="other" * 6, claimed_until=until)
            )

    # another applier holds it (a claim that outlasts the test): without waiting, nothing
    # is applied
    claim(utcnow() + timedelta(hours=1))
    assert uploads.apply_pending(archive, zarr_id, wait=False) == 0
    assert batches(archive, zarr_id) == [("applying", 1)]
    # waiting, the claim expires (its holder died) and the batch is taken over
    until = utcnow() + timedelta(seconds=1)
    claim(until)
    assert uploads.apply_pending(archive, zarr_id, wait=True, timeout=EVENT_TIMEOUT) == 1
    assert utcnow() >= until
    assert info(api, zarr_id)["checksum"] == oracle_checksum(files)


def test_concurrent_appliers_apply_each_batch_once_in_order(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    expected: dict[str, bytes] = {}
    for i in range(4):
        batch = {"rewritten": f"v{i}".encode(), f"own/{i}": b"x" * i}
        open_and_put(api, zarr_id, batch)
        complete(api, zarr_id)
        expected.update(batch)
    applied: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def applier() -> None:
        barrier.wait()
        try:
            applied.append(uploads.apply_pending(archive, zarr_id, wait=True))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=applier) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sum(applied) == 4  # each batch applied exactly once
    assert s3_body(archive, zarr_id, "rewritten") == b"v3"
    assert info(api, zarr_id)["checksum"] == oracle_checksum(expected)
    assert_clean(archive, zarr_id)


def test_complete_applies_only_the_batch_it_verified(
    api: httpx.Client, zarr_id: str, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch A is verified; meanwhile A is cancelled and B opened: A's complete must not
    apply B (whose files were never verified), and B stays open and intact."""
    a = {"f": b"batch A"}
    put_files(open_batch(api, zarr_id, a), a)
    b = {"f": b"batch B, never uploaded"}
    verify = uploads.batches._verify_staged
    with archive.db.session() as session:
        owner = Caller.of(session.query(User).filter_by(username="owner").one())

    def verify_then_race(*args: Any, **kwargs: Any) -> Any:
        result = verify(*args, **kwargs)
        uploads.cancel_batch(archive, owner, zarr_id)
        uploads.start_batch(archive, owner, zarr_id, [(p, md5(v)) for p, v in b.items()])
        return result

    monkeypatch.setattr(uploads.batches, "_verify_staged", verify_then_race)
    with pytest.raises(NoUploadInProgress):
        uploads.complete_batch(archive, owner, zarr_id)
    with archive.db.session() as session:
        batch = session.query(UploadBatch).one()
        assert (batch.state, [f.etag for f in batch.files]) == ("open", [md5(b["f"])])
    assert s3_body(archive, zarr_id, "f") is None
