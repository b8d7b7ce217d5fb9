"""Embargo end dates on RQ (issue #38 item 5): the workers' tickers queue one check a period
(a Redis claim: several workers tick), the check runs as an RQ job in a forked work horse,
which queues the unembargo move on Redis; the dandiset becomes public, once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from tests.helpers.rq_workers import REDIS_URL, fresh_queue_name, worker_environment
from tests.helpers.zarr_client import create_zarr, expect, upload

from zarrchive.db.models import AuditRecord, Dandiset, EmbargoStatus
from zarrchive.jobs import RedisJobQueue, Ticker, run_worker
from zarrchive.services.dandi import embargo
from zarrchive.services.dandi.embargo_dates import utc_today
from zarrchive.services.runtime import Archive, set_current_archive

pytestmark = [pytest.mark.redis, pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]


@pytest.fixture
def queue_name() -> Iterator[str]:
    with fresh_queue_name("zarrchive-embargo-end") as name:
        yield name


def test_on_rq_one_of_the_workers_checks_and_the_due_dandiset_is_unembargoed(
    api: httpx.Client,
    archive: Archive,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    end = utc_today() + timedelta(days=1)
    created = api.post(
        "/api/dandisets/",
        params={"embargo": "true", "embargo_end_date": end.isoformat()},
        json={"name": "secret"},
    )
    identifier = expect(created)["identifier"]
    zarr_id = create_zarr(api, identifier)
    upload(api, zarr_id, {"a/0": b"zero", "b": b"bee"})
    # the work horses build their archive from the environment, as `zarrchive worker`'s do
    settings = archive.settings.with_overrides(redis_url=REDIS_URL, redis_queue=queue_name)
    for name, value in worker_environment(settings).items():
        if name.startswith("ZARRCHIVE_"):
            monkeypatch.setenv(name, value)
    set_current_archive(None)

    # two workers' tickers, their clock a day past the end: one claims the period
    day_after = datetime.combine(end, datetime.min.time(), tzinfo=UTC) + timedelta(days=1)
    queues = [RedisJobQueue(REDIS_URL, queue_name=queue_name) for _ in range(2)]
    tickers = [
        Ticker(q, [embargo.END_CHECK], clock=lambda: day_after, claim=q.claim_period)
        for q in queues
    ]
    try:
        assert [t.tick(embargo.END_CHECK) for t in tickers] == [True, False]
        assert queues[0].queue.count == 1
        # a worker runs the check, then the move the check queued (a job each, forked)
        run_worker(REDIS_URL, queue_name=queue_name, burst=True, logging_level="WARNING")
    finally:
        for queue in queues:
            queue.close()
        set_current_archive(None)
    with archive.db.session() as session:
        row = session.get(Dandiset, int(identifier))
        assert row is not None
        assert (row.embargoed, row.embargo_status) == (False, EmbargoStatus.OPEN.value)
        records = session.query(AuditRecord).filter(
            AuditRecord.dandiset_id == int(identifier),
            AuditRecord.record_type == "unembargo_dandiset",
        )
        assert [(r.username, r.details) for r in records] == [
            ("", {"reason": "embargo_end_date", "embargo_end_date": end.isoformat()})
        ]
    # public now: its objects are in the public bucket, the private one holds none
    assert archive.store.get(f"zarr/{zarr_id}/b") == b"bee"
    assert list(archive.embargo_store.iter_objects(f"zarr/{zarr_id}/")) == []
