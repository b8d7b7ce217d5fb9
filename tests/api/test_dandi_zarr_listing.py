"""DANDI's flat listing ``GET|HEAD /api/zarr/{id}/files/`` (``prefix``, ``after``, ``limit``,
``download=true``) and the directory listing at ``GET /api/zarr/{id}.zarr/{path}``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from tests.helpers.dandi_zarr import flat_listing
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    upload,
)
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import zarr_object_key

pytestmark = SQLITE_ONLY

#: names whose key order (UTF-8 bytes, as S3 lists) differs from a directory walk's order
FILES = {
    "a/b": b"1",
    "a-b": b"2",
    "a.b": b"3",
    "a0": b"4",
    "a/c/d": b"5",
    "a/c-d": b"6",
    "B": b"7",
    "\u00e9t\u00e9/x": b"8",
    "z/\u4e2d": b"9",
    "z/a b": b"space",
    "z/a#b": b"hash",
    "z/a%b": b"percent",
    "z/a~": b"tilde",
    ".zgroup": b"{}",
    "files/x": b"a directory named files",
    "upload/y": b"and upload",
    **{f"arr/{i}/{j}": f"{i}.{j}".encode() for i in range(4) for j in range(7)},
}


def keys(files: dict[str, bytes], prefix: str = "", after: str = "") -> list[str]:
    chosen = [k for k in files if k.startswith(prefix) and k.encode() > after.encode()]
    return sorted(chosen, key=lambda k: k.encode("utf-8"))


def test_flat_listing_pages_exactly_the_sorted_keys(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    everything, pages = flat_listing(api, zarr_id)
    assert pages == 1 and [r["Key"] for r in everything] == keys(FILES)
    for row in everything:
        assert set(row) == {"Key", "LastModified", "ETag", "Size"}
        assert row["ETag"] == md5(FILES[row["Key"]]) and row["Size"] == len(FILES[row["Key"]])
        s3 = archive.store.head(zarr_object_key(zarr_id, row["Key"]))
        assert s3 is not None
        assert datetime.fromisoformat(row["LastModified"]) == s3.last_modified, row["Key"]
    # LastModified of pages cut inside a directory too
    for row in flat_listing(api, zarr_id, limit=3, prefix="z/")[0]:
        s3 = archive.store.head(zarr_object_key(zarr_id, row["Key"]))
        assert s3 is not None
        assert datetime.fromisoformat(row["LastModified"]) == s3.last_modified, row["Key"]
    for limit in (1, 3, 7, 1000):
        for prefix in ("", "a", "a/", "arr/1", "arr/1/", "\u00e9", "nothing"):
            got, pages = flat_listing(api, zarr_id, limit=limit, prefix=prefix)
            expected = keys(FILES, prefix)
            assert [r["Key"] for r in got] == expected, (limit, prefix)
            # (an S3 may answer one empty last page when the keys end a page exactly)
            assert max(1, -(-len(expected) // limit)) <= pages <= len(expected) // limit + 1
    for after in ("a", "a/c", "arr/2/3", "\u00e9t\u00e9/x", "zzz"):
        got, _ = flat_listing(api, zarr_id, after=after, limit=4)
        assert [r["Key"] for r in got] == keys(FILES, after=after), after
    got, _ = flat_listing(api, zarr_id, prefix="arr/", after="arr/1/6", limit=5)
    assert [r["Key"] for r in got] == keys(FILES, "arr/", "arr/1/6")
    # next is a full URL carrying the other parameters
    page = expect(api.get(f"/api/zarr/{zarr_id}/files/", params={"prefix": "arr/", "limit": 2}))
    assert page["next"].startswith("http") and "prefix=arr" in page["next"]
    assert "after=arr%2F0%2F1" in page["next"]
    assert expect(api.get(f"/api/zarr/{zarr_id}/files/", params={"limit": 0})) == {
        "next": None,
        "results": [],
    }
    # dandi-cli asks without the trailing slash
    assert (
        expect(api.get(f"/api/zarr/{zarr_id}/files", params={"prefix": "B"}))["results"][0]["Key"]
        == "B"
    )


def test_download_and_head_redirect_to_the_object(
    api: httpx.Client, anon: httpx.Client, zarr_id: str
) -> None:
    upload(api, zarr_id, FILES)
    url = f"/api/zarr/{zarr_id}/files/"
    for path in ("a/c/d", "\u00e9t\u00e9/x", "files/x"):
        response = anon.get(url, params={"prefix": path, "download": "true"})
        assert response.status_code == 302, response.text
        with httpx.Client(timeout=30) as s3:
            assert s3.get(response.headers["location"]).content == FILES[path]
        head = anon.head(url, params={"prefix": path})
        assert head.status_code == 302
        with httpx.Client(timeout=30) as s3:
            got = s3.head(head.headers["location"])
            assert got.status_code == 200 and got.headers["etag"].strip('"') == md5(FILES[path])
    assert anon.get(url, params={"prefix": "nope", "download": "true"}).status_code == 404
    assert anon.get(url, params={"prefix": "arr", "download": "true"}).status_code == 404
    assert anon.head(url, params={"prefix": "nope"}).status_code == 404


def test_embargoed_listing_and_download(
    api: httpx.Client, anon: httpx.Client, users: Any, live_server: Any
) -> None:
    dandiset = create_dandiset(api, "secret", embargo=True)
    zarr_id = create_zarr(api, dandiset)
    upload(api, zarr_id, {"arr/0": b"secret"})
    url = f"/api/zarr/{zarr_id}/files/"
    assert [r["Key"] for r in expect(api.get(url))["results"]] == ["arr/0"]
    response = api.get(url, params={"prefix": "arr/0", "download": "true"})
    assert response.status_code == 302 and "X-Amz-Signature" in response.headers["location"]
    with httpx.Client(timeout=30) as s3:
        assert s3.get(response.headers["location"]).content == b"secret"
        head = api.head(url, params={"prefix": "arr/0"})
        assert s3.head(head.headers["location"]).status_code == 200
    with authed(live_server.url, users.other) as other:
        for client, status in ((anon, 401), (other, 404)):
            assert client.get(url).status_code == status
            download = client.get(url, params={"prefix": "arr/0", "download": "true"})
            assert download.status_code == status


def test_bad_listing_parameters_are_400(api: httpx.Client, zarr_id: str) -> None:
    upload(api, zarr_id, {"a": b"a"})
    url = f"/api/zarr/{zarr_id}/files/"
    for params in (
        {"limit": 1001},
        {"limit": -1},
        {"limit": "x"},
        {"prefix": "../a"},
        {"prefix": "a//"},
        {"prefix": "a\\b"},
        {"after": "a/../b"},
        {"download": "maybe"},
        {"prefix": "", "download": "true"},
    ):
        response = api.get(url, params=params)
        assert response.status_code == 400, (params, response.text)
    unknown = "00000000-0000-4000-8000-000000000000"
    assert api.get(f"/api/zarr/{unknown}/files/").status_code == 404
    assert api.get("/api/zarr/not-a-uuid/files/").status_code == 404


def test_directory_listing_lives_at_id_dot_zarr(api: httpx.Client, zarr_id: str) -> None:
    upload(api, zarr_id, FILES)
    root = expect(api.get(f"/api/zarr/{zarr_id}.zarr/"))
    assert root["type"] == "directory" and root["path"] == ""
    assert root["digest"] == expect(api.get(f"/api/zarr/{zarr_id}/"))["checksum"]
    names = [d["name"] for d in root["directories"]]
    assert "files" in names and "upload" in names and "arr" in names
    # names that other routes take are plain paths under {id}.zarr/
    files_dir = expect(api.get(f"/api/zarr/{zarr_id}.zarr/files/"))
    assert [f["path"] for f in files_dir["files"]] == ["files/x"]
    upload_file = expect(api.get(f"/api/zarr/{zarr_id}.zarr/upload/y"))
    assert upload_file["type"] == "file" and upload_file["md5"] == md5(b"and upload")
    # pages with cursors
    first = expect(api.get(f"/api/zarr/{zarr_id}.zarr/arr/", params={"page_size": 3}))
    rest = expect(
        api.get(f"/api/zarr/{zarr_id}.zarr/arr/", params={"page_size": 3, "cursor": first["next"]})
    )
    assert [d["name"] for d in first["directories"] + rest["directories"]] == ["0", "1", "2", "3"]
    assert api.get(f"/api/zarr/{zarr_id}.zarr/nope/").status_code == 404
    assert api.get(f"/api/zarr/{zarr_id}.zarr/a%5Cb/").status_code == 400  # a backslash
