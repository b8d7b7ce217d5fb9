"""Embargo end dates (issue #38 item 5): DANDI's ``embargo_end_date`` at creation, shown as
``access[0].embargoedUntil`` and on the page to owners and reviewers; on that day the archive
unembargoes the dandiset by itself (a periodic job, with an injectable clock), once."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import LiveServer, Users
from tests.helpers.waiting import wait_until
from tests.helpers.web_forms import sign_in
from tests.helpers.zarr_client import expect
from zarrchive.db.models import AuditRecord, Dandiset, EmbargoStatus
from zarrchive.errors import InvalidInput
from zarrchive.jobs import InProcessJobQueue, PeriodicJob, Ticker
from zarrchive.services.dandi import embargo
from zarrchive.services.dandi.embargo_dates import (
    EMBARGO_DAYS,
    FUNDED_EMBARGO_DAYS,
    embargo_end_date,
    utc_today,
)
from zarrchive.services.runtime import Archive, set_current_archive

TODAY = date(2026, 11, 29)


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def _create(api: httpx.Client, **params: str) -> httpx.Response:
    return api.post(
        "/api/dandisets/", params={"embargo": "true", **params}, json={"name": "secret"}
    )


def _row(archive: Archive, identifier: str) -> tuple[bool, str, date | None]:
    with archive.db.session() as session:
        row = session.get(Dandiset, int(identifier))
        assert row is not None
        return row.embargoed, row.embargo_status, row.embargo_end_date


def _unembargo_records(archive: Archive, identifier: str) -> list[dict[str, Any]]:
    with archive.db.session() as session:
        return [
            {"username": r.username, **r.details}
            for r in session.query(AuditRecord).filter(
                AuditRecord.dandiset_id == int(identifier),
                AuditRecord.record_type == "unembargo_dandiset",
            )
        ]


# -- the dates a creation may give (pure) --------------------------------------------------
@given(st.integers(min_value=-4000, max_value=4000), st.booleans())
def test_an_end_date_is_after_today_and_within_dandis_limit(days: int, funded: bool) -> None:
    end = TODAY + timedelta(days=days)
    longest = FUNDED_EMBARGO_DAYS if funded else EMBARGO_DAYS
    if 0 < days <= longest:
        assert embargo_end_date(end.isoformat(), embargoed=True, funded=funded, today=TODAY) == end
    else:
        with pytest.raises(InvalidInput):
            embargo_end_date(end.isoformat(), embargoed=True, funded=funded, today=TODAY)


@pytest.mark.parametrize(
    "given_text",
    ["", "tomorrow", "2027-13-01", "2027-02-30", "2027-1-1", "20270101", "2027-06-30T00:00"],
)
def test_a_malformed_end_date_is_refused(given_text: str) -> None:
    with pytest.raises(InvalidInput, match="YYYY-MM-DD"):
        embargo_end_date(given_text, embargoed=True, today=TODAY)


def test_the_default_end_is_two_years_and_an_open_dandiset_has_none() -> None:
    assert embargo_end_date(None, embargoed=True, today=TODAY) == TODAY + timedelta(days=730)
    assert embargo_end_date(None, embargoed=False, today=TODAY) is None
    with pytest.raises(InvalidInput, match="embargo=true"):
        embargo_end_date("2027-01-01", embargoed=False, today=TODAY)


# -- the API -----------------------------------------------------------------------------
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_end_date_given_at_creation_is_kept_and_shown_as_dandis(
    api: httpx.Client, archive: Archive
) -> None:
    end = (utc_today() + timedelta(days=400)).isoformat()
    identifier = expect(_create(api, embargo_end_date=end))["identifier"]
    assert _row(archive, identifier)[2] == date.fromisoformat(end)
    draft = expect(api.get(f"/api/dandisets/{identifier}/versions/draft/"))
    assert draft["access"] == [
        {
            "schemaKey": "AccessRequirements",
            "status": "dandi:EmbargoedAccess",
            "embargoedUntil": end,
        }
    ]
    # a metadata PUT can't change it: the archive writes the embargo it enforces
    changed = {
        **draft,
        "access": [{"schemaKey": "AccessRequirements", "status": "dandi:OpenAccess"}],
    }
    expect(
        api.put(
            f"/api/dandisets/{identifier}/versions/draft/",
            json={"name": draft["name"], "metadata": changed},
        )
    )
    again = expect(api.get(f"/api/dandisets/{identifier}/versions/draft/"))
    assert again["access"] == draft["access"]
    # DANDI's funder and award: five years allowed, the funder a contributor
    far = (utc_today() + timedelta(days=4 * 365)).isoformat()
    funded = expect(
        _create(api, embargo_end_date=far, funding_source="NIH", award_number="R01MH123456")
    )
    draft = expect(api.get(f"/api/dandisets/{funded['identifier']}/versions/draft/"))
    assert draft["access"][0]["embargoedUntil"] == far
    assert {
        "schemaKey": "Organization",
        "name": "NIH",
        "awardNumber": "R01MH123456",
        "roleName": ["dcite:Funder"],
        "includeInCitation": False,
    } in draft["contributor"]
    # no date given: DANDI's two years
    plain = expect(_create(api))["identifier"]
    assert _row(archive, plain)[2] == utc_today() + timedelta(days=EMBARGO_DAYS)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_bad_end_dates_are_refused_with_400_and_nothing_created(
    api: httpx.Client, archive: Archive
) -> None:
    today = utc_today()
    bad = [
        {"embargo_end_date": (today - timedelta(days=1)).isoformat()},  # past
        {"embargo_end_date": today.isoformat()},  # not after today
        {"embargo_end_date": "30/06/2027"},  # malformed
        {"embargo_end_date": "2027-02-30"},  # no such day
        {"embargo_end_date": "2027-01-01" * 10},  # far too long
        {"embargo_end_date": (today + timedelta(days=3 * 365)).isoformat()},  # too far
        {"funding_source": "NIH"},  # a funder without an award
        {"award_number": "R01"},  # an award without a funder
    ]
    for params in bad:
        answer = _create(api, **params)
        assert answer.status_code == 400, (params, answer.text)
        assert (
            "embargo_end_date" in answer.text
            or "award_number" in answer.text
            or "funding" in answer.text
        )
    open_with_date = api.post(
        "/api/dandisets/",
        params={"embargo_end_date": (today + timedelta(days=9)).isoformat()},
        json={"name": "open"},
    )
    assert open_with_date.status_code == 400, open_with_date.text
    with archive.db.session() as session:
        assert session.query(Dandiset).count() == 0


# -- the date unembargoes by itself ----------------------------------------------------------
def _jobs_in_process(archive: Archive) -> InProcessJobQueue:
    queue = InProcessJobQueue(threads=1, backoff=0.01)
    archive.jobs = queue
    set_current_archive(archive)
    return queue


def test_a_dandiset_whose_day_has_come_is_unembargoed_by_itself_once(
    api: httpx.Client, archive: Archive
) -> None:
    """The ticker (clock given: a day after the end) queues the check; the check starts the
    move of the due dandiset only, records it with no user, and the move makes it public."""
    end = utc_today() + timedelta(days=3)
    due = expect(_create(api, embargo_end_date=end.isoformat()))["identifier"]
    later = expect(_create(api, embargo_end_date=(end + timedelta(days=5)).isoformat()))[
        "identifier"
    ]
    queue = _jobs_in_process(archive)
    clock = datetime.combine(end, datetime.min.time(), tzinfo=UTC) + timedelta(hours=1)
    ticker = Ticker(queue, [embargo.END_CHECK], clock=lambda: clock).start()
    try:
        wait_until(
            lambda: _row(archive, due)[:2] == (False, EmbargoStatus.OPEN.value),
            lambda: f"dandiset {due} unembargoed by itself: {_row(archive, due)}",
        )
        assert queue.join(120)
    finally:
        ticker.stop()
        queue.close()
        archive.jobs = None
        set_current_archive(None)
    assert _row(archive, later) == (True, EmbargoStatus.OPEN.value, end + timedelta(days=5))
    assert _row(archive, due)[2] == end
    assert _unembargo_records(archive, due) == [
        {"username": "", "reason": "embargo_end_date", "embargo_end_date": end.isoformat()}
    ]
    assert _unembargo_records(archive, later) == []
    # public: an anonymous reader sees it; its draft's access says open since the date
    draft = expect(api.get(f"/api/dandisets/{due}/versions/draft/"))
    assert draft["access"] == [
        {
            "schemaKey": "AccessRequirements",
            "status": "dandi:OpenAccess",
            "embargoedUntil": end.isoformat(),
        }
    ]


def test_checks_racing_start_one_unembargo(api: httpx.Client, archive: Archive) -> None:
    """Many checks at once (processes or threads: the database decides) start one move: one
    audit record, one queued move.  On both databases: the database is the subject."""
    end = utc_today() + timedelta(days=1)
    identifier = expect(_create(api, embargo_end_date=end.isoformat()))["identifier"]
    queued: list[str] = []

    class Recorder(InProcessJobQueue):
        def enqueue(self, func: Any, kwargs: Any = None, **kw: Any) -> str:
            queued.append(str(func))
            return "held"

    archive.jobs = Recorder(threads=1)
    started: list[list[str]] = []
    barrier = threading.Barrier(4)

    def check() -> None:
        barrier.wait()
        started.append(embargo.end_due_embargoes(archive, end))

    threads = [threading.Thread(target=check) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        archive.jobs.close()
        archive.jobs = None
    assert sorted(s for found in started for s in found) == [identifier]
    assert queued == [embargo.UNEMBARGO_JOB]
    assert len(_unembargo_records(archive, identifier)) == 1
    assert _row(archive, identifier)[1] == EmbargoStatus.UNEMBARGOING.value


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_nothing_is_unembargoed_before_its_day(api: httpx.Client, archive: Archive) -> None:
    end = utc_today() + timedelta(days=2)
    identifier = expect(_create(api, embargo_end_date=end.isoformat()))["identifier"]
    assert embargo.end_due_embargoes(archive, end - timedelta(days=1)) == []
    assert _row(archive, identifier) == (True, EmbargoStatus.OPEN.value, end)
    assert _unembargo_records(archive, identifier) == []


# -- the page shows the date to owners and reviewers -----------------------------------------
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_page_shows_the_end_date_to_owners_and_reviewers_only(
    api: httpx.Client, archive: Archive, live_server: LiveServer, users: Users
) -> None:
    end = (utc_today() + timedelta(days=100)).isoformat()
    identifier = expect(_create(api, embargo_end_date=end))["identifier"]
    expect(api.put(f"/api/dandisets/{identifier}/reviewers/", json=[{"username": "other"}]))
    shown = f'id="embargo-end"><time datetime="{end}">'

    def page(token: str | None) -> httpx.Response:
        with httpx.Client(base_url=live_server.url, timeout=60) as client:
            if token is not None:
                sign_in(client, token)
            return client.get(f"/dandiset/{identifier}")

    assert shown in expect_page(page(users.owner))
    assert shown in expect_page(page(users.other))  # the reviewer
    assert shown in expect_page(page(users.admin))
    assert page(None).status_code in (401, 403, 404)  # anonymous: no page at all
    expect(api.put(f"/api/dandisets/{identifier}/reviewers/", json=[]))
    assert page(users.other).status_code in (403, 404)  # no longer a reviewer
    # public: nothing to show
    embargo.start_unembargo(archive, _owner(archive, users), identifier)
    assert "embargo-end" not in expect_page(page(users.owner))


def expect_page(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text[:2000]
    return answer.text


def _owner(archive: Archive, users: Users) -> Any:
    from zarrchive.services.identity.auth import authenticate

    return authenticate(archive, users.owner)


# -- the ticker ------------------------------------------------------------------------------
def test_the_ticker_queues_at_once_with_its_clock_only_what_it_claims(archive: Archive) -> None:
    queued: list[tuple[str, dict[str, Any], str | None]] = []

    class Recorder(InProcessJobQueue):
        def enqueue(self, func: Any, kwargs: Any = None, **kw: Any) -> str:
            queued.append((str(func), dict(kwargs or {}), kw.get("key")))
            if len(queued) == 2:
                raise RuntimeError("Redis away")  # logged; the ticker goes on
            return "held"

    jobs = Recorder(threads=1)
    moment = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    hourly = PeriodicJob(embargo.END_CHECK.func, every=3600.0)
    refused = PeriodicJob("zarrchive.services.dandi.embargo:unembargo_job", every=3600.0)
    ticker = Ticker(
        jobs, [hourly, refused], clock=lambda: moment, claim=lambda job: job is hourly
    ).start()
    try:
        wait_until(lambda: ticker.queued == 1, "the first tick")
        assert not ticker.tick(hourly)  # the queue failed: logged, not raised
        assert ticker.tick(hourly)
    finally:
        ticker.stop()
        jobs.close()
    assert [q[0] for q in queued] == [embargo.END_CHECK.func] * 3
    assert queued[0][1:] == ({"now": moment.isoformat()}, f"every:{embargo.END_CHECK.func}")


def test_the_api_process_ticks_only_when_it_runs_the_jobs(archive: Archive) -> None:
    from zarrchive.jobs import RedisJobQueue
    from zarrchive.services.periodic import PERIODIC_JOBS, start_in_process

    assert embargo.END_CHECK in PERIODIC_JOBS
    assert start_in_process(None) is None and start_in_process(archive) is None  # no queue
    archive.jobs = InProcessJobQueue(threads=1)
    try:
        ticker = start_in_process(archive, clock=lambda: datetime(2000, 1, 1, tzinfo=UTC))
        assert ticker is not None
        ticker.stop()
    finally:
        archive.jobs.close()
        archive.jobs = None
    assert callable(
        RedisJobQueue.claim_period
    )  # on Redis the workers tick (tests/jobs/...on_rq.py)
