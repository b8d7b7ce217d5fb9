"""Accounts (issue #36): approval statuses, self-service API keys with a scope and an expiry,
``/api/users/me/``, the account page and the administrators' accounts page, and
``zarrchive admin approve/reject``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import update

from tests.conftest import LiveServer, Users
from tests.helpers.assets import client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.web_forms import form_token
from tests.helpers.web_site import browser
from zarrchive.db.models import AccountStatus, ApiToken
from zarrchive.db.session import Database
from zarrchive.services.identity import accounts
from zarrchive.services.runtime import Archive

pytestmark = SQLITE_ONLY

TOKENS = "/api/auth/tokens/"
#: A day within a key's longest lifetime.
NEXT_YEAR = (datetime.now(UTC) + timedelta(days=365)).date()


def _set_status(archive: Archive, username: str, status: AccountStatus) -> None:
    with archive.db.write_session() as session:
        accounts.set_status(session, None, username, status)


def _make_key(client: httpx.Client, name: str, scope: str, **extra: str) -> dict[str, object]:
    made = ok(client.post(TOKENS, json={"name": name, "scope": scope, **extra}), 201)
    assert re.fullmatch(r"[0-9a-f]{40}", str(made["key"]))
    return dict(made)


def test_me_answers_dandis_shape(api: httpx.Client, anon: httpx.Client, users: Users) -> None:
    assert ok(api.get("/api/users/me/")) == {
        "username": "owner",
        "name": "owner",
        "admin": False,
        "status": "APPROVED",
    }
    with client_for(api, users.admin) as admin:
        assert ok(admin.get("/api/users/me/"))["admin"] is True
    assert anon.get("/api/users/me/").status_code == 401


def test_a_read_key_reads_embargoed_data_and_changes_nothing(
    api: httpx.Client, embargoed: tuple[str, str]
) -> None:
    dandiset, zarr_id = embargoed
    files = [{"path": "a", "etag": "0" * 32}]
    made = _make_key(api, "laptop", "read")
    listed = ok(api.get(TOKENS))
    mine = next(k for k in listed if k["id"] == made["id"])
    assert {k: mine[k] for k in ("name", "scope", "expires", "last_used")} == {
        "name": "laptop",
        "scope": "read",
        "expires": None,
        "last_used": None,
    }
    assert all("key" not in k for k in listed)  # the secret is shown once, when made
    with client_for(api, str(made["key"])) as reader:
        # reads: the embargoed dandiset, its Zarr, the keys, the key itself (dandi-cli's check)
        assert ok(reader.get(f"/api/dandisets/{dandiset}/"))["embargoed"] is True
        ok(reader.get(f"/api/zarr/{zarr_id}/"))
        ok(reader.get(f"/api/zarr/{zarr_id}/files/"))
        assert ok(reader.get("/api/auth/token/")) == made["key"]
        ok(reader.get(TOKENS))
        # every change: 403, saying why
        refusals = [
            reader.put(f"/api/dandisets/{dandiset}/versions/draft/", json={"metadata": {}}),
            reader.post("/api/dandisets/", json={"name": "new"}),
            reader.post(f"/api/zarr/{zarr_id}/upload/", json=files),
            reader.post("/api/zarr/", json={"name": "x.zarr", "dandiset": dandiset}),
            reader.post(TOKENS, json={"name": "escalate", "scope": "write"}),
            reader.post("/api/auth/token/"),
            reader.delete(f"{TOKENS}{made['id']}/"),
            reader.put(f"/api/dandisets/{dandiset}/users/", json=[{"username": "other"}]),
        ]
        for refused in refusals:
            assert refused.status_code == 403, (refused.request.url, refused.text)
            assert "read-only" in refused.json()["detail"], refused.text
    assert len(ok(api.get(TOKENS))) == len(listed)  # nothing made, nothing revoked
    used = next(k for k in ok(api.get(TOKENS)) if k["id"] == made["id"])
    assert used["last_used"] is not None


def test_revoked_and_expired_keys_are_refused_at_once(
    api: httpx.Client, archive: Archive, users: Users
) -> None:
    gone = _make_key(api, "revoke me", "write")
    in_a_month = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    late = _make_key(api, "expire me", "write", expires=in_a_month.isoformat())
    assert datetime.fromisoformat(ok(api.get(TOKENS))[0]["expires"]) == in_a_month
    with client_for(api, str(gone["key"])) as client:
        ok(client.get("/api/users/me/"))
        assert api.delete(f"{TOKENS}{gone['id']}/").status_code == 204
        refused = client.get("/api/users/me/")
        assert refused.status_code == 401 and "was revoked" in refused.json()["detail"]
    # another user can't revoke (nor learn of) the owner's key; a revoked key is not live
    with client_for(api, users.other) as other:
        assert other.delete(f"{TOKENS}{late['id']}/").status_code == 404
    assert api.delete(f"{TOKENS}{gone['id']}/").status_code == 404
    for no_key in ("0", str(10**30), "x"):  # no database integer: refused before any query
        assert api.delete(f"{TOKENS}{no_key}/").status_code in (400, 422), no_key
    with archive.db.write_session() as session:  # its expiry passes
        session.execute(
            update(ApiToken)
            .where(ApiToken.id == late["id"])
            .values(expires_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    with client_for(api, str(late["key"])) as client:
        refused = client.get("/api/users/me/")
        assert refused.status_code == 401 and "expired" in refused.json()["detail"]
    assert {k["id"] for k in ok(api.get(TOKENS))}.isdisjoint({gone["id"], late["id"]})
    # bad keys are refused before anything is made
    for body in (
        {"name": "x", "scope": "admin"},
        {"name": "", "scope": "read"},
        {"name": "x", "scope": "read", "expires": "2001-01-01T00:00:00Z"},
        {"name": "x", "scope": "read", "expires": "9999-01-01T00:00:00Z"},
        {"name": "x", "scope": "read", "extra": 1},
    ):
        assert api.post(TOKENS, json=body).status_code in (400, 422), body


def test_dandis_token_post_replaces_the_default_key(api: httpx.Client, users: Users) -> None:
    named = _make_key(api, "kept", "write")
    with client_for(api, users.owner) as first:
        new = ok(first.post("/api/auth/token/"))
        assert new != users.owner and re.fullmatch(r"[0-9a-f]{40}", new)
        assert first.get("/api/auth/token/").status_code == 401  # the old default key
    with client_for(api, new) as client:
        assert ok(client.get("/api/auth/token/")) == new
        names = sorted(k["name"] for k in ok(client.get(TOKENS)))
        assert names == ["default", "kept"]
    with client_for(api, str(named["key"])) as client:
        ok(client.get("/api/users/me/"))


def test_a_pending_account_reads_what_is_public_and_changes_nothing(
    api: httpx.Client, archive: Archive, users: Users, embargoed: tuple[str, str]
) -> None:
    dandiset, _zarr = embargoed
    ok(
        api.put(
            f"/api/dandisets/{dandiset}/users/", json=[{"username": "owner"}, {"username": "other"}]
        )
    )
    public = ok(api.post("/api/dandisets/", json={"name": "public"}))["identifier"]
    with client_for(api, users.other) as other:
        ok(other.get(f"/api/dandisets/{dandiset}/"))
        _set_status(archive, "other", AccountStatus.PENDING)
        # its keys are refused at once, with the reason
        refused = other.get(f"/api/dandisets/{public}/")
        assert refused.status_code == 403 and "awaits approval" in refused.json()["detail"]
    with client_for(api, users.admin) as admin:
        assert ok(admin.get("/api/users/me/"))["status"] == "APPROVED"
    _set_status(archive, "other", AccountStatus.REJECTED)
    with client_for(api, users.other) as other:
        refused = other.get("/api/users/me/")
        assert refused.status_code == 403 and "rejected" in refused.json()["detail"]
    _set_status(archive, "other", AccountStatus.APPROVED)
    with client_for(api, users.other) as other:
        assert ok(other.get("/api/users/me/"))["status"] == "APPROVED"


def test_pages_of_a_pending_account(
    live_server: LiveServer,
    archive: Archive,
    api: httpx.Client,
    users: Users,
    embargoed: tuple[str, str],
) -> None:
    """Signed in, then pending: the pages say so, the embargoed dandiset it owns is hidden,
    and the account page makes no key."""
    dandiset, _zarr = embargoed
    ok(
        api.put(
            f"/api/dandisets/{dandiset}/users/", json=[{"username": "owner"}, {"username": "other"}]
        )
    )
    origin = {"Origin": live_server.url}
    with browser(live_server.url, users.other) as other:
        page = other.get("/account")
        assert page.status_code == 200 and 'id="new-key-form"' in page.text
        assert other.get(f"/dandiset/{dandiset}").status_code == 200
        _set_status(archive, "other", AccountStatus.PENDING)
        page = other.get("/account")
        assert 'id="account-notice"' in page.text and "awaits approval" in page.text
        assert 'id="new-key-form"' not in page.text
        assert other.get(f"/dandiset/{dandiset}").status_code == 404
        made = other.post(
            "/account/keys",
            data={"csrf_token": form_token(page.text), "name": "k", "scope": "read"},
            headers=origin,
        )
        assert made.status_code == 403 and "awaits approval" in made.text


def test_the_account_page_makes_lists_and_revokes_keys(
    live_server: LiveServer, api: httpx.Client, users: Users
) -> None:
    origin = {"Origin": live_server.url}
    with browser(live_server.url, users.owner) as owner:
        page = owner.get("/account").text
        forged = owner.post(
            "/account/keys",
            data={"csrf_token": form_token(page), "name": "k", "scope": "read"},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        made = owner.post(
            "/account/keys",
            data={
                "csrf_token": form_token(page),
                "name": "reviewing",
                "scope": "read",
                "expires": NEXT_YEAR.isoformat(),
            },
            headers=origin,
        )
        assert made.status_code == 200 and made.headers["cache-control"] == "no-store"
        found = re.search(r"export DANDI_API_KEY=([0-9a-f]{40})", made.text)
        assert found is not None, made.text
        key = found.group(1)
        with client_for(api, key) as client:
            assert ok(client.get("/api/users/me/"))["username"] == "owner"
        listed = ok(api.get(TOKENS))
        row = next(k for k in listed if k["name"] == "reviewing")
        assert row["scope"] == "read" and row["expires"].startswith(
            f"{NEXT_YEAR.isoformat()}T23:59:59"
        )
        page = owner.get("/account").text
        assert key not in page and f'id="key-{row["id"]}"' in page
        forged = owner.post(
            f"/account/keys/{row['id']}/revoke",
            data={"csrf_token": form_token(page)},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        with client_for(api, key) as client:
            ok(client.get("/api/users/me/"))
        revoked = owner.post(
            f"/account/keys/{row['id']}/revoke",
            data={"csrf_token": form_token(page)},
            headers=origin,
        )
        assert revoked.status_code == 303
        with client_for(api, key) as client:
            assert client.get("/api/users/me/").status_code == 401
    with browser(live_server.url) as anon:
        assert anon.get("/account").status_code == 401


def test_admins_approve_and_reject_on_the_accounts_page(
    live_server: LiveServer, archive: Archive, api: httpx.Client, users: Users
) -> None:
    _set_status(archive, "other", AccountStatus.PENDING)
    origin = {"Origin": live_server.url}
    with browser(live_server.url, users.owner) as owner:
        assert owner.get("/admin/users").status_code == 403
        refused = owner.post(
            "/admin/users/approve",
            data={"csrf_token": form_token(owner.get("/").text), "username": "other"},
            headers=origin,
        )
        assert refused.status_code == 403
    with browser(live_server.url, users.admin) as admin:
        page = admin.get("/admin/users").text
        forged = admin.post(
            "/admin/users/approve",
            data={"csrf_token": form_token(page), "username": "other"},
            headers={"Origin": "https://evil.example"},
        )
        assert forged.status_code == 403
        rows = re.findall(r'<tr id="account-([^"]+)">', page)
        assert rows[0] == "other"  # the pending ones first
        assert "PENDING" in page.split('id="account-other"')[1].split("</tr>")[0]
        done = admin.post(
            "/admin/users/approve",
            data={"csrf_token": form_token(page), "username": "other"},
            headers=origin,
        )
        assert done.status_code == 303
        with client_for(api, users.other) as other:
            assert ok(other.get("/api/users/me/"))["status"] == "APPROVED"
        admin.post(
            "/admin/users/reject",
            data={"csrf_token": form_token(page), "username": "other"},
            headers=origin,
        )
        with client_for(api, users.other) as other:
            assert other.get("/api/users/me/").status_code == 403
        mine = admin.post(
            "/admin/users/reject",
            data={"csrf_token": form_token(page), "username": "admin"},
            headers=origin,
        )
        assert mine.status_code == 400  # no admin locks themselves out


def test_admin_approve_and_reject_commands(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env["ZARRCHIVE_DATA_DIR"] = str(tmp_path / "data")
    (tmp_path / "data").mkdir()  # an archive `serve` made
    database = Database(f"sqlite:///{tmp_path / 'data' / 'zarrchive.sqlite3'}")
    database.migrate()
    database.dispose()
    run = [sys.executable, "-m", "zarrchive.cli", "admin"]
    subprocess.run([*run, "create-user", "carol"], env=env, check=True, capture_output=True)
    rejected = subprocess.run(
        [*run, "reject", "carol"], env=env, check=True, capture_output=True, text=True
    )
    assert rejected.stdout.strip() == "carol: REJECTED"
    approved = subprocess.run(
        [*run, "approve", "carol"], env=env, check=True, capture_output=True, text=True
    )
    assert approved.stdout.strip() == "carol: APPROVED"
    missing = subprocess.run([*run, "approve", "nobody"], env=env, capture_output=True, text=True)
    assert missing.returncode == 2 and "no user named 'nobody'" in missing.stderr
