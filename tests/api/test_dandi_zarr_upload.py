"""DANDI's Zarr routes as dandi-cli 0.81 uploads through them: POST /api/zarr/, POST files/,
PUT with Content-MD5 (+ an unsigned Content-Type), DELETE files/, finalize/, polling status."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import make_settings
from tests.helpers.dandi_zarr import (
    announce,
    base64md5,
    dandi_upload,
    put,
    put_all,
    wait_complete,
)
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.presigned import put_headers
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    list_files,
    md5,
    oracle_checksum,
)
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import zarr_object_key
from zarrchive.storage.seaweedfs import SeaweedFS

pytestmark = SQLITE_ONLY


def zarr_files(chunks: int = 300) -> dict[str, bytes]:
    """A Zarr of nested chunk directories and metadata files."""
    files = {
        ".zgroup": b'{"zarr_format": 2}',
        ".zattrs": b"{}",
        "arr/.zarray": b'{"chunks": [1, 1], "zarr_format": 2}',
        "arr/.zattrs": b'{"units": "m"}',
    }
    for i in range(chunks):
        files[f"arr/{i // 20}/{i % 20}"] = f"chunk {i} ".encode() * (i % 7 + 1)
    return files


def s3_body(archive: Archive, zarr_id: str, path: str) -> bytes | None:
    return archive.store.get(zarr_object_key(zarr_id, path))


def info(api: httpx.Client, zarr_id: str) -> dict[str, Any]:
    result: dict[str, Any] = expect(api.get(f"/api/zarr/{zarr_id}/"))
    return result


def test_create_and_describe_as_dandi(api: httpx.Client, dandiset: str) -> None:
    created = expect(api.post("/api/zarr/", json={"name": "a.zarr", "dandiset": dandiset}))
    # DANDI's fields, plus ours
    assert created["name"] == "a.zarr" and created["dandiset"] == dandiset
    assert (created["status"], created["checksum"]) == ("Complete", EMPTY_CHECKSUM)
    assert (created["file_count"], created["size"]) == (0, 0)
    for ours in ("upload_state", "upload_in_progress", "s3_url", "manifest_status"):
        assert ours in created
    assert info(api, created["zarr_id"]) | {"modified": None} == created | {"modified": None}
    # DANDI's conflict: 400 with the words dandi-cli looks for, and nothing created
    again = api.post("/api/zarr/", json={"name": "a.zarr", "dandiset": dandiset})
    assert again.status_code == 400
    assert "Zarr already exists" in again.text
    listed = expect(api.get("/api/zarr/", params={"dandiset": dandiset, "name": "a.zarr"}))
    assert listed["count"] == 1 and listed["results"][0]["zarr_id"] == created["zarr_id"]


def test_dandi_upload_reaches_complete_with_the_oracle_checksum(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = zarr_files(600)  # three groups of 255: one open batch extended twice
    first = dict(list(files.items())[:255])
    urls = announce(api, zarr_id, first)
    # in request order: each URL names its path's staging key
    for url, path in zip(urls, first, strict=True):
        assert urllib.parse.unquote(urllib.parse.urlsplit(url).path).endswith("/" + path)
        assert (
            "content-md5"
            in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-SignedHeaders"][0]
        )
    put_all(urls, first)
    pending = info(api, zarr_id)
    assert (pending["status"], pending["checksum"]) == ("Pending", EMPTY_CHECKSUM)
    assert s3_body(archive, zarr_id, "arr/0/0") is None  # nothing before finalize
    report, done = dandi_upload(api, zarr_id, dict(list(files.items())[255:]))
    assert report["dropped"] == [] and report["files"] == len(files)
    assert report["status"] in ("Ingesting", "Complete")
    assert done["checksum"] == oracle_checksum(files)
    assert (done["file_count"], done["size"]) == (len(files), sum(map(len, files.values())))
    assert done["upload_state"] == "at_rest" and not done["upload_in_progress"]
    assert list_files(api, zarr_id) == {p: (len(b), md5(b)) for p, b in files.items()}
    assert s3_body(archive, zarr_id, "arr/.zarray") == files["arr/.zarray"]
    head = archive.store.head(zarr_object_key(zarr_id, "arr/.zarray"))
    assert head is not None and head.etag == md5(files["arr/.zarray"])
    # finalize with nothing open: nothing to do, still Complete
    again = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert (again["batch"], again["files"], again["status"]) == (None, 0, "Complete")


def test_reupload_changes_adds_and_deletes(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    files = zarr_files(120)
    dandi_upload(api, zarr_id, files)
    changed = {"arr/0/1": b"changed", "arr/5/19": b"changed too", "arr/.zattrs": b'{"u": 1}'}
    added = {"arr/9/0": b"new", "extra/deep/x": b"x"}
    deleted = ["arr/1/0", "arr/1/1", "arr/2/5"]
    report, done = dandi_upload(api, zarr_id, {**changed, **added}, delete=deleted)
    assert report["files"] == len(changed) + len(added) and report["dropped"] == []
    expected = {p: b for p, b in files.items() if p not in deleted} | changed | added
    assert done["checksum"] == oracle_checksum(expected)
    assert done["file_count"] == len(expected)
    assert s3_body(archive, zarr_id, "arr/0/1") == b"changed"
    assert s3_body(archive, zarr_id, "arr/1/0") is None
    assert list_files(api, zarr_id) == {p: (len(b), md5(b)) for p, b in expected.items()}


def test_finalize_drops_what_was_never_put_or_differs(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    dandi_upload(api, zarr_id, {"old": b"old", "keep": b"keep"})
    files = {"a": b"a", "b": b"never PUT", "c": b"first", "old": b"new old"}
    urls = dict(zip(files, announce(api, zarr_id, files), strict=True))
    with httpx.Client(timeout=60) as storage:
        assert put(storage, urls["a"], "a", b"a").status_code == 200
        # S3 refuses a body that is not the announced one (Content-MD5 is signed)
        wrong = storage.put(
            urls["old"], content=b"other", headers={"Content-MD5": base64md5(b"other")}
        )
        assert wrong.status_code in (400, 403), wrong.text
        assert put(storage, urls["c"], "c", b"first").status_code == 200
    # c announced again with new content (dandi-cli re-announces on retries) but not PUT
    announce(api, zarr_id, {"c": b"second"})
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    dropped = {d["path"]: d for d in report["dropped"]}
    assert set(dropped) == {"b", "c", "old"} and report["files"] == 1
    assert dropped["b"] == {
        "path": "b",
        "expected": md5(b"never PUT"),
        "found": None,
        "reason": "missing",
    }
    assert dropped["c"] == {
        "path": "c",
        "expected": md5(b"second"),
        "found": md5(b"first"),
        "reason": "differs",
    }
    assert dropped["old"]["reason"] == "missing"
    done = wait_complete(api, zarr_id)
    assert done["checksum"] == oracle_checksum({"a": b"a", "old": b"old", "keep": b"keep"})
    assert s3_body(archive, zarr_id, "old") == b"old"
    # a batch of nothing but missing files is forgotten: Complete at once
    announce(api, zarr_id, {"z": b"z"})
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert (report["files"], report["status"]) == (0, "Complete")
    assert [d["path"] for d in report["dropped"]] == ["z"]
    assert not info(api, zarr_id)["upload_in_progress"]


def test_spec_batches_and_dandi_flow_share_the_one_open_batch(
    api: httpx.Client, zarr_id: str
) -> None:
    spec = expect(api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "s", "etag": md5(b"s")}]))
    # DANDI's files/ extends the open batch; the spec's upload/ refuses a second one
    urls = announce(api, zarr_id, {"d": b"d"})
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "e", "etag": md5(b"e")}])
    assert response.status_code == 409
    put_all(urls, {"d": b"d"})
    # the spec's complete stays strict: s is not PUT yet
    strict = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert strict.status_code == 400 and "s" in str(strict.json()["detail"])
    with httpx.Client(timeout=60) as storage:
        url = spec[0]["upload_url"]  # the spec's URL signs the type too
        assert storage.put(url, content=b"s", headers=put_headers(url, b"s")).status_code == 200
    done = expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"}))
    assert done["checksum"] == oracle_checksum({"s": b"s", "d": b"d"})
    assert done["status"] == "Complete"


@pytest.fixture
def small_batches(
    live_server: Any,
    seaweedfs: SeaweedFS,
    bucket: str,
    embargo_bucket: str,
    database_url: str,
    tmp_path: Path,
    users: Any,
    archive: Archive,
) -> Iterator[httpx.Client]:
    """The live server over an archive of the same database with max_batch_files = 5."""
    small = Archive.from_settings(
        make_settings(seaweedfs, bucket, database_url, tmp_path, max_batch_files=5)
    )
    live_server.app.state.archive = small
    try:
        with authed(live_server.url, users.owner) as client:
            yield client
    finally:
        live_server.app.state.archive = archive
        small.close()


def test_a_long_upload_is_finalized_in_bounded_batches(small_batches: httpx.Client) -> None:
    api = small_batches
    dandiset = create_dandiset(api)
    zarr_id = create_zarr(api, dandiset)
    files = {f"c/{i:03d}": f"{i}".encode() for i in range(230)}
    items = list(files.items())
    # at most 5 per request; the open batch holds at most 5 x 20 = 100: the 21st request
    # finalizes the first 100 files (all PUT, as dandi-cli PUTs each group before the next)
    for start in range(0, len(items), 5):
        group = dict(items[start : start + 5])
        put_all(announce(api, zarr_id, group), group)
    too_many = [{"path": f"x{i}", "base64md5": base64md5(b"x")} for i in range(6)]
    assert api.post(f"/api/zarr/{zarr_id}/files/", json=too_many).status_code == 400
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert report["files"] == 30 and report["dropped"] == []
    done = wait_complete(api, zarr_id)
    assert done["checksum"] == oracle_checksum(files) and done["file_count"] == 230


def test_bad_requests_are_4xx_and_change_nothing(
    api: httpx.Client, anon: httpx.Client, zarr_id: str, users: Any, live_server: Any
) -> None:
    files_url = f"/api/zarr/{zarr_id}/files/"
    good = {"path": "a", "base64md5": base64md5(b"a")}
    bad_bodies: list[Any] = [
        [],
        {"path": "a"},
        [{"path": "a"}],
        [{"path": "a", "base64md5": "not base64!"}],
        [{"path": "a", "base64md5": base64.b64encode(b"short").decode()}],
        [{"path": "a", "base64md5": md5(b"a")}],  # hex, not base64
        [{"path": "../a", "base64md5": base64md5(b"a")}],
        [{"path": "a/.checksum", "base64md5": base64md5(b"a")}],
        [good, good],
        [{"path": f"f{i}", "base64md5": base64md5(b"a")} for i in range(501)],
        [{**good, "extra": 1}],
    ]
    for body in bad_bodies:
        response = api.post(files_url, json=body)
        assert response.status_code == 400, (body, response.text)
    assert anon.post(files_url, json=[good]).status_code == 401
    with authed(live_server.url, users.other) as other:
        assert other.post(files_url, json=[good]).status_code == 403
        assert other.post(f"/api/zarr/{zarr_id}/finalize/").status_code == 403
    assert anon.post(f"/api/zarr/{zarr_id}/finalize/").status_code == 401
    unknown = "00000000-0000-4000-8000-000000000000"
    assert api.post(f"/api/zarr/{unknown}/files/", json=[good]).status_code == 404
    assert api.post(f"/api/zarr/{unknown}/finalize/").status_code == 404
    gone = api.request("DELETE", files_url, json=[{"path": "nope"}])
    assert gone.status_code == 404 and gone.json()["detail"]["missing"] == ["nope"]
    state = info(api, zarr_id)
    assert (state["status"], state["upload_in_progress"]) == ("Complete", False)
    # a file and a directory of one name in one upload: finalize drops the file
    urls = announce(api, zarr_id, {"x": b"x"})
    urls += announce(api, zarr_id, {"x/y": b"y"})
    put_all(urls, {"x": b"x", "x/y": b"y"})
    report = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    assert [(d["path"], d["reason"]) for d in report["dropped"]] == [("x", "file_and_directory")]
    assert wait_complete(api, zarr_id)["checksum"] == oracle_checksum({"x/y": b"y"})
