"""Every Zarr endpoint: updates, deletions, cancellation, verification failures, limits, errors."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.api_uploads import (
    FILES,
    assert_nodes_match,
    info,
    open_and_put,
    oracle,
    put_files,
    s3_body,
    upload,
)
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.presigned import put_headers
from tests.helpers.zarr_client import md5
from zarrchive.checksum import EMPTY_CHECKSUM
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY


def test_overwrite_files(api: httpx.Client, zarr_id: str, archive: Archive, s3: Any) -> None:
    upload(api, zarr_id, FILES)
    changed = {"arr/0": b"ZERO!", "arr/sub/deep/x": b"new deep x", "new/file": b"brand new"}
    result = upload(api, zarr_id, changed)
    final = {**FILES, **changed}
    assert result["checksum"] == oracle(final)
    assert result["file_count"] == len(final)
    assert s3_body(archive, zarr_id, "arr/0") == b"ZERO!"
    assert_nodes_match(archive, zarr_id, final, s3)


def test_delete_files_and_empty_directories(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    upload(api, zarr_id, FILES)
    response = api.request(
        "DELETE",
        f"/api/zarr/{zarr_id}/files/",
        json=[{"path": "arr/sub/deep/x"}, {"path": "arr/sub/deep/y"}, {"path": "other/only"}],
    )
    assert response.status_code == 204, response.text  # DANDI's answer: no content
    remaining = {p: b for p, b in FILES.items() if not p.startswith(("arr/sub", "other"))}
    assert info(api, zarr_id)["checksum"] == oracle(remaining)
    assert s3_body(archive, zarr_id, "other/only") is None
    # nodes of the emptied directories are gone; the rest are exact
    assert_nodes_match(archive, zarr_id, remaining, s3)
    response = api.request(
        "DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": p} for p in remaining]
    )
    assert response.status_code == 204
    assert info(api, zarr_id)["checksum"] == EMPTY_CHECKSUM
    assert info(api, zarr_id)["file_count"] == 0
    assert_nodes_match(archive, zarr_id, {}, s3)


def test_cancel_leaves_overwritten_files_untouched(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    """An open batch's PUTs land in its staging area: the Zarr shows none of them until
    complete, and after a cancel nothing of the batch remains."""
    upload(api, zarr_id, FILES)
    before = info(api, zarr_id)
    batch = {"arr/0": b"overwritten", "arr/2": b"a new file", ".zgroup": FILES[".zgroup"]}
    open_and_put(api, zarr_id, batch)
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"  # staged, not in the Zarr yet
    assert s3_body(archive, zarr_id, "arr/2") is None
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    response = api.delete(f"/api/zarr/{zarr_id}/upload/")
    assert response.status_code == 204, response.text
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 404
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"  # never changed
    assert s3_body(archive, zarr_id, "arr/2") is None  # never there
    assert s3_body(archive, zarr_id, ".zgroup") == FILES[".zgroup"]  # identical rewrite kept
    after = info(api, zarr_id)
    assert after["checksum"] == before["checksum"] == oracle(FILES)
    assert_nodes_match(archive, zarr_id, FILES, s3)
    # a second cancel: no batch
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 404


def test_cancel_before_any_put(api: httpx.Client, zarr_id: str, archive: Archive) -> None:
    upload(api, zarr_id, FILES)
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "arr/0", "etag": md5(b"x")}])
    assert response.status_code == 200
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"


def test_wrong_body_refused_by_s3_and_complete_fails(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    before = info(api, zarr_id)
    good, bad = b"good content", b"announced content"
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": "g", "etag": md5(good)}, {"path": "arr/0", "etag": md5(bad)}],
    )
    urls = {u["path"]: u["upload_url"] for u in response.json()}
    put_files([{"path": "g", "upload_url": urls["g"]}], {"g": good})

    refused = httpx.put(
        urls["arr/0"],
        content=b"another body",
        headers=put_headers(urls["arr/0"], bad),
    )
    assert refused.status_code == 400 and "BadDigest" in refused.text
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 400
    detail = response.json()["detail"]
    # the batch's staged object is missing (the Zarr's own "zero" is not the batch's file)
    assert detail["files"] == [{"path": "arr/0", "expected": md5(bad), "found": None}]
    # batch still open, nothing changed
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert info(api, zarr_id)["checksum"] == before["checksum"]
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"


def test_complete_with_missing_file(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    upload(api, zarr_id, FILES)
    before = info(api, zarr_id)
    batch = {"n/1": b"one", "n/2": b"two"}
    response = api.post(
        f"/api/zarr/{zarr_id}/upload/", json=[{"path": p, "etag": md5(b)} for p, b in batch.items()]
    )
    response_urls = response.json()
    put_files([u for u in response_urls if u["path"] == "n/1"], batch)
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 400
    assert response.json()["detail"]["files"] == [
        {"path": "n/2", "expected": md5(b"two"), "found": None}
    ]
    assert api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert info(api, zarr_id)["checksum"] == before["checksum"]
    assert_nodes_match(archive, zarr_id, FILES, s3)
    # uploading the missing file (same URL) then completes
    urls = response_urls
    put_files([u for u in urls if u["path"] == "n/2"], batch)
    response = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
    assert response.status_code == 200
    assert response.json()["checksum"] == oracle({**FILES, **batch})


def test_batch_limits_and_bad_input(api: httpx.Client, zarr_id: str) -> None:
    url = f"/api/zarr/{zarr_id}/upload/"
    too_many = [{"path": f"f/{i}", "etag": "a" * 32} for i in range(501)]
    response = api.post(url, json=too_many)
    assert response.status_code == 400 and "500" in response.json()["detail"]
    assert api.post(url, json=[]).status_code == 400
    dup = [{"path": "a", "etag": "a" * 32}, {"path": "a", "etag": "b" * 32}]
    assert "more than once" in api.post(url, json=dup).json()["detail"]
    for bad_path in ["/abs", "a//b", "a/../b", "a\\b", "", "a/./b", "x\x00y", "a/"]:
        response = api.post(url, json=[{"path": bad_path, "etag": "a" * 32}])
        assert response.status_code == 400, bad_path
    for bad_md5 in ["A" * 32, "a" * 31, "g" * 32, ""]:
        response = api.post(url, json=[{"path": "ok", "etag": bad_md5}])
        assert response.status_code == 400, bad_md5
    # malformed JSON and wrong types are 400s, not 500s
    response = api.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert api.post(url, json={"path": "a"}).status_code == 400
    assert api.post(url, json=[{"path": 3, "etag": None}]).status_code == 400
    # nothing was opened by any of that
    assert api.get(url).status_code == 404


def test_second_batch_conflicts(api: httpx.Client, zarr_id: str) -> None:
    url = f"/api/zarr/{zarr_id}/upload/"
    assert api.post(url, json=[{"path": "a", "etag": "a" * 32}]).status_code == 200
    response = api.post(url, json=[{"path": "b", "etag": "b" * 32}])
    assert response.status_code == 409
    assert "cancel" in response.json()["detail"]
    # deletions are queued behind an open batch, but only of files the Zarr has: a file
    # of the open batch is not one yet
    response = api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "a"}])
    assert response.status_code == 404  # the spec's status for a file that does not exist
    assert response.json()["detail"]["missing"] == ["a"]


def test_delete_missing_paths_deletes_nothing(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    upload(api, zarr_id, FILES)
    response = api.request(
        "DELETE",
        f"/api/zarr/{zarr_id}/files/",
        json=[{"path": "arr/0"}, {"path": "nope"}, {"path": "arr/1/"}],
    )
    assert response.status_code == 404  # "arr/1/" asks for a directory: it is a file
    assert response.json()["detail"]["missing"] == ["nope", "arr/1/"]
    assert s3_body(archive, zarr_id, "arr/0") == b"zero"
    assert info(api, zarr_id)["checksum"] == oracle(FILES)
    assert_nodes_match(archive, zarr_id, FILES, s3)
    too_many = [{"path": f"f/{i}"} for i in range(501)]
    assert api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=too_many).status_code == 400


def test_authorization(
    api: httpx.Client, anon: httpx.Client, zarr_id: str, users: Any, dandiset: str
) -> None:
    other = httpx.Client(
        base_url=str(api.base_url), headers={"Authorization": f"token {users.other}"}
    )
    admin = httpx.Client(
        base_url=str(api.base_url), headers={"Authorization": f"token {users.admin}"}
    )
    batch = [{"path": "a", "etag": "a" * 32}]
    up = f"/api/zarr/{zarr_id}/upload/"
    # anonymous: reads fine, writes 401
    assert anon.get(f"/api/zarr/{zarr_id}/").status_code == 200
    assert anon.post(up, json=batch).status_code == 401
    assert anon.post("/api/zarr/", json={"name": "x", "dandiset": dandiset}).status_code == 401
    assert anon.post("/api/dandisets/", json={"name": "x"}).status_code == 401
    # a bad token is refused, not treated as anonymous
    bad = httpx.Client(base_url=str(api.base_url), headers={"Authorization": "token nope"})
    assert bad.get(f"/api/zarr/{zarr_id}/").status_code == 401
    # another user: 403 on every write
    assert other.post(up, json=batch).status_code == 403
    assert other.post("/api/zarr/", json={"name": "x", "dandiset": dandiset}).status_code == 403
    assert api.post(up, json=batch).status_code == 200
    assert other.post(f"{up}complete/").status_code == 403
    assert other.delete(up).status_code == 403
    assert anon.delete(up).status_code == 401
    assert (
        other.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "a"}]).status_code
        == 403
    )
    # an admin may
    assert admin.delete(up).status_code == 204


def test_unknown_and_malformed_ids(api: httpx.Client, zarr_id: str) -> None:
    import uuid

    assert api.get(f"/api/zarr/{uuid.uuid4()}/").status_code == 404
    assert api.get("/api/zarr/not-a-uuid/").status_code == 404
    assert api.post("/api/zarr/not-a-uuid/upload/complete/").status_code == 404
    assert api.get("/api/dandisets/12/").status_code == 404
    assert api.get("/api/dandisets/999999/").status_code == 404
    assert api.post("/api/zarr/", json={"name": "x", "dandiset": "000999"}).status_code == 404


def test_zarr_names_unique_per_dandiset(api: httpx.Client, zarr_id: str, dandiset: str) -> None:
    response = api.post("/api/zarr/", json={"name": "test.zarr", "dandiset": dandiset})
    assert response.status_code == 400 and "already has" in response.json()["detail"]
    other = api.post("/api/dandisets/", json={"name": "second"}).json()["identifier"]
    assert other == f"{int(dandiset) + 1:06d}"
    assert api.post("/api/zarr/", json={"name": "test.zarr", "dandiset": other}).status_code == 200


def test_browse(api: httpx.Client, zarr_id: str) -> None:
    upload(api, zarr_id, FILES)
    root = api.get(f"/api/zarr/{zarr_id}/").json()
    response = api.get(f"/api/zarr/{zarr_id}/arr/")
    assert response.status_code == 200
    body = response.json()
    assert body["type"] == "directory" and body["path"] == "arr"
    assert [d["name"] for d in body["directories"]] == ["sub"]
    assert [f["name"] for f in body["files"]] == [".zarray", "0", "1"]
    assert body["files"][1] == {"name": "0", "path": "arr/0", "digest": md5(b"zero"), "size": 4}
    assert body["next"] is None
    # the same without the slash
    assert api.get(f"/api/zarr/{zarr_id}/arr").json()["digest"] == body["digest"]
    # pagination: 2 per page
    seen = []
    cursor = None
    while True:
        params: dict[str, Any] = {"page_size": 2}
        if cursor:
            params["cursor"] = cursor
        page = api.get(f"/api/zarr/{zarr_id}/arr/", params=params).json()
        seen += [d["path"] for d in page["directories"]] + [f["path"] for f in page["files"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == ["arr/sub", "arr/.zarray", "arr/0", "arr/1"]
    # a file
    file = api.get(f"/api/zarr/{zarr_id}/arr/sub/deep/x").json()
    assert file["type"] == "file" and file["size"] == 6 and file["md5"] == md5(b"deep x")
    assert file["s3_key"] == f"zarr/{zarr_id}/arr/sub/deep/x"
    # 404s and bad input
    assert api.get(f"/api/zarr/{zarr_id}/arr/nope").status_code == 404
    assert api.get(f"/api/zarr/{zarr_id}/nope/").status_code == 404
    assert api.get(f"/api/zarr/{zarr_id}/arr/", params={"page_size": 0}).status_code == 400
    assert api.get(f"/api/zarr/{zarr_id}/arr/", params={"cursor": "garbage"}).status_code == 400
    assert root["checksum"] == oracle(FILES)
    # {id}.zarr/{path}: every directory, the root included
    listing = api.get(f"/api/zarr/{zarr_id}.zarr/").json()
    assert [d["name"] for d in listing["directories"]] == ["arr", "other"]
    assert [f["name"] for f in listing["files"]] == [".zgroup"]
    assert listing["digest"] == root["checksum"] and listing["path"] == ""
    assert api.get(f"/api/zarr/{zarr_id}//").json() == listing
    sub = api.get(f"/api/zarr/{zarr_id}.zarr/arr/sub/").json()
    assert [d["path"] for d in sub["directories"]] == ["arr/sub/deep"]
    assert api.get(f"/api/zarr/{zarr_id}.zarr/arr/sub").json() == sub
    missing = api.get(f"/api/zarr/{zarr_id}.zarr/arr/0/")
    assert missing.status_code == 404  # a file is not a directory
    assert api.get(f"/api/zarr/{zarr_id}.zarr/arr/0").json()["type"] == "file"


def test_info(api: httpx.Client, archive: Archive) -> None:
    body = api.get("/api/info/").json()
    assert body["bucket"] == archive.settings.s3_bucket
    assert body["max_batch_files"] == 500
    assert body["s3_endpoint_url"] == archive.settings.s3_endpoint_url
    assert set(body) == {
        "version",
        "schema_version",
        "schema_url",
        "allowed_schema_versions",
        "services",
        "cli-minimal-version",
        "cli-bad-versions",
        "s3_endpoint_url",
        "bucket",
        "max_batch_files",
        "published_zarrs",
    }
    assert body["published_zarrs"] == "freeze"
    # DANDI's fields: the API's URL as the client reached it (dandi names the instance,
    # and so its API-key variable, after it)
    assert body["services"] == {
        "api": {"url": f"{api.base_url}/api"},
        "webui": {"url": str(api.base_url)},
    }
    assert (body["schema_version"], body["cli-bad-versions"]) == ("0.8.0", [])
    assert api.get("/server-info").json() == body
    with httpx.Client(base_url=str(api.base_url).replace("127.0.0.1", "localhost")) as other:
        assert other.get("/server-info").json()["services"]["api"]["url"] == (
            f"{other.base_url}/api"
        )
    assert api.get("/docs").status_code == 200
    assert "/api/zarr/{zarr_id}/upload/complete/" in api.get("/openapi.json").json()["paths"]


def test_list_zarrs(api: httpx.Client, zarr_id: str, dandiset: str) -> None:
    second = api.post("/api/zarr/", json={"name": "b.zarr", "dandiset": dandiset}).json()
    listed = api.get("/api/zarr/", params={"dandiset": dandiset}).json()
    assert listed["count"] == 2 and listed["next"] is None and listed["previous"] is None
    assert [z["zarr_id"] for z in listed["results"]] == [zarr_id, second["zarr_id"]]
    named = api.get("/api/zarr/", params={"dandiset": dandiset, "name": "b.zarr"}).json()
    assert [z["zarr_id"] for z in named["results"]] == [second["zarr_id"]]
    params: dict[str, str | int] = {"dandiset": dandiset, "page_size": 1}
    first_page = api.get("/api/zarr/", params=params).json()
    assert first_page["count"] == 2 and first_page["previous"] is None
    rest = api.get(first_page["next"]).json()  # a full URL
    assert first_page["next"].startswith("http") and "page=2" in first_page["next"]
    assert [z["zarr_id"] for z in first_page["results"] + rest["results"]] == [
        zarr_id,
        second["zarr_id"],
    ]
    assert rest["next"] is None and rest["previous"] is not None
    assert api.get("/api/zarr/", params={**params, "page": 3}).status_code == 404
    for bad in ({"page": 0}, {"page": 10**17}, {"page_size": 1001}, {"page": "x"}):
        assert api.get("/api/zarr/", params=bad).status_code == 400, bad
    assert api.get("/api/zarr/", params={"dandiset": "000999"}).status_code == 404
