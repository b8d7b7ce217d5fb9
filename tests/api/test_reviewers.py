"""Reviewers of embargoed dandisets (issue #36 part 4): they read everything of the dandiset
through every read route and presigned URL, change nothing, are listed and changed by owners
and admins only, and lose sight at once when removed (API and web session)."""

from __future__ import annotations

import re

import httpx

from tests.conftest import LiveServer, Users
from tests.helpers.assets import add_blob_asset, add_zarr_asset, client_for, ok
from tests.helpers.blob_uploads import downloaded
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.web_forms import form_token
from tests.helpers.web_site import browser
from tests.helpers.zarr_client import upload

pytestmark = SQLITE_ONLY

FILES = {"arr/.zarray": b"{}", "arr/0": b"zero"}
BLOB = b"a reviewer reads this"


def reviewers_url(dandiset: str) -> str:
    return f"/api/dandisets/{dandiset}/reviewers/"


def _fill(api: httpx.Client, dandiset: str, zarr_id: str) -> str:
    """The Zarr's files and assets of the embargoed dandiset; the blob asset's id."""
    upload(api, zarr_id, FILES)
    add_zarr_asset(api, dandiset, zarr_id, "s.zarr")
    return str(add_blob_asset(api, dandiset, BLOB, "data.bin")["asset_id"])


def _reads(client: httpx.Client, dandiset: str, zarr_id: str, blob_asset: str) -> list[int]:
    """The statuses of the dandiset's read routes for *client* (the bytes checked when 2xx)."""
    draft = f"/api/dandisets/{dandiset}/versions/draft"
    statuses = [
        client.get(f"/api/dandisets/{dandiset}/").status_code,
        client.get(f"{draft}/").status_code,
        client.get(f"{draft}/assets/").status_code,
        client.get(f"/api/assets/{blob_asset}/").status_code,
        client.get(f"/api/zarr/{zarr_id}/").status_code,
        client.get(f"/api/zarr/{zarr_id}/files/").status_code,
        client.get(f"/api/zarr/{zarr_id}/refs.json").status_code,
        client.get(f"/api/zarr/{zarr_id}/manifests/").status_code,
    ]
    listed = client.get(
        "/api/dandisets/", params={"embargoed": "true", "draft": "true", "empty": "true"}
    )
    statuses.append(200 if dandiset in listed.text else 404)
    read = client.get(f"/api/zarr/{zarr_id}/read/arr/0")
    statuses.append(read.status_code)
    urls = client.post(f"/api/zarr/{zarr_id}/download/", json=[{"path": "arr/0"}])
    statuses.append(urls.status_code)
    if read.status_code == 302 and urls.status_code == 200:
        with httpx.Client(timeout=60) as s3:
            assert s3.get(read.headers["location"]).content == b"zero"
            assert s3.get(urls.json()[0]["url"]).content == b"zero"
        assert downloaded(client, blob_asset) == BLOB
    return statuses


def test_reviewers_read_everything_and_change_nothing(
    api: httpx.Client, anon: httpx.Client, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, zarr_id = embargoed
    blob_asset = _fill(api, dandiset, zarr_id)
    with client_for(api, users.other) as other:
        assert set(_reads(other, dandiset, zarr_id, blob_asset)) == {404}
        assert ok(api.put(reviewers_url(dandiset), json=[{"username": "other"}])) == [
            {"username": "other", "name": "other"}
        ]
        assert set(_reads(other, dandiset, zarr_id, blob_asset)) <= {200, 302}
        # changes: 403 (the dandiset is visible to a reviewer: refused, not hidden)
        draft = f"/api/dandisets/{dandiset}/versions/draft/"
        refusals = [
            other.put(draft, json={"metadata": {"name": "by a reviewer"}}),
            other.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "x", "etag": "0" * 32}]),
            other.delete(f"{draft}assets/{blob_asset}/"),
            other.put(reviewers_url(dandiset), json=[{"username": "other"}]),
            other.put(f"/api/dandisets/{dandiset}/users/", json=[{"username": "other"}]),
            other.post(f"/api/dandisets/{dandiset}/unembargo/"),
            other.post(
                "/api/uploads/initialize/", json={"size": 1, "md5": "0" * 32, "dandiset": dandiset}
            ),
            # reviewers' names are the owners' business, and so is the audit trail
            other.get(reviewers_url(dandiset)),
            other.get(f"/api/dandisets/{dandiset}/audit/"),
        ]
        for refused in refusals:
            assert refused.status_code == 403, (refused.request.url, refused.text)
        # removed: refused at once
        assert ok(api.put(reviewers_url(dandiset), json=[])) == []
        assert set(_reads(other, dandiset, zarr_id, blob_asset)) == {404}
    assert anon.get(reviewers_url(dandiset)).status_code == 401
    unknown = api.put(reviewers_url(dandiset), json=[{"username": "nobody"}])
    assert unknown.status_code == 400 and unknown.json()["detail"] == "User nobody not found"
    with client_for(api, users.admin) as admin:  # admins list and change them too
        ok(admin.put(reviewers_url(dandiset), json=[{"username": "other"}]))
        assert [r["username"] for r in ok(admin.get(reviewers_url(dandiset)))] == ["other"]
    records = ok(
        api.get(f"/api/dandisets/{dandiset}/audit/", params={"record_type": "change_reviewers"})
    )
    details = [r["details"] for r in records["results"]]
    assert [[u["username"] for u in d["added_reviewers"]] for d in details] == [
        ["other"],
        [],
        ["other"],
    ]
    assert [[u["username"] for u in d["removed_reviewers"]] for d in details] == [[], ["other"], []]
    assert records["results"][2]["admin"] is True


def test_a_read_key_of_a_reviewer_reads_too(
    api: httpx.Client, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, zarr_id = embargoed
    blob_asset = _fill(api, dandiset, zarr_id)
    ok(api.put(reviewers_url(dandiset), json=[{"username": "other"}]))
    with client_for(api, users.other) as other:
        key = ok(other.post("/api/auth/tokens/", json={"name": "review", "scope": "read"}), 201)
    with client_for(api, key["key"]) as reader:
        assert set(_reads(reader, dandiset, zarr_id, blob_asset)) <= {200, 302}


def test_the_reviewers_form_and_a_removed_reviewers_session(
    live_server: LiveServer, api: httpx.Client, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, _zarr = embargoed
    origin = {"Origin": live_server.url}
    with (
        browser(live_server.url, users.other) as reviewer,
        browser(live_server.url, users.owner) as owner,
    ):
        assert reviewer.get(f"/dandiset/{dandiset}").status_code == 404
        page = owner.get(f"/dandiset/{dandiset}").text
        assert 'id="reviewers-form"' in page
        forged = owner.post(
            f"/dandiset/{dandiset}/reviewers",
            data={"csrf_token": form_token(page), "reviewers": "other"},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        no_token = owner.post(
            f"/dandiset/{dandiset}/reviewers", data={"reviewers": "other"}, headers=origin
        )
        assert no_token.status_code == 403
        assert ok(api.get(reviewers_url(dandiset))) == []
        done = owner.post(
            f"/dandiset/{dandiset}/reviewers",
            data={"csrf_token": form_token(page), "reviewers": "other"},
            headers=origin,
        )
        assert done.status_code == 303, done.text
        page = owner.get(f"/dandiset/{dandiset}").text
        assert re.search(r'id="reviewers-field"[^>]*>other<', page)
        # the reviewer's page: the dandiset, without the owners' forms
        seen = reviewer.get(f"/dandiset/{dandiset}")
        assert seen.status_code == 200
        assert 'id="reviewers-form"' not in seen.text and 'id="owners-form"' not in seen.text
        assert reviewer.get(f"/dandiset/{dandiset}/draft/files").status_code == 200
        # the reviewer's own session can't add reviewers
        refused = reviewer.post(
            f"/dandiset/{dandiset}/reviewers",
            data={"csrf_token": form_token(seen.text), "reviewers": "other\nadmin"},
            headers=origin,
        )
        assert refused.status_code == 403
        unknown = owner.post(
            f"/dandiset/{dandiset}/reviewers",
            data={"csrf_token": form_token(page), "reviewers": "nobody"},
            headers=origin,
        )
        assert unknown.status_code == 400 and "User nobody not found" in unknown.text
        owner.post(
            f"/dandiset/{dandiset}/reviewers",
            data={"csrf_token": form_token(page), "reviewers": ""},
            headers=origin,
        )
        assert reviewer.get(f"/dandiset/{dandiset}").status_code == 404  # at once


def test_unembargoing_keeps_the_list_harmlessly(
    api: httpx.Client, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, _zarr = embargoed
    ok(api.put(reviewers_url(dandiset), json=[{"username": "other"}]))
    ok(api.post(f"/api/dandisets/{dandiset}/unembargo/"))  # no job queue: runs inline
    assert ok(api.get(f"/api/dandisets/{dandiset}/"))["embargo_status"] == "OPEN"
    assert [r["username"] for r in ok(api.get(reviewers_url(dandiset)))] == ["other"]
    with client_for(api, users.other) as other:
        ok(other.get(f"/api/dandisets/{dandiset}/"))
        changed = other.put(
            f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": {"name": "x"}}
        )
        assert changed.status_code == 403
