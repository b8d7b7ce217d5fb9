"""Publishing: the Zarr asset lifecycle, frozen Zarrs, refusals, shared blobs, racing uploads."""

from __future__ import annotations

import re
import threading

import httpx

from tests.conftest import Users
from tests.helpers.api_uploads import oracle, put_files, upload
from tests.helpers.assets import add_blob_asset, add_zarr_asset, assets_url, md5, ok
from tests.helpers.waiting import wait_until
from zarrchive.checksum.dandi_etag import dandi_etag

FILES = {
    ".zgroup": b'{"zarr_format":2}',
    "arr/.zarray": b'{"shape":[4]}',
    "arr/0": b"zero",
    "arr/sub/1": b"one",
}
VERSION = re.compile(r"^0\.\d{6}\.\d{4}$")


def zarr_metadata(path: str, checksum: str, size: int, **extra: object) -> dict[str, object]:
    return {
        "path": path,
        **extra,
        "encodingFormat": "application/x-zarr",
        "contentSize": size,
        "digest": {"dandi:dandi-zarr-checksum": checksum},
    }


def test_zarr_asset_lifecycle(
    api: httpx.Client, dandiset: str, zarr_id: str, live_server: object, users: Users
) -> None:
    first = {"arr/.zarray": FILES["arr/.zarray"]}
    upload(api, zarr_id, first)
    asset = add_zarr_asset(api, dandiset, zarr_id, "data/test.zarr", description="brain")
    assert asset["zarr_id"] == zarr_id and asset["blob_id"] is None
    assert asset["version"] == "draft" and asset["dandiset"] == dandiset
    assert asset["metadata"] == zarr_metadata(
        "data/test.zarr", oracle(first), len(FILES["arr/.zarray"]), description="brain"
    )
    asset_url = f"{assets_url(dandiset)}{asset['asset_id']}/"

    # the metadata follows the checksum after each upload and deletion
    info = upload(api, zarr_id, FILES)
    size = sum(len(b) for b in FILES.values())
    assert info["checksum"] == oracle(FILES)
    got = ok(api.get(f"{asset_url}info/"))
    assert got["metadata"] == zarr_metadata(
        "data/test.zarr", oracle(FILES), size, description="brain"
    )
    assert got["size"] == size
    ok(api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "arr/sub/1"}]), 204)
    remaining = {p: b for p, b in FILES.items() if p != "arr/sub/1"}
    got = ok(api.get(f"{asset_url}info/"))
    assert got["metadata"]["digest"] == {"dandi:dandi-zarr-checksum": oracle(remaining)}
    assert got["metadata"]["contentSize"] == size - 3

    # publish
    published = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    version = published["version"]
    assert VERSION.match(version), version
    assert published["asset_count"] == 1
    assert published["zarrs"] == [
        {
            "zarr_id": zarr_id,
            "path": "data/test.zarr",
            "checksum": oracle(remaining),
            "file_count": 3,
            "size": size - 3,
        }
    ]
    assert published["metadata"]["version"] == version
    assert ok(api.get(f"/api/dandisets/{dandiset}/versions/{version}/"))["id"] == (
        f"DANDI:{dandiset}/{version}"
    )
    listed = ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"]
    assert [v["version"] for v in listed] == [version, "draft"]
    assert [v["status"] for v in listed] == ["Published", "Published"]  # draft unchanged since

    # the published version lists the asset with the pinned checksum
    page = ok(api.get(assets_url(dandiset, version), params={"metadata": "true"}))
    assert page["count"] == 1 and page["next"] is None
    (pinned,) = page["results"]
    assert pinned["asset_id"] != asset["asset_id"]
    assert pinned["zarr_id"] == zarr_id and pinned["version"] == version
    expected = zarr_metadata("data/test.zarr", oracle(remaining), size - 3, description="brain")
    assert {k: pinned["metadata"][k] for k in expected} == expected
    # and what DANDI's published assets carry besides
    assert pinned["metadata"]["id"] == f"dandiasset:{pinned['asset_id']}"
    assert pinned["metadata"]["access"][0]["status"] == "dandi:OpenAccess"
    assert "datePublished" in pinned["metadata"] and "publishedBy" in pinned["metadata"]

    # every Zarr write endpoint refuses, for the owner and for an admin
    admin = httpx.Client(
        base_url=str(api.base_url), headers={"Authorization": f"token {users.admin}"}
    )
    frozen = (
        f"Zarr {zarr_id} belongs to published version {version} of dandiset {dandiset} and "
        "can no longer change: published data is immutable (create a new Zarr for new data)"
    )
    for client in (api, admin):
        writes = [
            client.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": md5(b"x")}]),
            client.post(f"/api/zarr/{zarr_id}/upload/complete/"),
            client.delete(f"/api/zarr/{zarr_id}/upload/"),
            client.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": "arr/0"}]),
        ]
        for response in writes:
            assert response.status_code == 403, response.text
            assert response.json() == {"detail": frozen}
    admin.close()
    zarr_info = ok(api.get(f"/api/zarr/{zarr_id}/"))
    assert zarr_info["checksum"] == oracle(remaining)
    assert zarr_info["published_versions"] == [version]

    # the draft keeps its asset; its metadata can still change; the published one cannot
    page = ok(api.get(assets_url(dandiset)))
    assert [a["asset_id"] for a in page["results"]] == [asset["asset_id"]]
    changed = ok(
        api.put(
            asset_url,
            json={"metadata": {"path": "data/renamed.zarr", "description": "new"}},
        )
    )
    assert changed["path"] == "data/renamed.zarr"
    assert changed["metadata"] == zarr_metadata(
        "data/renamed.zarr", oracle(remaining), size - 3, description="new"
    )
    pinned_url = f"{assets_url(dandiset, version)}{pinned['asset_id']}/"
    response = api.put(pinned_url, json={"metadata": {"path": "other.zarr"}})
    assert response.status_code == 403
    assert response.json() == {
        "detail": f"version {version} of dandiset {dandiset} is published and can no longer "
        "change: change assets of the draft instead"
    }
    assert api.delete(pinned_url).status_code == 403
    response = api.post(
        assets_url(dandiset, version), json={"metadata": {"path": "b.zarr"}, "zarr_id": zarr_id}
    )
    assert response.status_code == 403
    response = api.put(f"/api/dandisets/{dandiset}/versions/{version}/", json={"metadata": {}})
    assert response.status_code == 403
    assert ok(api.get(pinned_url))["path"] == "data/test.zarr"


def test_publish_refused_while_a_batch_is_open(
    api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    upload(api, zarr_id, {"e": b"e"})
    add_zarr_asset(api, dandiset, zarr_id, "a.zarr")
    urls = ok(api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "f", "etag": md5(b"f")}]))
    put_files(urls, {"f": b"f"})
    response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": {
            "message": "Zarrs of the draft have an upload batch open",
            "zarrs": [{"path": "a.zarr", "zarr_id": zarr_id}],
        }
    }
    assert ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"][0]["version"] == "draft"
    # the batch can still complete; then publishing works
    ok(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    published = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    assert published["zarrs"][0]["checksum"] == oracle({"e": b"e", "f": b"f"})


def test_publish_refused_while_embargoed_and_when_empty(api: httpx.Client, dandiset: str) -> None:
    response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"the draft of dandiset {dandiset} has no assets: nothing to publish"
    }
    embargoed = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))
    ident = embargoed["identifier"]
    zarr = ok(api.post("/api/zarr/", json={"name": "s.zarr", "dandiset": ident}))
    upload(api, zarr["zarr_id"], {"w": b"w"})
    add_zarr_asset(api, ident, zarr["zarr_id"], "s.zarr")
    response = api.post(f"/api/dandisets/{ident}/versions/draft/publish/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": f"dandiset {ident} is embargoed: unembargo it first, then publish "
        "(a published version is public)"
    }
    # nothing was frozen
    upload(api, zarr["zarr_id"], {"x": b"x"})


def test_a_zarr_asset_without_files_is_refused_at_publish(
    api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    """dandi-cli makes a new Zarr's asset before uploading its files, so the API takes an
    empty Zarr as an asset; publishing it is what is refused, naming the asset."""
    add_blob_asset(api, dandiset, b"nwb content", "sub-1/file.nwb")
    add_zarr_asset(api, dandiset, zarr_id, "empty.zarr")
    response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
    assert response.status_code == 409, response.text
    assert response.json() == {
        "detail": {
            "message": "Zarr assets of the draft have no files",
            "zarrs": [{"path": "empty.zarr", "zarr_id": zarr_id}],
        }
    }
    versions = ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"]
    assert [v["version"] for v in versions] == ["draft"]
    upload(api, zarr_id, {"a": b"a"})  # once it has files, it publishes
    published = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    assert published["zarrs"][0]["checksum"] == oracle({"a": b"a"})


def test_two_publications_and_blobs_are_shared(
    api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    upload(api, zarr_id, FILES)
    add_zarr_asset(api, dandiset, zarr_id, "z.zarr")
    blob_asset = add_blob_asset(api, dandiset, b"nwb content", "sub-1/file.nwb")
    first = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    second = ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    assert VERSION.match(first["version"]) and VERSION.match(second["version"])
    assert second["version"] > first["version"]
    assert first["size"] == second["size"] == sum(map(len, FILES.values())) + len(b"nwb content")
    for v in (first["version"], second["version"]):
        results = ok(api.get(assets_url(dandiset, v), params={"metadata": "true"}))["results"]
        assert [(a["path"], a["blob_id"], a["zarr_id"]) for a in results] == [
            ("sub-1/file.nwb", blob_asset["blob_id"], None),
            ("z.zarr", None, zarr_id),
        ]
        assert results[0]["metadata"]["digest"] == {
            "dandi:dandi-etag": dandi_etag(b"nwb content"),
            "dandi:md5": md5(b"nwb content"),
        }


def test_publish_racing_uploads(api: httpx.Client, dandiset: str, zarr_id: str) -> None:
    """Uploads race a publication: each finishes before it (and is pinned) or is refused."""
    upload(api, zarr_id, {"start": b"start"})
    add_zarr_asset(api, dandiset, zarr_id, "race.zarr")
    results: list[int] = []
    stop = threading.Event()

    def uploader() -> None:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=60) as client:
            for i in range(200):
                if stop.is_set():
                    return
                body = f"file {i}".encode()
                response = client.post(
                    f"/api/zarr/{zarr_id}/upload/", json=[{"path": f"f{i}", "etag": md5(body)}]
                )
                results.append(response.status_code)
                if response.status_code == 403:
                    return
                assert response.status_code == 200, response.text
                put_files(response.json(), {f"f{i}": body})
                response = client.post(f"/api/zarr/{zarr_id}/upload/complete/")
                results.append(response.status_code)
                if response.status_code == 403:
                    return
                assert response.status_code == 200, response.text

    thread = threading.Thread(target=uploader)
    thread.start()
    try:
        wait_until(
            lambda: len(results) >= 4 or not thread.is_alive(), "the uploader's first batches"
        )
        assert len(results) >= 4, results  # else the uploader failed (its error above)
        refused = 0
        while True:
            response = api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/")
            if response.status_code == 200:
                break
            assert response.status_code == 409, response.text
            refused += 1
    finally:
        stop.set()
        thread.join(60)
    published = response.json()
    pinned = published["zarrs"][0]["checksum"]
    # the Zarr never changed after the publication, and is not mid-batch
    zarr = ok(api.get(f"/api/zarr/{zarr_id}/"))
    assert zarr["checksum"] == pinned and zarr["upload_in_progress"] is False
    assert results[-1] in (200, 403)
    frozen = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "z", "etag": md5(b"z")}])
    assert frozen.status_code == 403
