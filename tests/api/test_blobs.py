"""Blob uploads: single PUT, multipart with small parts, verification, dedup, downloads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_blob_asset, md5, ok, upload_blob
from tests.helpers.presigned import put_headers
from zarrchive.checksum.dandi_etag import dandi_etag
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.dandi import blobs
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.keys import blob_key

#: Parts as small as S3 allows (5 MiB; only the last part may be smaller).
PART = 5 * 1024 * 1024


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: these tests are about S3 (the database side is covered by test_assets)."""
    return f"sqlite:///{tmp_path / 'zarrchive.sqlite3'}"


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Multipart beyond 1 MiB, in 5 MiB parts (the live server runs in this process)."""
    monkeypatch.setattr(blobs, "MAX_SINGLE_PUT", 1024 * 1024)
    monkeypatch.setattr(blobs, "DEFAULT_PART_SIZE", PART)
    yield


def initialize(api: httpx.Client, dandiset: str, data: bytes) -> dict[str, Any]:
    body = {"size": len(data), "md5": md5(data), "dandiset": dandiset}
    result: dict[str, Any] = ok(api.post("/api/uploads/initialize/", json=body))
    return result


def test_single_put(api: httpx.Client, dandiset: str, archive: Archive, anon: httpx.Client) -> None:
    data = b"an NWB file, say" * 1000
    plan = initialize(api, dandiset, data)
    assert plan["blob_id"] is None and plan["multipart"] is False and plan["part_size"] is None
    (part,) = plan["parts"]
    assert part["part_number"] == 1 and part["size"] == len(data)
    upload_id = plan["upload_id"]
    # not uploaded yet
    response = api.post(f"/api/uploads/{upload_id}/validate/")
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"upload {upload_id} has nothing in S3 yet: PUT the file to its URL, "
        "then validate"
    }
    # the URL signs Content-MD5: S3 refuses another body
    response = httpx.put(
        part["upload_url"],
        content=b"x" + data[1:],
        headers=put_headers(part["upload_url"], data),
    )
    assert response.status_code == 400
    response = httpx.put(
        part["upload_url"], content=data, headers=put_headers(part["upload_url"], data)
    )
    assert response.status_code == 200
    blob = ok(api.post(f"/api/uploads/{upload_id}/validate/"))
    assert blob == {
        "blob_id": upload_id,
        "md5": md5(data),
        "etag": dandi_etag(data),
        "sha256": None,
        "size": len(data),
    }
    assert archive.store.get(blob_key(upload_id)) == data
    # asked again, the upload answers the same blob (its row is the uploader's receipt)
    assert ok(api.post(f"/api/uploads/{upload_id}/validate/")) == blob
    assert api.delete(f"/api/uploads/{upload_id}/").status_code == 404  # a blob now
    assert archive.store.get(blob_key(upload_id)) == data
    # single PUTs need no completion
    plan = initialize(api, dandiset, b"other")
    response = api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": []})
    assert response.status_code == 400


def test_multipart_small_parts(
    api: httpx.Client, dandiset: str, archive: Archive, small_parts: None
) -> None:
    data = os.urandom(2 * PART + 12345)
    plan = initialize(api, dandiset, data)
    assert plan["multipart"] is True and plan["part_size"] == PART
    assert [(p["part_number"], p["size"]) for p in plan["parts"]] == [
        (1, PART),
        (2, PART),
        (3, 12345),
    ]
    blob_id = upload_blob(api, dandiset, data)
    assert archive.store.get(blob_key(blob_id)) == data
    # the same content again: initialize answers the blob at once
    again = initialize(api, dandiset, data)
    assert again == {
        "upload_id": None,
        "blob_id": blob_id,
        "multipart": False,
        "part_size": None,
        "parts": [],
    }


def test_multipart_wrong_content_refused(
    api: httpx.Client, dandiset: str, archive: Archive, small_parts: None
) -> None:
    data = os.urandom(PART + 100)
    plan = initialize(api, dandiset, data)
    upload_id = plan["upload_id"]
    wrong = bytearray(data)
    wrong[-1] ^= 0xFF
    etags = []
    offset = 0
    with httpx.Client(timeout=60) as s3:
        for part in plan["parts"]:
            chunk = bytes(wrong[offset : offset + part["size"]])
            offset += part["size"]
            response = s3.put(part["upload_url"], content=chunk)
            assert response.status_code == 200
            etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    # parts missing or with a wrong ETag are refused
    response = api.post(f"/api/uploads/{upload_id}/complete/", json={"parts": etags[:1]})
    assert response.status_code == 400
    assert response.json() == {
        "detail": f"upload {upload_id} has 2 parts: list each of 1..2 once with the ETag S3 "
        "answered to its PUT"
    }
    ok(api.post(f"/api/uploads/{upload_id}/complete/", json={"parts": etags}))
    response = api.post(f"/api/uploads/{upload_id}/validate/")
    assert response.status_code == 400
    assert response.json()["detail"] == {
        "message": "upload verification failed",
        "expected": {"size": len(data), "md5": md5(data)},
        "found": {"size": len(data), "md5": md5(bytes(wrong))},
    }
    # the object is gone for good, and so is the upload
    assert archive.store.head(blob_key(upload_id)) is None
    assert list(archive.store.iter_versions(blob_key(upload_id))) == []
    assert api.post(f"/api/uploads/{upload_id}/validate/").status_code == 404


def test_md5_mismatch_refused(api: httpx.Client, dandiset: str, archive: Archive) -> None:
    """S3 refuses a body with another md5; a size other than the announced one is refused."""
    data = b"announced"
    plan = initialize(api, dandiset, data)
    upload_id = plan["upload_id"]
    # S3 refuses a body whose md5 differs from the signed one
    response = httpx.put(
        plan["parts"][0]["upload_url"],
        content=b"different",
        headers=put_headers(plan["parts"][0]["upload_url"], data),
    )
    assert response.status_code == 400
    assert api.post(f"/api/uploads/{upload_id}/validate/").status_code == 400  # nothing stored
    assert archive.store.head(blob_key(upload_id)) is None
    # a client that lies about the size
    assert initialize(api, dandiset, b"")["parts"][0]["size"] == 0  # empty files are fine
    plan2 = ok(
        api.post(
            "/api/uploads/initialize/",
            json={"size": 3, "md5": md5(b"abcd"), "dandiset": dandiset},
        )
    )
    response = httpx.put(
        plan2["parts"][0]["upload_url"],
        content=b"abcd",
        headers=put_headers(plan2["parts"][0]["upload_url"], b"abcd"),
    )
    assert response.status_code == 200
    response = api.post(f"/api/uploads/{plan2['upload_id']}/validate/")
    assert response.status_code == 400
    assert response.json()["detail"]["found"] == {"size": 4, "md5": md5(b"abcd")}
    assert archive.store.head(blob_key(plan2["upload_id"])) is None
    # bad md5 strings and sizes
    for body in (
        {"size": 1, "md5": "nope", "dandiset": dandiset},
        {"size": -1, "md5": md5(b""), "dandiset": dandiset},
        {"size": 6 * 1024**4, "md5": md5(b""), "dandiset": dandiset},
    ):
        assert api.post("/api/uploads/initialize/", json=body).status_code == 400


def test_dedup_at_validate_and_at_initialize(
    api: httpx.Client, dandiset: str, archive: Archive
) -> None:
    data = b"the same bytes"
    # two uploads started before either is validated: the second dedups at validate
    plans = [initialize(api, dandiset, data) for _ in range(2)]
    for plan in plans:
        response = httpx.put(
            plan["parts"][0]["upload_url"],
            content=data,
            headers=put_headers(plan["parts"][0]["upload_url"], data),
        )
        assert response.status_code == 200
    first = ok(api.post(f"/api/uploads/{plans[0]['upload_id']}/validate/"))
    second = ok(api.post(f"/api/uploads/{plans[1]['upload_id']}/validate/"))
    assert (
        first
        == second
        == {
            "blob_id": plans[0]["upload_id"],
            "md5": md5(data),
            "etag": dandi_etag(data),
            "sha256": None,
            "size": len(data),
        }
    )
    assert archive.store.head(blob_key(plans[1]["upload_id"])) is None
    # later: at once
    assert initialize(api, dandiset, data)["blob_id"] == first["blob_id"]
    # an embargoed dandiset's content lives in the other bucket: uploaded again
    secret = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))["identifier"]
    plan = initialize(api, secret, data)
    assert plan["blob_id"] is None
    blob_id = upload_blob(api, secret, data)
    assert blob_id != first["blob_id"]
    assert archive.embargo_store.get(blob_key(blob_id)) == data
    assert archive.store.head(blob_key(blob_id)) is None


def test_embargoed_dedup_needs_access(
    api: httpx.Client, other: httpx.Client, archive: Archive
) -> None:
    """An md5 is no key to someone else's embargoed content."""
    data = b"embargoed bytes"
    mine = ok(api.post("/api/dandisets/", json={"name": "mine", "embargo": True}))["identifier"]
    theirs = ok(other.post("/api/dandisets/", json={"name": "theirs", "embargo": True}))[
        "identifier"
    ]
    asset = add_blob_asset(api, mine, data, "a.nwb")
    # the owner of an embargoed dandiset using the content gets it at once
    assert initialize(api, mine, data)["blob_id"] == asset["blob_id"]
    # a stranger must upload it (and then proves holding it: validate dedups)
    plan = initialize(other, theirs, data)
    assert plan["blob_id"] is None
    assert upload_blob(other, theirs, data) == asset["blob_id"]


def test_cancel_and_foreign_uploads(
    api: httpx.Client, other: httpx.Client, anon: httpx.Client, dandiset: str, archive: Archive
) -> None:
    plan = initialize(api, dandiset, b"abc")
    upload_id = plan["upload_id"]
    for client, status in ((anon, 401), (other, 404)):
        assert client.post(f"/api/uploads/{upload_id}/validate/").status_code == status
        assert client.delete(f"/api/uploads/{upload_id}/").status_code == status
    assert api.delete(f"/api/uploads/{upload_id}/").status_code == 204
    assert api.post(f"/api/uploads/{upload_id}/validate/").status_code == 404
    assert api.post("/api/uploads/not-a-uuid/validate/").status_code == 404


def test_download_redirects(
    api: httpx.Client, anon: httpx.Client, dandiset: str, zarr_id: str, archive: Archive
) -> None:
    asset = add_blob_asset(api, dandiset, b"public bytes", "f.bin")
    response = anon.get(f"/api/assets/{asset['asset_id']}/download/")
    assert response.status_code == 302
    location = response.headers["location"]
    assert location == archive.store.public_url(blob_key(asset["blob_id"]))
    assert httpx.get(location).content == b"public bytes"  # world-readable
    # the same through the version's route
    response = anon.get(
        f"/api/dandisets/{dandiset}/versions/draft/assets/{asset['asset_id']}/download/"
    )
    assert (response.status_code, response.headers["location"]) == (302, location)
    # a Zarr: 400 as DANDI answers, saying where its files are
    upload(api, zarr_id, {"z": b"z"})
    zasset = ok(
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "z.zarr"}, "zarr_id": zarr_id},
        )
    )
    response = anon.get(f"/api/assets/{zasset['asset_id']}/download/")
    assert response.status_code == 400
    assert f"/api/zarr/{zarr_id}/" in response.json()["detail"]
    # embargoed: a presigned URL for owners, 401 to anonymous callers, 404 to others
    secret = ok(api.post("/api/dandisets/", json={"name": "s", "embargo": True}))["identifier"]
    hidden = add_blob_asset(api, secret, b"hidden bytes", "h.bin")
    assert anon.get(f"/api/assets/{hidden['asset_id']}/download/").status_code == 401
    response = api.get(f"/api/assets/{hidden['asset_id']}/download/")
    assert response.status_code == 302
    location = response.headers["location"]
    assert "X-Amz-Signature=" in location
    assert httpx.get(location).content == b"hidden bytes"
    assert (
        httpx.get(archive.embargo_store.public_url(blob_key(hidden["blob_id"]))).status_code == 403
    )
    assert anon.get("/api/assets/nope/download/").status_code == 404


@pytest.fixture
def job_queue(archive: Archive) -> Iterator[InProcessJobQueue]:
    queue = InProcessJobQueue(backoff=0.1)
    archive.jobs = queue
    set_current_archive(archive)
    try:
        yield queue
    finally:
        queue.close()
        archive.jobs = None
        set_current_archive(None)


def _put_parts(plan: dict[str, Any], data: bytes) -> list[dict[str, Any]]:
    etags = []
    offset = 0
    with httpx.Client(timeout=60) as s3:
        for part in plan["parts"]:
            chunk = data[offset : offset + part["size"]]
            offset += part["size"]
            response = s3.put(part["upload_url"], content=chunk)
            assert response.status_code == 200
            etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    return etags


@pytest.mark.parametrize("wrong", [False, True])
def test_multipart_validation_runs_in_the_background(
    api: httpx.Client,
    dandiset: str,
    archive: Archive,
    small_parts: None,
    job_queue: InProcessJobQueue,
    wrong: bool,
) -> None:
    """Hashing a multipart object is a job: validate answers 202 at once, then the blob
    (or why not) when asked again."""
    data = os.urandom(PART + 100)
    plan = initialize(api, dandiset, data)
    upload_id = plan["upload_id"]
    sent = bytes(data[:-1] + bytes([data[-1] ^ 0xFF])) if wrong else data
    ok(api.post(f"/api/uploads/{upload_id}/complete/", json={"parts": _put_parts(plan, sent)}))
    response = api.post(f"/api/uploads/{upload_id}/validate/")
    assert response.status_code == 202, response.text
    assert response.json() == {"upload_id": upload_id, "status": "validating"}
    assert job_queue.join(timeout=60)
    response = api.post(f"/api/uploads/{upload_id}/validate/")
    if wrong:
        assert response.status_code == 400
        assert "does not match what was announced" in response.json()["detail"]
        assert api.post(f"/api/uploads/{upload_id}/validate/").status_code == 404
    else:
        assert response.status_code == 200, response.text
        blob = response.json()
        assert (blob["md5"], blob["size"]) == (md5(data), len(data))
        assert archive.store.get(blob_key(blob["blob_id"])) == data


# -- DANDI's flow: dandi-etag, DANDI's parts, the client completes at S3 ----------------------
def dandi_initialize(
    api: httpx.Client, dandiset: str, data: bytes, etag: str | None = None
) -> httpx.Response:
    body = {
        "contentSize": len(data),
        "digest": {"algorithm": "dandi:dandi-etag", "value": etag or dandi_etag(data)},
        "dandiset": dandiset,
    }
    return api.post("/api/uploads/initialize/", json=body)


def dandi_upload(api: httpx.Client, dandiset: str, data: bytes) -> dict[str, Any]:
    """DANDI's upload as dandi-cli makes it; the validated blob."""
    plan = ok(dandi_initialize(api, dandiset, data))
    assert set(plan) >= {"upload_id", "parts"}
    parts = [
        {"part_number": p["part_number"], "size": p["size"], "etag": e["etag"].strip('"')}
        for p, e in zip(plan["parts"], _put_parts(plan, data), strict=True)
    ]
    done = ok(api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": parts}))
    assert done["body"].startswith("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>")
    with httpx.Client(timeout=60) as s3:
        response = s3.post(done["complete_url"], content=done["body"])
    assert response.status_code == 200, response.text
    assert f"{dandi_etag(data)}" in response.text  # S3's ETag is the dandi-etag
    blob: dict[str, Any] = ok(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))
    return blob


def test_dandi_flow_uploads_dedups_and_finds_by_digest(
    api: httpx.Client, anon: httpx.Client, dandiset: str, archive: Archive
) -> None:
    data = os.urandom(3000)
    blob = dandi_upload(api, dandiset, data)
    assert blob == {
        "blob_id": blob["blob_id"],
        "etag": dandi_etag(data),
        "sha256": None,
        "size": 3000,
        "md5": None,
    }
    assert archive.store.get(blob_key(blob["blob_id"])) == data
    # the same content again: 409 with the blob's id in Location, nothing to upload
    again = dandi_initialize(api, dandiset, data)
    assert again.status_code == 409
    assert again.headers["location"] == blob["blob_id"]
    assert again.json() == {"detail": "Blob already exists.", "blob_id": blob["blob_id"]}
    digest = {"algorithm": "dandi:dandi-etag", "value": dandi_etag(data)}
    assert ok(anon.post("/api/blobs/digest/", json=digest)) == blob
    missing = {"algorithm": "dandi:dandi-etag", "value": dandi_etag(b"other")}
    assert anon.post("/api/blobs/digest/", json=missing).status_code == 404
    bad = anon.post("/api/blobs/digest/", json={"algorithm": "sha1", "value": "x"})
    assert bad.status_code == 400
    # the asset's metadata carries the dandi-etag, which dandi download checks
    asset = ok(
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "d.nwb"}, "blob_id": blob["blob_id"]},
        )
    )
    assert asset["blob"] == blob["blob_id"] and asset["zarr"] is None
    assert asset["metadata"]["digest"] == {"dandi:dandi-etag": dandi_etag(data)}


def test_dandi_flow_refuses_bad_announcements(
    api: httpx.Client, dandiset: str, archive: Archive
) -> None:
    data = os.urandom(100)
    wrong_count = dandi_initialize(api, dandiset, data, etag="0" * 32 + "-2")
    assert wrong_count.status_code == 400
    assert "has 1 parts, so its dandi-etag ends with '-1'" in wrong_count.json()["detail"]
    not_etag = dandi_initialize(api, dandiset, data, etag="xyz")
    assert not_etag.status_code == 400
    both = api.post(
        "/api/uploads/initialize/",
        json={"contentSize": 1, "md5": md5(b"x"), "size": 1, "dandiset": dandiset},
    )
    assert both.status_code == 400
    # other content than announced: validate refuses it and removes the object
    plan = ok(dandi_initialize(api, dandiset, data, etag=dandi_etag(b"y" * 100)))
    other = b"z" * 100
    (put,) = _put_parts(plan, other)
    parts = [{"part_number": 1, "size": 100, "etag": put["etag"]}]
    done = ok(api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": parts}))
    with httpx.Client(timeout=60) as s3:
        assert s3.post(done["complete_url"], content=done["body"]).status_code == 200
    response = api.post(f"/api/uploads/{plan['upload_id']}/validate/")
    assert response.status_code == 400
    assert response.json()["detail"]["expected"] == {"size": 100, "etag": dandi_etag(b"y" * 100)}
    assert response.json()["detail"]["found"] == {"size": 100, "etag": dandi_etag(other)}
    assert archive.store.head(blob_key(plan["upload_id"])) is None
