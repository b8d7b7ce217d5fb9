"""Issue #23 item 3: ``complete`` with ``verify=apply`` queues the batch at once and leaves the
check of its staged objects to the apply, which lists them before any copy: a batch with a
file missing (or of another size than declared) is refused whole when applied, nothing of it
becomes visible, and ``GET .../upload/refused/?batch=<uid>`` names its files."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import assert_clean, batches, info, oracle, put_files, s3_body
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.manifest_records import manifest_as_listed
from tests.helpers.multipart import open_sized
from tests.helpers.waiting import EVENT_TIMEOUT, wait_until
from tests.helpers.zarr_client import md5
from zarrchive.errors import StorageError
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import tree_updater
from zarrchive.services.zarr_engine.manifests import ManifestSource
from zarrchive.services.zarr_engine.uploads import apply, staging
from zarrchive.storage.keys import staging_prefix
from zarrchive.storage.objects import ObjectStore

APPLY = "apply:"
BATCH = "X-Zarrchive-Batch"
FILES = {".zgroup": b"{}", "arr/.zarray": b"{...}", "arr/0": b"zero", "arr/1": b"one"}
#: The apply's grace for an open upload's next batch where a test needs it long: longer than
#: any step of the test on a loaded machine (issue #41); nothing passes waits for it.
GRACE = EVENT_TIMEOUT


def open_declared(
    api: httpx.Client, zarr_id: str, files: dict[str, bytes], sizes: dict[str, int] | None = None
) -> list[dict[str, str]]:
    """Open a batch declaring every file's size (*sizes* overrides some); its URLs."""
    sizes = sizes or {}
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": p, "etag": md5(b), "size": sizes.get(p, len(b))} for p, b in files.items()],
    )
    assert response.status_code == 200, response.text
    urls: list[dict[str, str]] = response.json()
    return urls


def queue(api: httpx.Client, zarr_id: str) -> tuple[str, dict[str, Any]]:
    """Complete with ``verify=apply``: the batch's uid (header) and the answer."""
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"verify": "apply"})
    assert response.status_code == 200, response.text
    uid = response.headers["X-Zarrchive-Batch"]
    assert len(uid) == 32
    answer: dict[str, Any] = response.json()
    return uid, answer


def refused(api: httpx.Client, zarr_id: str, *uids: str) -> list[dict[str, Any]]:
    response = api.get(f"/api/zarr/{zarr_id}/upload/refused/", params={"batch": list(uids)})
    assert response.status_code == 200, response.text
    rows: list[dict[str, Any]] = response.json()
    return rows


def queue_batches(api: httpx.Client, zarr_id: str, *batches: dict[str, bytes]) -> list[str]:
    """Open, send and queue (``verify=apply``) each batch in turn: their uids."""
    uids = []
    for files in batches:
        put_files(open_declared(api, zarr_id, files), files)
        uids.append(queue(api, zarr_id)[0])
    return uids


def staged_keys(archive: Archive, zarr_id: str, uid: str) -> list[str]:
    return [v.key for v in archive.store.iter_versions(staging_prefix(zarr_id, uid))]


def test_a_batch_queued_unverified_is_checked_and_applied(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    put_files(open_declared(api, zarr_id, FILES), FILES)
    uid, answer = queue(api, zarr_id)
    # queued at once: nothing visible, the next batch may open
    assert answer["upload_state"] == "applying" and not answer["upload_in_progress"]
    assert answer["file_count"] == 0 and s3_body(archive, zarr_id, "arr/0") is None
    assert batches(archive, zarr_id) == [("queued", 1)]
    more = {"arr/2": b"two"}
    put_files(open_declared(api, zarr_id, more), more)
    uid2, _answer = queue(api, zarr_id)
    assert uid2 != uid
    assert held.run(APPLY) == 1
    everything = {**FILES, **more}
    assert info(api, zarr_id)["checksum"] == oracle(everything)
    assert info(api, zarr_id)["upload_state"] == "at_rest"
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"
    assert s3_body(archive, zarr_id, "arr/2") == b"two"
    assert refused(api, zarr_id, uid, uid2) == []
    assert staged_keys(archive, zarr_id, uid) == staged_keys(archive, zarr_id, uid2) == []
    assert_clean(archive, zarr_id)


def test_a_missing_file_refuses_the_batch_when_applied_and_nothing_changes(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    put_files(open_declared(api, zarr_id, FILES), FILES)
    first, _answer = queue(api, zarr_id)
    assert held.run(APPLY) == 1
    before = info(api, zarr_id)
    assert before["checksum"] == oracle(FILES)

    # a batch whose "arr/0" never reached S3 (its other files did), then a good one
    bad = {"arr/0": b"ZERO", "arr/1": b"ONE", "new/x": b"x"}
    urls = open_declared(api, zarr_id, bad)
    put_files([u for u in urls if u["path"] != "arr/0"], bad)
    bad_uid, answer = queue(api, zarr_id)  # answered at once: the check is the apply's
    assert answer["upload_state"] == "applying"
    good = {"arr/2": b"two"}
    put_files(open_declared(api, zarr_id, good), good)
    good_uid, _answer = queue(api, zarr_id)
    held.run(APPLY)

    # the bad batch changed nothing (not even its files that were there); the next applied
    after = info(api, zarr_id)
    assert after["upload_state"] == "at_rest"
    assert after["checksum"] == oracle({**FILES, **good})
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"
    assert s3_body(archive, zarr_id, "arr/1") == b"one"
    assert s3_body(archive, zarr_id, "new/x") is None
    assert api.get(f"/api/zarr/{zarr_id}/new/x").status_code == 404
    rows = refused(api, zarr_id, bad_uid, good_uid, first)
    assert [(r["batch"], r["path"], r["expected_md5"], r["found_md5"]) for r in rows] == [
        (bad_uid, "arr/0", md5(b"ZERO"), "missing")
    ]
    assert refused(api, zarr_id, good_uid) == []
    assert staged_keys(archive, zarr_id, bad_uid) == []  # its staging area is gone
    assert batches(archive, zarr_id) == []
    assert_clean(archive, zarr_id)

    # sent again, it is applied
    put_files(open_declared(api, zarr_id, bad), bad)
    queue(api, zarr_id)
    held.run(APPLY)
    assert info(api, zarr_id)["checksum"] == oracle({**FILES, **good, **bad})


def test_a_size_other_than_declared_refuses_the_batch(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    urls = open_declared(api, zarr_id, FILES, sizes={"arr/1": 4})
    put_files(urls, FILES)
    uid, _answer = queue(api, zarr_id)
    held.run(APPLY)
    assert info(api, zarr_id)["file_count"] == 0
    assert info(api, zarr_id)["upload_state"] == "at_rest"
    rows = refused(api, zarr_id, uid)
    assert [(r["path"], r["expected_md5"], r["found_md5"]) for r in rows] == [
        ("arr/1", "4 bytes", "3 bytes")
    ]
    assert s3_body(archive, zarr_id, ".zgroup") is None


def test_without_declared_sizes_the_batch_is_verified_by_complete(
    api: httpx.Client, zarr_id: str, held: HeldJobQueue
) -> None:
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": p, "etag": md5(b)} for p, b in FILES.items()],
    )
    assert response.status_code == 200, response.text
    put_files([u for u in response.json() if u["path"] != "arr/0"], FILES)
    answer = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"verify": "apply"})
    assert answer.status_code == 400, answer.text
    assert "arr/0" in answer.text
    assert info(api, zarr_id)["upload_in_progress"]  # left open, as without verify=apply


def test_the_refused_listing_asks_for_at_most_100_batches(api: httpx.Client, zarr_id: str) -> None:
    many = [f"{i:032x}" for i in range(101)]
    response = api.get(f"/api/zarr/{zarr_id}/upload/refused/", params={"batch": many})
    assert response.status_code == 400, response.text
    assert refused(api, zarr_id, *many[:100]) == []


def test_a_batch_checked_while_the_one_before_is_copied_is_refused_all_the_same(
    api: httpx.Client, zarr_id: str, archive: Archive, held: HeldJobQueue
) -> None:
    # three batches queued before the apply runs: the check of each of the last two is
    # listed while the one before it is copied; the third lacks a file
    uids = queue_batches(api, zarr_id, FILES, {"arr/2": b"two"})
    bad = {"arr/3": b"three", "arr/4": b"four"}
    urls = open_declared(api, zarr_id, bad)
    put_files([u for u in urls if u["path"] != "arr/4"], bad)
    uids.append(queue(api, zarr_id)[0])
    held.run(APPLY)
    assert info(api, zarr_id)["checksum"] == oracle({**FILES, "arr/2": b"two"})
    assert s3_body(archive, zarr_id, "arr/3") is None
    rows = refused(api, zarr_id, *uids)
    assert [(r["batch"], r["path"], r["found_md5"]) for r in rows] == [
        (uids[2], "arr/4", "missing")
    ]
    for uid in uids:  # every staging area dropped before the apply returned
        assert staged_keys(archive, zarr_id, uid) == []
    assert batches(archive, zarr_id) == []
    assert_clean(archive, zarr_id)


def record_copies_and_drops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float]]:
    """Every batch copy and staging drop of the appliers from now on: ``(what, when)``."""
    events: list[tuple[str, float]] = []
    copy, drop = apply._copy_into_place, staging.drop_staging

    def copied(*args: Any) -> Any:
        events.append(("copy", time.monotonic()))
        return copy(*args)

    def dropped(store: Any, zid: str, uid: str) -> None:
        events.append(("drop", time.monotonic()))
        drop(store, zid, uid)

    monkeypatch.setattr(apply, "_copy_into_place", copied)
    monkeypatch.setattr(apply, "drop_staging", dropped)
    return events


def test_staging_drops_wait_until_no_batch_does(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the drops (seconds of S3 deletes per batch) never run beside the copies of a backlog:
    # the applier holds them until nothing is queued, then drops every staging area
    events = record_copies_and_drops(monkeypatch)
    uids = queue_batches(api, zarr_id, *({f"arr/{i}": bytes([i]) * 10} for i in range(3)))
    held.run(APPLY)
    assert [what for what, _ in events] == ["copy"] * 3 + ["drop"] * 3
    for uid in uids:
        assert staged_keys(archive, zarr_id, uid) == []
    assert info(api, zarr_id)["file_count"] == 3


def test_the_apply_job_waits_for_an_open_upload_s_next_batch_before_dropping(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the job catches up with an upload that is still going on (a batch is open): the next
    # batch, queued within the grace, is applied before any staging area is dropped (a grace
    # long enough for this test on a loaded machine: the job goes on when the batch comes)
    monkeypatch.setattr(apply, "DROP_GRACE_SECONDS", GRACE)
    events = record_copies_and_drops(monkeypatch)
    first = queue_batches(api, zarr_id, {"arr/0": b"zero"})
    second = {"arr/1": b"one"}
    urls = open_declared(api, zarr_id, second)
    job = threading.Thread(target=held.run, args=(APPLY,))
    job.start()
    wait_until(lambda: info(api, zarr_id)["file_count"] == 1, "the first batch to be applied")
    put_files(urls, second)
    uid = queue(api, zarr_id)[0]
    held.run(APPLY)  # (the job that queueing asked for, if the running one has finished)
    job.join(timeout=EVENT_TIMEOUT)
    assert not job.is_alive(), "the apply job did not end"
    assert [what for what, _ in events] == ["copy", "copy", "drop", "drop"]
    for staged in (*first, uid):
        assert staged_keys(archive, zarr_id, staged) == []
    assert info(api, zarr_id)["checksum"] == oracle({"arr/0": b"zero", **second})


def test_the_grace_ends_and_the_staging_areas_are_dropped_with_the_upload_still_open(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(apply, "DROP_GRACE_SECONDS", 0.5)
    events = record_copies_and_drops(monkeypatch)
    (uid,) = queue_batches(api, zarr_id, {"arr/0": b"zero"})
    open_declared(api, zarr_id, {"arr/1": b"one"})  # sent by nobody
    held.run(APPLY)
    (copied, when_copied), (dropped, when_dropped) = events
    assert (copied, dropped) == ("copy", "drop")
    assert when_dropped - when_copied >= 0.5  # it waited for a batch that did not come
    assert staged_keys(archive, zarr_id, uid) == []
    assert info(api, zarr_id)["upload_in_progress"]


def test_a_request_that_applies_inline_does_not_wait(
    zarr_id: str, archive: Archive, api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # without a job queue, complete applies the batch itself: it never waits for the next
    # batch of an upload still open (here one opened ahead, which complete makes the open one)
    monkeypatch.setattr(apply, "DROP_GRACE_SECONDS", GRACE)
    first = {"arr/0": b"zero"}
    response = open_sized(api, zarr_id, first)
    put_files(response.json(), first)
    assert open_sized(api, zarr_id, {"arr/1": b"one"}, after=response.headers[BATCH]).is_success
    started = time.monotonic()
    uid = queue(api, zarr_id)[0]
    assert time.monotonic() - started < GRACE  # it did not wait for the grace to end
    assert staged_keys(archive, zarr_id, uid) == []
    assert info(api, zarr_id)["file_count"] == 1 and info(api, zarr_id)["upload_in_progress"]


def test_the_manifest_job_is_queued_at_rest_before_the_staging_drops_end(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a backlog's drops take seconds each: the manifest of the Zarr at rest must not wait for
    # them (a second job thread, or another worker, makes it meanwhile)
    queued_while_dropping: list[list[str]] = []
    drop = staging.drop_staging

    def dropped(store: Any, zid: str, uid: str) -> None:
        queued_while_dropping.append(held.queued("manifest:"))
        drop(store, zid, uid)

    monkeypatch.setattr(apply, "drop_staging", dropped)
    for i in range(2):
        files = {f"arr/{i}": bytes([i]) * 10}
        put_files(open_declared(api, zarr_id, files), files)
        queue(api, zarr_id)
    assert held.queued("manifest:") == []
    held.run(APPLY)
    assert queued_while_dropping == [[f"manifest:{zarr_id}"]] * 2
    assert held.queued("manifest:") == [f"manifest:{zarr_id}"]  # once: no second job


class CopySpy:
    """Counts the staged objects copied into place, by batch uid, and lets a test wait until
    every file of a batch was copied."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.copied: dict[str, int] = {}
        self.changed = threading.Condition()
        copy = ObjectStore.copy_within

        def spy(store: ObjectStore, source: str, *args: Any, **kwargs: Any) -> Any:
            written = copy(store, source, *args, **kwargs)
            uid = source.split("/")[2]  # zarr-staging/{zarr_id}/{uid}/{path}
            with self.changed:
                self.copied[uid] = self.copied.get(uid, 0) + 1
                self.changed.notify_all()
            return written

        monkeypatch.setattr(ObjectStore, "copy_within", spy)

    def wait_for(self, uid: str, count: int, timeout: float = 60) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.copied.get(uid, 0) >= count, timeout)


def before_each_commit(monkeypatch: pytest.MonkeyPatch, hook: Callable[[set[str]], None]) -> None:
    """Call *hook* with the paths of each batch's tree update, just before it is made."""
    apply_changes = tree_updater.apply_changes

    def commit(store: ObjectStore, zid: str, changes: dict[str, Any], *args: Any) -> Any:
        hook(set(changes))
        return apply_changes(store, zid, changes, *args)

    monkeypatch.setattr(apply, "apply_changes", commit)


def test_the_next_batch_is_copied_while_the_one_before_commits(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batches_ = [{f"arr/{i}/{j}": bytes([i, j]) * 50 for j in range(3)} for i in range(3)]
    uids = queue_batches(api, zarr_id, *batches_)
    spy = CopySpy(monkeypatch)
    overlapped: list[bool] = []

    def commit(changed: set[str]) -> None:
        # batch k's tree update: batch k+1's copies are made meanwhile, not after
        k = next(i for i, files in enumerate(batches_) if changed == set(files))
        if k + 1 < len(uids):
            overlapped.append(spy.wait_for(uids[k + 1], len(batches_[k + 1])))

    before_each_commit(monkeypatch, commit)
    assert held.run(APPLY) == 1
    assert overlapped == [True, True]
    everything = {p: b for files in batches_ for p, b in files.items()}
    assert info(api, zarr_id)["checksum"] == oracle(everything)
    for path, body in everything.items():
        assert s3_body(archive, zarr_id, path) == body
    # the records of the batches copied ahead are their copies': the manifest made from
    # them is the one a listing gives
    manifest_as_listed(archive, zarr_id, info(api, zarr_id)["checksum"], ManifestSource.RECORDS)
    assert refused(api, zarr_id, *uids) == []
    assert_clean(archive, zarr_id)


def test_a_batch_rewriting_a_path_of_the_one_before_is_copied_after_its_commit(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = {"arr/0": b"first", "arr/1": b"one"}
    second = {"arr/0": b"second", "arr/2": b"two"}
    uids = queue_batches(api, zarr_id, first, second)
    spy = CopySpy(monkeypatch)
    copied_before_commit: list[int] = []
    before_each_commit(
        monkeypatch, lambda _: copied_before_commit.append(spy.copied.get(uids[1], 0))
    )
    held.run(APPLY)
    assert copied_before_commit == [0, 2]  # nothing of the second before the first's commit
    assert s3_body(archive, zarr_id, "arr/0") == b"second"
    checksum = info(api, zarr_id)["checksum"]
    assert checksum == oracle({**first, **second})
    manifest_as_listed(archive, zarr_id, checksum, ManifestSource.RECORDS)
    assert_clean(archive, zarr_id)


def test_a_commit_that_fails_after_the_next_batch_was_copied_ahead_loses_nothing(
    api: httpx.Client,
    zarr_id: str,
    archive: Archive,
    held: HeldJobQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = {"a/0": b"zero", "a/1": b"one"}
    second = {"b/0": b"b zero", "b/1": b"b one"}
    uids = queue_batches(api, zarr_id, first, second)
    spy = CopySpy(monkeypatch)
    failures = [0]

    def fails_once(_: set[str]) -> None:
        if not failures[0]:
            failures[0] += 1
            assert spy.wait_for(uids[1], len(second))  # the second batch is in S3 by key
            raise StorageError("injected: S3 failed the first batch's tree update")

    before_each_commit(monkeypatch, fails_once)
    with pytest.raises(StorageError):
        apply.apply_pending(archive, zarr_id, wait=True)
    assert info(api, zarr_id)["file_count"] == 0
    assert batches(archive, zarr_id) == [("queued", 1), ("queued", 2)]
    # the next apply (the job's retry) applies both, in order, and records its own copies
    assert held.run(APPLY) == 1
    checksum = info(api, zarr_id)["checksum"]
    assert checksum == oracle({**first, **second})
    manifest_as_listed(archive, zarr_id, checksum, ManifestSource.RECORDS)
    assert_clean(archive, zarr_id)


def test_open_names_the_batch_that_complete_queues(
    api: httpx.Client, zarr_id: str, held: HeldJobQueue
) -> None:
    # the uploader knows a batch's uid from its open, even if complete's answer is lost
    body = [{"path": p, "etag": md5(b), "size": len(b)} for p, b in FILES.items()]
    opened = api.post(f"/api/zarr/{zarr_id}/upload/", json=body)
    assert opened.status_code == 200, opened.text
    uid = opened.headers["X-Zarrchive-Batch"]
    again = api.post(f"/api/zarr/{zarr_id}/upload/", json=body, params={"resume": "true"})
    assert again.status_code == 200 and again.headers["X-Zarrchive-Batch"] == uid
    put_files(again.json(), FILES)
    assert queue(api, zarr_id)[0] == uid
