"""Versions and assets: metadata, validation, listing, and who may do what."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import delete

from tests.conftest import Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import (
    add_blob_asset,
    add_zarr_asset,
    assets_url,
    client_for,
    md5,
    ok,
    upload_blob,
)
from tests.helpers.databases import SQLITE_ONLY
from zarrchive.checksum.dandi_etag import dandi_etag
from zarrchive.db.models import Version
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY


@pytest.fixture
def admin(api: httpx.Client, users: Users) -> Iterator[httpx.Client]:
    with client_for(api, users.admin) as client:
        yield client


def test_draft_version_metadata(api: httpx.Client, dandiset: str, anon: httpx.Client) -> None:
    ours = {
        "identifier": f"DANDI:{dandiset}",
        "id": f"DANDI:{dandiset}/draft",
        "version": "draft",
    }
    draft = ok(anon.get(f"/api/dandisets/{dandiset}/versions/draft/"))
    # a new draft, as DANDI makes it: of the current schema
    created = {"schemaKey": "Dandiset", "schemaVersion": "0.8.0"}
    assert draft == {**created, **ours, "name": "test dandiset"}
    info = ok(anon.get(f"/api/dandisets/{dandiset}/versions/draft/info/"))
    assert info["dandiset"]["identifier"] == dandiset and info["version"] == "draft"
    assert (info["asset_count"], info["size"], info["zarrs"]) == (0, 0, [])
    assert (info["status"], info["name"], info["contact_person"]) == (
        "Pending",
        "test dandiset",
        "",
    )
    contact = {"name": "A", "roleName": ["dcite:ContactPerson"]}
    new = {"name": "renamed", "description": "x", "contributor": [contact]}
    updated = ok(api.put(f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": new}))
    assert updated["metadata"] == {**new, **ours}
    assert (updated["name"], updated["contact_person"]) == ("renamed", "A")
    assert ok(anon.get(f"/api/dandisets/{dandiset}/versions/draft/")) == {**new, **ours}
    assert ok(anon.get(f"/api/dandisets/{dandiset}/"))["name"] == "renamed"
    versions = ok(anon.get(f"/api/dandisets/{dandiset}/versions/"))
    assert (versions["count"], versions["next"], versions["previous"]) == (1, None, None)
    assert [v["version"] for v in versions["results"]] == ["draft"]
    response = anon.get(f"/api/dandisets/{dandiset}/versions/0.261122.0000/")
    assert response.status_code == 404
    assert response.json() == {"detail": f"dandiset {dandiset} has no version '0.261122.0000'"}
    bad = api.put(f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": [1]})
    assert bad.status_code == 400
    assert anon.get("/api/dandisets/999999/versions/").status_code == 404


def test_assets_validation(api: httpx.Client, dandiset: str, zarr_id: str, archive: object) -> None:
    url = assets_url(dandiset)
    # (a Zarr without files may be an asset: dandi-cli makes it one before uploading,
    # tests/reliability/test_review_embargo.py)
    checksum = upload(api, zarr_id, {"a": b"a"})["checksum"]
    asset = add_zarr_asset(api, dandiset, zarr_id, "a/b.zarr")
    assert asset["metadata"]["digest"] == {"dandi:dandi-zarr-checksum": checksum}
    blob_id = upload_blob(api, dandiset, b"blob")

    def refused(body: dict[str, Any], status: int, detail: str) -> None:
        response = api.post(url, json=body)
        assert (response.status_code, response.json()) == (status, {"detail": detail}), body

    refused(
        {"metadata": {"path": "a/b.zarr"}, "blob_id": blob_id},
        400,
        "version draft already has an asset at 'a/b.zarr'",
    )
    refused(
        {"metadata": {"path": "/abs"}, "blob_id": blob_id},
        400,
        "'/abs' starts with '/': paths are relative to the Zarr root",
    )
    refused(
        {"metadata": {"path": "a/../b"}, "blob_id": blob_id},
        400,
        "'a/../b' has a '..' segment: give a plain path",
    )
    refused(
        {"metadata": {}, "blob_id": blob_id},
        400,
        "the asset's metadata has no 'path': give the file's path",
    )
    refused(
        {"metadata": {"path": "x"}, "blob_id": blob_id, "zarr_id": zarr_id},
        400,
        "give exactly one of 'blob_id' and 'zarr_id'",
    )
    refused({"metadata": {"path": "x"}}, 400, "give exactly one of 'blob_id' and 'zarr_id'")
    refused(
        {"metadata": {"path": "x.zarr"}, "zarr_id": zarr_id},
        400,
        f"Zarr {zarr_id} is already the asset 'a/b.zarr' of this version: a Zarr is one asset",
    )
    missing = "00000000-0000-4000-8000-000000000000"
    refused(
        {"metadata": {"path": "x"}, "blob_id": missing},
        404,
        f"no blob '{missing}': upload it first (POST /api/uploads/initialize/)",
    )
    refused({"metadata": {"path": "x"}, "zarr_id": missing}, 404, f"no Zarr {missing}")
    # a Zarr of another dandiset is shared only once published (tests/api/test_shared_zarrs.py)
    second = ok(api.post("/api/dandisets/", json={"name": "second"}))["identifier"]
    foreign = ok(api.post("/api/zarr/", json={"name": "f.zarr", "dandiset": second}))["zarr_id"]
    refused(
        {"metadata": {"path": "f.zarr"}, "zarr_id": foreign},
        409,
        f"Zarr {foreign} of dandiset {second} has no published state: a Zarr of another "
        "dandiset is shared as a published version holds it (publish dandiset "
        f"{second} first)",
    )
    # an embargoed blob cannot serve a public dandiset
    secret = ok(api.post("/api/dandisets/", json={"name": "s", "embargo": True}))["identifier"]
    hidden = upload_blob(api, secret, b"hidden")
    refused(
        {"metadata": {"path": "h"}, "blob_id": hidden},
        400,
        f"blob {hidden} is embargoed and dandiset {dandiset} is public: "
        "upload the file again for this dandiset",
    )
    # but a public blob may serve an embargoed dandiset
    ok(api.post(assets_url(secret), json={"metadata": {"path": "p"}, "blob_id": blob_id}))
    # unknown versions and assets
    response = api.post(assets_url(dandiset, "0.200101.0000"), json={"metadata": {"path": "x"}})
    assert response.status_code == 404
    assert api.get(f"{url}{missing}/").status_code == 404
    assert api.get(f"{url}not-a-uuid/").status_code == 404


def test_blob_asset_update_delete(api: httpx.Client, dandiset: str, zarr_id: str) -> None:
    asset = add_blob_asset(api, dandiset, b"v1", "f.nwb", encodingFormat="application/x-nwb")
    url = f"{assets_url(dandiset)}{asset['asset_id']}/"
    assert asset["metadata"] == {
        "path": "f.nwb",
        "encodingFormat": "application/x-nwb",
        "contentSize": 2,
        "digest": {"dandi:dandi-etag": dandi_etag(b"v1"), "dandi:md5": md5(b"v1")},
    }
    assert ok(api.get(url)) == asset["metadata"]
    assert ok(api.get(f"{url}info/")) == asset
    assert asset["size"] == 2
    # new content and metadata under the same asset id
    blob2 = upload_blob(api, dandiset, b"version 2")
    changed = ok(api.put(url, json={"metadata": {"path": "g.nwb", "k": 1}, "blob_id": blob2}))
    assert (changed["asset_id"], changed["blob_id"], changed["path"]) == (
        asset["asset_id"],
        blob2,
        "g.nwb",
    )
    assert changed["metadata"] == {
        "path": "g.nwb",
        "k": 1,
        "contentSize": 9,
        "digest": {"dandi:dandi-etag": dandi_etag(b"version 2"), "dandi:md5": md5(b"version 2")},
    }
    # a blob asset may become a Zarr asset (one with files)
    upload(api, zarr_id, {"z": b"z"})
    as_zarr = ok(api.put(url, json={"metadata": {"path": "g.zarr"}, "zarr_id": zarr_id}))
    assert as_zarr["metadata"]["encodingFormat"] == "application/x-zarr"
    assert as_zarr["blob_id"] is None and as_zarr["zarr_id"] == zarr_id
    other = add_blob_asset(api, dandiset, b"x", "x.bin")
    response = api.put(url, json={"metadata": {"path": "x.bin"}})
    assert response.status_code == 400
    assert response.json() == {"detail": "version draft already has an asset at 'x.bin'"}
    assert api.delete(url).status_code == 204
    assert api.get(url).status_code == 404
    assert api.delete(url).status_code == 404
    page = ok(api.get(assets_url(dandiset)))
    assert [a["asset_id"] for a in page["results"]] == [other["asset_id"]]
    draft = ok(api.get(f"/api/dandisets/{dandiset}/versions/draft/info/"))
    assert (draft["asset_count"], draft["size"]) == (1, 1)


def test_list_pages_and_path_prefix(api: httpx.Client, dandiset: str, zarr_id: str) -> None:
    blob_id = upload_blob(api, dandiset, b"shared content")
    paths = ["sub-1/a.nwb", "sub-1/b.nwb", "sub-10/c.nwb", "Sub-1/d.nwb", "sub_1/e.nwb", "z.nwb"]
    for path in paths:
        ok(api.post(assets_url(dandiset), json={"metadata": {"path": path}, "blob_id": blob_id}))
    upload(api, zarr_id, {"x": b"12345"})
    add_zarr_asset(api, dandiset, zarr_id, "sub-1/data.zarr")

    def listing(**params: Any) -> tuple[int, list[str]]:
        seen: list[str] = []
        page = ok(api.get(assets_url(dandiset), params=params))
        count = page["count"]
        while True:
            assert page["count"] == count
            seen += [a["path"] for a in page["results"]]
            if page["next"] is None:
                return count, seen
            assert page["next"].startswith(str(api.base_url))  # a full URL
            page = ok(api.get(page["next"]))

    total, everything = listing(page_size=2)
    assert total == 7 and sorted(everything) == sorted([*paths, "sub-1/data.zarr"])
    assert len(set(everything)) == 7
    count, found = listing(path="sub-1/", page_size=1)
    assert (count, sorted(found)) == (3, ["sub-1/a.nwb", "sub-1/b.nwb", "sub-1/data.zarr"])
    count, found = listing(path="sub-1")
    assert (count, sorted(found)) == (
        4,
        ["sub-1/a.nwb", "sub-1/b.nwb", "sub-1/data.zarr", "sub-10/c.nwb"],
    )
    assert listing(path="sub_")[1] == ["sub_1/e.nwb"]  # no LIKE wildcards
    assert listing(path="nothing/") == (0, [])
    page = ok(api.get(assets_url(dandiset), params={"path": "sub-1/data"}))
    (zarr_asset,) = page["results"]
    assert zarr_asset["size"] == 5 and zarr_asset["zarr_id"] == zarr_id
    second = ok(api.get(assets_url(dandiset), params={"page_size": 2, "page": 2}))
    assert second["previous"] == f"{api.base_url}{assets_url(dandiset)}?page_size=2"
    assert [a["path"] for a in second["results"]] == ["sub-1/b.nwb", "sub-1/data.zarr"]
    assert listing(glob="*/?.nwb")[1] == [
        "Sub-1/d.nwb",
        "sub-1/a.nwb",
        "sub-1/b.nwb",
        "sub-10/c.nwb",
        "sub_1/e.nwb",
    ]
    assert listing(glob="sub-1*", order="-path")[1] == [
        "sub-10/c.nwb",
        "sub-1/data.zarr",
        "sub-1/b.nwb",
        "sub-1/a.nwb",
    ]
    assert api.get(assets_url(dandiset), params={"order": "size"}).status_code == 400
    assert api.get(assets_url(dandiset), params={"page_size": 0}).status_code == 400
    assert api.get(assets_url(dandiset), params={"page": 0}).status_code == 400
    paths = ok(api.get(f"{assets_url(dandiset)}paths/", params={"path_prefix": "sub-1"}))
    assert [(e["path"], e["aggregate_files"], e["aggregate_size"]) for e in paths["results"]] == [
        ("sub-1/a.nwb", 1, 14),
        ("sub-1/b.nwb", 1, 14),
        ("sub-1/data.zarr", 1, 5),
    ]
    root = ok(api.get(f"{assets_url(dandiset)}paths/"))["results"]
    assert [(e["path"], e["aggregate_files"], e["asset"]) for e in root][:2] == [
        ("Sub-1", 1, None),
        ("sub-1", 3, None),
    ]


# -- who may do what -------------------------------------------------------------------------
ROLES = ("anon", "other", "owner", "admin")


@pytest.mark.parametrize("embargoed", [False, True], ids=["public", "embargoed"])
def test_authorization_matrix(
    api: httpx.Client,
    anon: httpx.Client,
    other: httpx.Client,
    admin: httpx.Client,
    embargoed: bool,
) -> None:
    clients = {"anon": anon, "other": other, "owner": api, "admin": admin}
    ident = ok(api.post("/api/dandisets/", json={"name": "m", "embargo": embargoed}))["identifier"]
    zarr_id = ok(api.post("/api/zarr/", json={"name": "m.zarr", "dandiset": ident}))["zarr_id"]
    blob_id = upload_blob(api, ident, b"matrix")
    upload(api, zarr_id, {"m": b"m"})
    zasset = add_zarr_asset(api, ident, zarr_id, "m.zarr")
    basset = ok(api.post(assets_url(ident), json={"metadata": {"path": "b"}, "blob_id": blob_id}))
    draft = f"/api/dandisets/{ident}/versions/draft/"
    assets = assets_url(ident)

    def fresh_asset(role: str) -> str:
        body = {"metadata": {"path": f"del-{role}"}, "blob_id": blob_id}
        return str(ok(api.post(assets, json=body))["asset_id"])

    endpoints: dict[str, Callable[[httpx.Client, str], httpx.Response]] = {
        "list versions": lambda c, r: c.get(f"/api/dandisets/{ident}/versions/"),
        "get draft": lambda c, r: c.get(draft),
        "put draft": lambda c, r: c.put(draft, json={"metadata": {"name": r}}),
        "list assets": lambda c, r: c.get(assets),
        "get asset": lambda c, r: c.get(f"{assets}{basset['asset_id']}/"),
        "create asset": lambda c, r: c.post(
            assets, json={"metadata": {"path": f"new-{r}"}, "blob_id": blob_id}
        ),
        "update asset": lambda c, r: c.put(
            f"{assets}{zasset['asset_id']}/", json={"metadata": {"path": "m.zarr", "by": r}}
        ),
        "delete asset": lambda c, r: c.delete(f"{assets}{fresh_asset(r)}/"),
        "initialize upload": lambda c, r: c.post(
            "/api/uploads/initialize/",
            json={"size": 1, "md5": md5(r.encode()), "dandiset": ident},
        ),
        "download blob": lambda c, r: c.get(f"/api/assets/{basset['asset_id']}/download/"),
        "download zarr": lambda c, r: c.get(f"/api/assets/{zasset['asset_id']}/download/"),
        "publish": lambda c, r: c.post(f"{draft}publish/"),
    }
    read = {"anon": 200, "other": 200, "owner": 200, "admin": 200}
    write = {"anon": 401, "other": 403, "owner": 200, "admin": 200}
    expected: dict[str, dict[str, int]] = {
        "list versions": read,
        "get draft": read,
        "put draft": write,
        "list assets": read,
        "get asset": read,
        "create asset": write,
        "update asset": write,
        "delete asset": {**write, "owner": 204, "admin": 204},
        "initialize upload": write,
        "download blob": {r: 302 for r in ROLES},
        "download zarr": {r: 400 for r in ROLES},  # as DANDI: no link for Zarrs
        "publish": write,
    }
    if embargoed:
        # anonymous callers are asked to authenticate (DANDI's clients send their key only
        # then); strangers learn nothing; publishing an embargoed dandiset is a conflict
        for name, statuses in expected.items():
            expected[name] = {**statuses, "anon": 401, "other": 404}
        expected["publish"] = {**expected["publish"], "owner": 409, "admin": 409}
    found = {
        name: {role: call(clients[role], role).status_code for role in ROLES}
        for name, call in endpoints.items()
    }
    assert found == expected


def test_content_fields_come_from_the_content(
    api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    """Clients cannot claim another digest, size or format: the server fills them in."""
    spoof = {
        "digest": {"dandi:md5": "0" * 32},
        "contentSize": 999,
        "encodingFormat": "text/plain",
    }
    checksum = upload(api, zarr_id, {"z": b"zz"})["checksum"]
    zasset = add_zarr_asset(api, dandiset, zarr_id, "z.zarr", **spoof)
    assert zasset["metadata"] == {
        "path": "z.zarr",
        "encodingFormat": "application/x-zarr",
        "contentSize": 2,
        "digest": {"dandi:dandi-zarr-checksum": checksum},
    }
    basset = add_blob_asset(api, dandiset, b"12", "b.bin", **spoof)
    assert basset["metadata"] == {
        "path": "b.bin",
        "encodingFormat": "text/plain",  # a blob's format is the client's to say
        "contentSize": 2,
        "digest": {"dandi:dandi-etag": dandi_etag(b"12"), "dandi:md5": md5(b"12")},
    }


def test_dandiset_without_a_draft_gets_one(
    api: httpx.Client, dandiset: str, archive: Archive
) -> None:
    """Dandisets created before versions existed get their draft on first use."""
    with archive.db.session() as session:
        session.execute(delete(Version))
    draft = ok(api.get(f"/api/dandisets/{dandiset}/versions/draft/"))
    assert draft["identifier"] == f"DANDI:{dandiset}" and draft["name"] == "test dandiset"
    versions = ok(api.get(f"/api/dandisets/{dandiset}/versions/"))["results"]
    assert [v["version"] for v in versions] == ["draft"]
