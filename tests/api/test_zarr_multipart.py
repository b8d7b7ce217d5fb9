"""Issue 20: files above the multipart threshold go up in parts inside a Zarr batch; the
archive verifies their md5 while copying them into place; nothing else changes a Zarr."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import assert_clean, info, oracle, s3_body, upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.multipart import (
    MIB,
    THRESHOLD,
    ask_parts,
    big_bytes,
    cut,
    open_sized,
    put_part,
    put_small,
    send_parts,
)
from tests.helpers.snapshots import gc_now
from tests.helpers.zarr_client import md5
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import staging_object_key, staging_zarr_prefix, zarr_prefix

pytestmark = [pytest.mark.settings(multipart_threshold=THRESHOLD), SQLITE_ONLY]

BIG = big_bytes(2 * THRESHOLD + 3 * MIB, seed=1)  # three parts: 8, 8 and 3 MiB
SMALL = {".zgroup": b'{"zarr_format": 2}', "arr/.zarray": b"{}", "arr/1": b"one"}


def uploads_in_progress(archive: Archive, zarr_id: str) -> list[str]:
    store = archive.store
    return [
        key
        for prefix in (staging_zarr_prefix(zarr_id), zarr_prefix(zarr_id))
        for key, _id, _when in store.iter_multipart_uploads(prefix)
    ]


def open_big(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> list[dict[str, Any]]:
    response = open_sized(api, zarr_id, files)
    assert response.status_code == 200, response.text
    urls: list[dict[str, Any]] = response.json()
    return urls


def test_big_file_round_trip(api: httpx.Client, zarr_id: str, archive: Archive) -> None:
    files = {**SMALL, "arr/0": BIG}
    urls = {u["path"]: u for u in open_big(api, zarr_id, files)}
    assert urls["arr/0"]["upload_url"] is None
    assert (urls["arr/0"]["part_size"], urls["arr/0"]["part_count"]) == (THRESHOLD, 3)
    assert all(urls[p]["upload_url"] and urls[p]["part_size"] is None for p in SMALL)
    put_small(list(urls.values()), files)
    send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD)
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text
    assert done.json()["checksum"] == oracle(files)
    assert s3_body(archive, zarr_id, "arr/0") == BIG
    # S3's ETag of the copy is not an md5; the archive's listing of the file says the md5
    listed = archive.store.head(f"zarr/{zarr_id}/arr/0")
    assert listed is not None and listed.etag.endswith("-3")
    file = api.get(f"/api/zarr/{zarr_id}/arr/0").json()
    assert (file["md5"], file["size"]) == (md5(BIG), len(BIG))
    assert_clean(archive, zarr_id)  # fsck: the recorded (verified) md5, not the ETag
    assert uploads_in_progress(archive, zarr_id) == []


def test_wrong_declared_md5_refuses_the_batch_and_changes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    before = upload(api, zarr_id, {**SMALL, "arr/0": b"old content"})
    liar = big_bytes(len(BIG), seed=2)
    declared = {**SMALL, "arr/0": BIG, "arr/2": b"new small file"}
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": p, "etag": md5(b), "size": len(b)} for p, b in declared.items()],
    )
    assert response.status_code == 200, response.text
    put_small(response.json(), declared)
    send_parts(api, zarr_id, "arr/0", liar, THRESHOLD)  # parts of other bytes, same size
    refused = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert refused.status_code == 400, refused.text
    assert "not the md5 declared" in refused.text and "arr/0" in refused.text
    after = info(api, zarr_id)
    assert (after["checksum"], after["file_count"]) == (before["checksum"], before["file_count"])
    assert s3_body(archive, zarr_id, "arr/0") == b"old content"
    assert s3_body(archive, zarr_id, "arr/2") is None  # nothing of the batch
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    rows = api.get(f"/api/zarr/{zarr_id}/upload/refused/").json()
    assert [(r["path"], r["expected_md5"], r["found_md5"]) for r in rows] == [
        ("arr/0", md5(BIG), md5(liar))
    ]
    assert uploads_in_progress(archive, zarr_id) == []
    assert_clean(archive, zarr_id)


def test_replayed_part_url_after_complete_changes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = {**SMALL, "arr/0": BIG}
    put_small(open_big(api, zarr_id, files), files)
    answer = send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD)
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text
    other = cut(big_bytes(len(BIG), seed=3), THRESHOLD)
    for item in answer["parts"]:
        # the URL signs the old part's md5: another body is refused, and the same body
        # finds no upload any more
        assert put_part(item["upload_url"], other[item["part_number"]]).status_code != 200
        replay = put_part(item["upload_url"], cut(BIG, THRESHOLD)[item["part_number"]])
        assert replay.status_code != 200
    assert s3_body(archive, zarr_id, "arr/0") == BIG
    assert info(api, zarr_id)["checksum"] == oracle(files)
    assert uploads_in_progress(archive, zarr_id) == []


def test_interrupted_parts_resume_without_resending(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = {**SMALL, "arr/0": BIG}
    urls = open_big(api, zarr_id, files)
    put_small(urls, files)
    send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD, only=[1, 3])
    incomplete = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert incomplete.status_code == 400 and "arr/0" in incomplete.text  # part 2 missing
    assert open_sized(api, zarr_id, files).status_code == 409
    again = open_sized(api, zarr_id, files, resume="true")  # the same batch, fresh URLs
    assert again.status_code == 200, again.text
    answer = send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD)
    assert [(p["part_number"], p["done"]) for p in answer["parts"]] == [
        (1, True),
        (2, False),
        (3, True),
    ]
    done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
    assert done.status_code == 200, done.text
    assert s3_body(archive, zarr_id, "arr/0") == BIG
    assert done.json()["checksum"] == oracle(files)


def test_cancel_aborts_the_multipart_upload(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = {"arr/0": BIG}
    open_big(api, zarr_id, files)
    send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD, only=[1])
    assert len(uploads_in_progress(archive, zarr_id)) == 1
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert uploads_in_progress(archive, zarr_id) == []


def test_gc_finds_and_aborts_stray_uploads(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    store = archive.store
    dead = store.create_multipart_upload(staging_object_key(zarr_id, "f" * 32, "arr/0"))
    crashed = store.create_multipart_upload(f"zarr/{zarr_id}/arr/0")
    open_big(api, zarr_id, {"arr/0": BIG})
    send_parts(api, zarr_id, "arr/0", BIG, THRESHOLD, only=[1])  # live: not stray
    report = gc_now(archive, zarr_id)
    assert sorted(u for _k, u, _why in report.multipart) == sorted([dead, crashed])
    assert len(uploads_in_progress(archive, zarr_id)) == 3
    gc_now(archive, zarr_id, apply=True)
    assert len(uploads_in_progress(archive, zarr_id)) == 1  # the open batch's own
    assert not gc_now(archive, zarr_id).multipart


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ([0], "greater than or equal to 1"),
        ([4], "no part 4"),
        ([1, 1], "more than once"),
        (list(range(1, 1002)), "at most 1000"),
    ],
)
def test_bad_part_requests_are_refused(
    api: httpx.Client, zarr_id: str, parts: list[int], message: str
) -> None:
    open_big(api, zarr_id, {"arr/0": BIG, "small": b"s"})
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/parts/",
        json={"path": "arr/0", "parts": [{"part_number": n, "md5": "0" * 32} for n in parts]},
    )
    assert response.status_code == 400 and message in response.text, response.text
    not_big = ask_parts(api, zarr_id, "small", {1: b"s"})
    assert not_big.status_code == 400 and "not a file of the open batch" in not_big.text


def test_sizes_are_bounded_and_checked(api: httpx.Client, zarr_id: str) -> None:
    too_big = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": "x", "etag": "0" * 32, "size": 5 * 1024**4 + 1}],
    )
    assert too_big.status_code == 400, too_big.text
    # a declared size is checked at complete; a part of the wrong length too
    files = {"small": b"abc", "arr/0": BIG}
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[
            {"path": "small", "etag": md5(b"abc"), "size": 4},
            {"path": "arr/0", "etag": md5(BIG), "size": len(BIG)},
        ],
    )
    assert response.status_code == 200, response.text
    put_small(response.json(), files)
    parts = cut(BIG, THRESHOLD)
    short = {1: parts[1][:-1], 2: parts[2], 3: parts[3]}
    answer = ask_parts(api, zarr_id, "arr/0", short).json()
    for item in answer["parts"]:
        assert put_part(item["upload_url"], short[item["part_number"]]).status_code == 200
    refused = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert refused.status_code == 400
    problems = {f["path"]: f for f in refused.json()["detail"]["files"]}
    assert problems["small"]["expected"] == "4 bytes"
    assert "wrong length: 1" in str(problems["arr/0"]["found"])
