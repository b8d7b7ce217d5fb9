"""Dandisets in DANDI's shapes: creation, DANDI's list filters and pagination, deletion,
the auth token route."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Users
from tests.helpers.assets import add_blob_asset, client_for, ok
from tests.helpers.databases import SQLITE_ONLY

pytestmark = SQLITE_ONLY


def names(page: dict[str, Any]) -> list[str]:
    return [d["name"] for d in page["results"]]


def test_create_in_dandis_shape(api: httpx.Client, anon: httpx.Client) -> None:
    contact = {"name": "Doe, Jane", "roleName": ["dcite:ContactPerson"]}
    body = {"name": "mine", "metadata": {"description": "d", "contributor": [contact]}}
    created = ok(api.post("/api/dandisets/", json=body))
    ident = created["identifier"]
    assert set(created) == {
        "identifier",
        "created",
        "modified",
        "contact_person",
        "embargo_status",
        "draft_version",
        "most_recent_published_version",
        "name",
        "embargoed",
        "owners",
    }
    assert (created["contact_person"], created["embargo_status"]) == ("Doe, Jane", "OPEN")
    assert created["most_recent_published_version"] is None
    draft = created["draft_version"]
    assert (draft["version"], draft["name"], draft["asset_count"], draft["size"]) == (
        "draft",
        "mine",
        0,
        0,
    )
    assert draft["status"] == "Pending"  # validated in the background, as on DANDI
    assert ok(anon.get(f"/api/dandisets/{ident}/")) == created
    assert ok(anon.get(f"/api/dandisets/{ident}/versions/draft/")) == {
        "schemaKey": "Dandiset",
        "schemaVersion": "0.8.0",
        "description": "d",
        "contributor": [contact],
        "identifier": f"DANDI:{ident}",
        "id": f"DANDI:{ident}/draft",
        "version": "draft",
        "name": "mine",
    }
    secret = ok(api.post("/api/dandisets/", params={"embargo": "true"}, json={"name": "s"}))
    assert (secret["embargo_status"], secret["embargoed"]) == ("EMBARGOED", True)
    old_style = ok(api.post("/api/dandisets/", json={"name": "o", "embargo": True}))
    assert old_style["embargo_status"] == "EMBARGOED"
    for bad in ({"name": ""}, {"name": "x", "metadata": []}, {"name": "x", "other": 1}):
        response = api.post("/api/dandisets/", json=bad)
        assert response.status_code in (400, 422), bad


def test_list_filters_and_pages(api: httpx.Client, anon: httpx.Client, users: Users) -> None:
    for name in ("beta", "alpha", "gamma"):
        ok(api.post("/api/dandisets/", json={"name": name}))
    secret = ok(api.post("/api/dandisets/?embargo=true", json={"name": "secret"}))
    with client_for(api, users.other) as other:
        theirs = ok(other.post("/api/dandisets/", json={"name": "theirs"}))["identifier"]
        assert names(ok(other.get("/api/dandisets/", params={"user": "me"}))) == ["theirs"]
        assert "secret" not in names(ok(other.get("/api/dandisets/?embargoed=true")))
    first = ok(anon.get("/api/dandisets/", params={"page_size": 2}))
    assert (first["count"], names(first), first["previous"]) == (4, ["beta", "alpha"], None)
    assert first["next"] == f"{anon.base_url}/api/dandisets/?page_size=2&page=2"
    second = ok(anon.get(first["next"]))
    assert (names(second), second["next"]) == (["gamma", "theirs"], None)
    assert second["previous"] == f"{anon.base_url}/api/dandisets/?page_size=2"
    assert names(ok(anon.get("/api/dandisets/?ordering=name"))) == [
        "alpha",
        "beta",
        "gamma",
        "theirs",
    ]
    assert names(ok(anon.get("/api/dandisets/?ordering=-id")))[0] == "theirs"
    assert names(ok(api.get("/api/dandisets/?embargoed=true&user=me&ordering=-id"))) == [
        "secret",
        "gamma",
        "alpha",
        "beta",
    ]
    assert names(ok(anon.get("/api/dandisets/?embargoed=true")))[-1] == "theirs"  # not secret
    assert names(ok(anon.get("/api/dandisets/?search=AMM"))) == ["gamma"]
    # no LIKE ('%' is no wildcard: LIKE '%l%h%' would find alpha); punctuation separates words
    assert names(ok(anon.get("/api/dandisets/", params={"search": "l%h"}))) == []
    assert ok(anon.get("/api/dandisets/", params={"search": "9" * 30}))["count"] == 0
    assert names(ok(anon.get(f"/api/dandisets/?search={theirs}"))) == ["theirs"]
    add_blob_asset(api, secret["identifier"], b"x", "x.bin")
    assert names(ok(api.get("/api/dandisets/?embargoed=true&empty=false"))) == ["secret"]
    assert ok(anon.get("/api/dandisets/?draft=false"))["count"] == 0
    assert anon.get("/api/dandisets/?ordering=size").status_code == 400
    assert anon.get("/api/dandisets/?user=me").status_code == 401
    assert anon.get("/api/dandisets/?page=0").status_code == 400


def test_delete(api: httpx.Client, anon: httpx.Client, users: Users) -> None:
    ident = ok(api.post("/api/dandisets/", json={"name": "gone"}))["identifier"]
    add_blob_asset(api, ident, b"blob", "b.bin")
    with client_for(api, users.other) as other:
        assert other.delete(f"/api/dandisets/{ident}/").status_code == 403
    assert anon.delete(f"/api/dandisets/{ident}/").status_code == 401
    assert api.delete(f"/api/dandisets/{ident}/").status_code == 204
    assert anon.get(f"/api/dandisets/{ident}/").status_code == 404
    assert api.delete(f"/api/dandisets/{ident}/").status_code == 404
    kept = ok(api.post("/api/dandisets/", json={"name": "kept"}))["identifier"]
    ok(api.post("/api/zarr/", json={"name": "z.zarr", "dandiset": kept}))
    response = api.delete(f"/api/dandisets/{kept}/")
    assert response.status_code == 409
    assert "holds Zarrs" in response.json()["detail"]


def test_auth_token(api: httpx.Client, anon: httpx.Client, users: Users) -> None:
    assert ok(api.get("/api/auth/token/")) == users.owner
    assert ok(api.get("/api/auth/token")) == users.owner  # dandi asks without the slash
    assert anon.get("/api/auth/token/").status_code == 401
    with client_for(api, "f" * 40) as wrong:
        response = wrong.get("/api/auth/token/")
    assert response.status_code == 401
    assert "API token is not valid" in response.json()["detail"]
