"""Issue #23 item 3: a batch opened *ahead* (``open`` with ``after=<uid of the open batch>``).

The uploader opens its next batch while the open one's last files are still being sent, and
PUTs the next batch's files at once: no PUT waits on a batch boundary.  The batch opened
ahead is checked and signed at once, but it is not the Zarr's open batch until the one it
follows is completed: ``complete`` and ``DELETE`` act on that one, completing it makes the
next one open (in the same transaction), and cancelling it cancels both."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.conftest import Users
from tests.helpers.api_uploads import assert_clean, batches, complete, info, put_files, s3_body
from tests.helpers.assets import client_for
from tests.helpers.dandi_zarr import announce, put_all
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.multipart import open_sized
from tests.helpers.zarr_client import oracle_checksum
from zarrchive.db.models import UploadBatch
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_prefix, staging_zarr_prefix

APPLY = "apply:"


def opened(response: httpx.Response) -> tuple[str, list[dict[str, Any]]]:
    """The uid and URLs of a batch opened (200)."""
    assert response.status_code == 200, response.text
    urls: list[dict[str, Any]] = response.json()
    return response.headers["X-Zarrchive-Batch"], urls


def follows(archive: Archive, zarr_id: str) -> dict[str, str | None]:
    """``uid -> uid of the batch it follows`` of the Zarr's batches."""
    with archive.db.session() as session:
        rows = session.execute(
            select(UploadBatch.uid, UploadBatch.id, UploadBatch.follows).where(
                UploadBatch.zarr_id == zarr_id
            )
        ).all()
    uid_of = {batch_id: uid for uid, batch_id, _ in rows}
    return {uid: uid_of.get(f) if f is not None else None for uid, _, f in rows}


FIRST = {".zgroup": b"{}", "a/0": b"zero", "a/1": b"one"}
SECOND = {"a/1": b"one again", "a/2": b"two", "b/0": b"bee"}


@pytest.mark.parametrize("verify", ["apply", "now"])
def test_a_batch_opened_ahead_is_sent_at_once_and_opens_when_the_one_before_completes(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue, verify: str
) -> None:
    first, first_urls = opened(open_sized(api, zarr_id, FIRST))
    second, second_urls = opened(open_sized(api, zarr_id, SECOND, after=first))
    assert second != first
    # both batches' files are sent before either is completed (the second's first)
    put_files(second_urls, SECOND)
    put_files(first_urls, FIRST)
    assert follows(archive, zarr_id) == {first: None, second: first}
    assert info(api, zarr_id)["upload_state"] == "open"

    params = {"verify": "apply"} if verify == "apply" else {}
    answer = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Zarrchive-Batch"] == first  # complete acted on the first
    # the second is now the open batch: in the same step, not a moment later
    assert follows(archive, zarr_id) == {first: None, second: None}
    assert batches(archive, zarr_id) == [("queued", 1), ("open", None)]
    assert info(api, zarr_id)["upload_in_progress"]
    answer = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params=params)
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Zarrchive-Batch"] == second
    held.run(APPLY)
    final = {**FIRST, **SECOND}  # the second batch's a/1 was applied after the first's
    assert info(api, zarr_id)["checksum"] == oracle_checksum(final)
    assert {p: s3_body(archive, zarr_id, p) for p in final} == final
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))
    assert_clean(archive, zarr_id)


def test_dandis_finalize_queues_the_open_batch_and_opens_the_one_ahead(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    # DANDI's flow on a Zarr whose uploader opened a batch ahead: files/ extends the open
    # batch (never the one ahead); finalize queues it and makes the one ahead the open batch
    first, first_urls = opened(open_sized(api, zarr_id, FIRST))
    second, second_urls = opened(open_sized(api, zarr_id, SECOND, after=first))
    put_files(first_urls, FIRST)
    put_files(second_urls, SECOND)
    extra = {"d/0": b"dandi"}
    put_all(announce(api, zarr_id, extra), extra)
    report = api.post(f"/api/zarr/{zarr_id}/finalize/")
    assert report.status_code == 200, report.text
    assert report.json()["dropped"] == []
    assert follows(archive, zarr_id) == {first: None, second: None}
    assert batches(archive, zarr_id) == [("queued", 1), ("open", None)]
    answer = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["X-Zarrchive-Batch"] == second
    held.run(APPLY)
    final = {**FIRST, **extra, **SECOND}
    assert info(api, zarr_id)["checksum"] == oracle_checksum(final)
    assert {p: s3_body(archive, zarr_id, p) for p in final} == final
    assert not list(archive.store.iter_objects(staging_zarr_prefix(zarr_id)))
    assert_clean(archive, zarr_id)


def test_cancel_cancels_the_open_batch_and_the_one_opened_ahead(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    kept = {"k": b"kept"}
    _uid, urls = opened(open_sized(api, zarr_id, kept))
    put_files(urls, kept)
    complete(api, zarr_id, wait="true")
    first, first_urls = opened(open_sized(api, zarr_id, FIRST))
    second, second_urls = opened(open_sized(api, zarr_id, SECOND, after=first))
    put_files(first_urls, FIRST)
    put_files(second_urls, SECOND)
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert batches(archive, zarr_id) == []
    for uid in (first, second):  # their staging objects are gone
        assert not list(archive.store.iter_objects(staging_prefix(zarr_id, uid)))
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 404  # nothing open
    held.run(APPLY)
    assert info(api, zarr_id)["checksum"] == oracle_checksum(kept)
    assert info(api, zarr_id)["upload_state"] == "at_rest"
    # the Zarr takes a plain batch again
    opened(open_sized(api, zarr_id, {"new": b"n"}))


def test_after_must_name_your_open_batch_and_one_batch_at_most_follows_it(
    api: httpx.Client,
    zarr_id: str,
    dandiset: str,
    archive: Archive,
    users: Users,
    held: HeldJobQueue,
) -> None:
    nothing_open = open_sized(api, zarr_id, SECOND, after="0" * 32)
    assert nothing_open.status_code == 409, nothing_open.text
    assert "not its open upload batch" in nothing_open.json()["detail"]
    first, _ = opened(open_sized(api, zarr_id, FIRST))
    for wrong, status in (("0" * 32, 409), (first.upper(), 400), ("x", 400), (first[:-1], 400)):
        answer = open_sized(api, zarr_id, SECOND, after=wrong)
        assert answer.status_code == status, (wrong, answer.text)
    second, urls = opened(open_sized(api, zarr_id, SECOND, after=first))
    # a second batch ahead: refused, unless it is the same one asked again (resume)
    other = open_sized(api, zarr_id, {"c": b"c"}, after=first)
    assert other.status_code == 409 and "already follows" in other.json()["detail"], other.text
    again, urls_again = opened(open_sized(api, zarr_id, SECOND, after=first, resume="true"))
    assert again == second and [u["path"] for u in urls_again] == [u["path"] for u in urls]
    not_again = open_sized(api, zarr_id, SECOND, after=first)  # without resume: refused
    assert not_again.status_code == 409, not_again.text
    # nor can a batch follow the one opened ahead, nor can a plain batch open
    assert open_sized(api, zarr_id, {"c": b"c"}, after=second).status_code == 409
    assert open_sized(api, zarr_id, {"c": b"c"}).status_code == 409
    # another owner may not open ahead of my batch
    ok = api.put(
        f"/api/dandisets/{dandiset}/users/",
        json=[{"username": "owner"}, {"username": "other"}],
    )
    assert ok.status_code == 200, ok.text
    with client_for(api, users.other) as theirs:
        refused = open_sized(theirs, zarr_id, {"c": b"c"}, after=second)
        assert refused.status_code == 409, refused.text
    assert follows(archive, zarr_id) == {first: None, second: first}
    # once the first is completed, 'after' it names no open batch
    put_files(opened(open_sized(api, zarr_id, FIRST, resume="true"))[1], FIRST)
    complete(api, zarr_id)
    late = open_sized(api, zarr_id, {"c": b"c"}, after=first)
    assert late.status_code == 409, late.text
    assert follows(archive, zarr_id) == {first: None, second: None}


@pytest.mark.parametrize(
    ("theirs", "ours", "problem"),
    [
        (
            {"x": b"1"},
            {"x/y": b"2"},
            "'x' is a file of the batch this one follows: it can't be a directory",
        ),
        (
            {"d/x": b"1"},
            {"d": b"2"},
            "'d' is a directory of the batch this one follows: it can't be a file",
        ),
    ],
)
def test_a_batch_opened_ahead_is_checked_against_the_batch_it_follows(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    theirs: dict[str, bytes],
    ours: dict[str, bytes],
    problem: str,
) -> None:
    first, _ = opened(open_sized(api, zarr_id, theirs))
    refused = open_sized(api, zarr_id, ours, after=first)
    assert refused.status_code == 400, refused.text
    assert refused.json()["detail"]["problems"] == [problem]
    assert follows(archive, zarr_id) == {first: None}  # nothing recorded


def test_two_batches_opened_ahead_at_once_one_wins(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    first, _ = opened(open_sized(api, zarr_id, FIRST))
    answers: list[int] = []
    start = threading.Barrier(4)

    def open_ahead(n: int) -> None:
        start.wait()
        answers.append(open_sized(api, zarr_id, {f"f{n}": b"x"}, after=first).status_code)

    threads = [threading.Thread(target=open_ahead, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 409, 409, 409]
    assert sorted(follows(archive, zarr_id).values(), key=lambda v: v or "") == [None, first]
