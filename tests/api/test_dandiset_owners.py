"""A dandiset's owners (issue #24 part 2): DANDI's ``GET/PUT /api/dandisets/{id}/users/``
and the owners form of the dandiset's page; every rule that says "owner" means any owner."""

from __future__ import annotations

import re

import httpx

from tests.conftest import LiveServer, Users
from tests.helpers.assets import client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.web_forms import form_token
from tests.helpers.web_site import browser
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY


def users_url(dandiset: str) -> str:
    return f"/api/dandisets/{dandiset}/users/"


def owners(client: httpx.Client, dandiset: str) -> list[str]:
    return [o["username"] for o in ok(client.get(users_url(dandiset)))]


def test_owners_are_listed_replaced_and_enforced(
    api: httpx.Client, anon: httpx.Client, users: Users, dandiset: str
) -> None:
    assert ok(anon.get(users_url(dandiset))) == [
        {"username": "owner", "name": "owner", "email": None}
    ]
    with client_for(api, users.other) as other:
        # a non-owner may neither change the owners nor the dandiset
        refused = other.put(users_url(dandiset), json=[{"username": "other"}])
        assert refused.status_code == 403, refused.text
        assert owners(anon, dandiset) == ["owner"]
        meta = {"metadata": {"name": "by other"}}
        assert other.put(f"/api/dandisets/{dandiset}/versions/draft/", json=meta).status_code == 403

        # co-owners: the other user may now change it
        added = ok(
            api.put(users_url(dandiset), json=[{"username": "owner"}, {"username": "other"}])
        )
        assert [o["username"] for o in added] == ["other", "owner"]
        ok(other.put(f"/api/dandisets/{dandiset}/versions/draft/", json=meta))
        # and, as any owner, remove the first one, who loses write access at once
        assert [
            o["username"] for o in ok(other.put(users_url(dandiset), json=[{"username": "other"}]))
        ] == ["other"]
        lost = api.put(
            f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": {"name": "x"}}
        )
        assert lost.status_code == 403, lost.text
        assert api.put(users_url(dandiset), json=[{"username": "owner"}]).status_code == 403

        # the last owner cannot be removed; an unknown user is named
        empty = other.put(users_url(dandiset), json=[])
        assert empty.status_code == 400 and "at least one owner" in empty.json()["detail"]
        unknown = other.put(users_url(dandiset), json=[{"username": "nobody"}])
        assert unknown.status_code == 400 and unknown.json()["detail"] == "User nobody not found"
        assert owners(anon, dandiset) == ["other"]

    # an admin may set the owners of any dandiset
    with client_for(api, users.admin) as admin:
        ok(admin.put(users_url(dandiset), json=[{"username": "owner"}]))
    assert owners(anon, dandiset) == ["owner"]
    assert anon.put(users_url(dandiset), json=[{"username": "owner"}]).status_code == 401


def test_embargoed_visibility_follows_the_owners(
    api: httpx.Client, anon: httpx.Client, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, _zarr = embargoed
    with client_for(api, users.other) as other:
        assert other.get(users_url(dandiset)).status_code == 404
        assert anon.get(users_url(dandiset)).status_code == 401
        ok(api.put(users_url(dandiset), json=[{"username": "owner"}, {"username": "other"}]))
        assert ok(other.get(f"/api/dandisets/{dandiset}/"))["identifier"] == dandiset
        mine = ok(other.get("/api/dandisets/", params={"embargoed": "true", "user": "me"}))
        assert [d["identifier"] for d in mine["results"]] == [dandiset]
        ok(api.put(users_url(dandiset), json=[{"username": "owner"}]))
        assert other.get(f"/api/dandisets/{dandiset}/").status_code == 404


def test_owners_form_of_the_page(
    live_server: LiveServer, archive: Archive, api: httpx.Client, users: Users, dandiset: str
) -> None:
    live_server.app.state.archive = archive
    origin = {"Origin": live_server.url}
    with browser(live_server.url, users.other) as stranger:
        page = stranger.get(f"/dandiset/{dandiset}").text
        assert 'id="owners-form"' not in page  # not an owner: no form
        token = form_token(page)  # its sign-out form's token: valid for its session
        refused = stranger.post(
            f"/dandiset/{dandiset}/owners",
            data={"csrf_token": token, "owners": "other"},
            headers=origin,
        )
        assert refused.status_code == 403
    with browser(live_server.url, users.owner) as owner:
        page = owner.get(f"/dandiset/{dandiset}").text
        assert 'id="owners-form"' in page
        # the changes table is the page's, not its title's
        assert f"<title>Dandiset {dandiset}/draft - zarrchive</title>" in page
        assert page.count('id="audit"') == 1
        token = form_token(page)
        # another site's form: refused, nothing changes
        forged = owner.post(
            f"/dandiset/{dandiset}/owners",
            data={"csrf_token": token, "owners": "other"},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        no_token = owner.post(
            f"/dandiset/{dandiset}/owners", data={"owners": "other"}, headers=origin
        )
        assert no_token.status_code == 403
        assert owners(api, dandiset) == ["owner"]
        done = owner.post(
            f"/dandiset/{dandiset}/owners",
            data={"csrf_token": token, "owners": "owner\nother"},
            headers=origin,
        )
        assert done.status_code == 303, done.text
        assert owners(api, dandiset) == ["other", "owner"]
        last = owner.post(
            f"/dandiset/{dandiset}/owners",
            data={"csrf_token": token, "owners": " "},
            headers=origin,
        )
        assert last.status_code == 400
        page = owner.get(f"/dandiset/{dandiset}").text
        assert re.search(r'id="owners">other, owner<', page)
        assert "change_owners" in page  # the audit trail on the page
        for cookie in owner.cookies.jar:
            assert cookie.get_nonstandard_attr("SameSite") in ("Strict", "strict"), cookie.name
