"""Authorization matrix: anonymous / other user / owner / admin / a reviewer of the dandiset /
a read key of its owner x every route x public / embargoed dandiset, through the API, and
directly against S3.

The routes come from the app's own OpenAPI schema: a new route without a row here fails
:func:`test_every_route_has_a_row`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tests.helpers.reliability import FULL, Tokens, count
from tests.helpers.zarr_client import (
    authed,
    create_dandiset,
    create_zarr,
    expect,
    md5,
    put_presigned,
    upload,
)
from zarrchive.api import create_app
from zarrchive.db.models import ApiToken, TokenScope
from zarrchive.manifest import manifest_key
from zarrchive.services.identity.auth import create_token, create_user, token_hash
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.manifests import write_manifest
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.objects import md5_to_content_md5
from zarrchive.storage.seaweedfs import SeaweedFS

PART = "authorization"
ROLES = ("anonymous", "other", "owner", "admin", "reviewer", "read-key")
#: The user every world's dandiset names as its reviewer.
REVIEWER = "reviewer"
FILES = {"arr/.zarray": b"{}", "arr/0": b"zero"}


@dataclass
class World:
    """What one dandiset holds, made by its owner through the API."""

    dandiset: str
    zarr_id: str
    asset_id: str
    upload_id: str
    #: the Zarr's checksum that a published version pins (set by :func:`_publish`)
    checksum: str = ""
    #: the dandi-etag, id and asset of a blob of the dandiset (set by :func:`_add_blob`)
    blob_etag: str = ""
    blob_id: str = ""
    blob_asset_id: str = ""
    #: a key of the owner (set by :func:`_add_key`)
    key_id: int = 0


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    #: read: anyone may when public (embargoed: owners, admins, reviewers, read keys);
    #: write: owners and admins (with a write key); owners-read: owners and admins with any
    #: key; open: anyone; login: any signed-in user; login-write: any signed-in user with a
    #: write key; own-key: the key's owner (with a write key).
    kind: str
    url: Callable[[World], str]
    body: Callable[[World], Any] | None = None
    #: changes the world: each allowed role gets a fresh one
    mutating: bool = False
    #: run by the owner before the request (e.g. open a batch)
    prepare: Callable[[httpx.Client, World], None] | None = None
    #: statuses other than 401/403/404 also acceptable for anyone denied (e.g. 409)
    extra: frozenset[int] = field(default_factory=frozenset)
    #: reads a published snapshot: embargoed dandisets cannot publish, so there even
    #: the allowed roles find nothing (404)
    snapshot: bool = False
    #: statuses the allowed roles may also get (e.g. a LINDI file of a blob that is not
    #: HDF5: 404, or not yet written: 503)
    allowed_also: frozenset[int] = field(default_factory=frozenset)


def _open_batch(api: httpx.Client, w: World) -> None:
    body = [{"path": "new", "etag": md5(b"new")}]
    (item,) = expect(api.post(f"/api/zarr/{w.zarr_id}/upload/", json=body))
    with httpx.Client(timeout=30) as raw:
        expect(put_presigned(raw, item["upload_url"], b"new"))


def _publish(api: httpx.Client, w: World) -> None:
    """Publish the draft when the dandiset can be published (not embargoed): its Zarr's
    checksum becomes a snapshot."""
    w.checksum = expect(api.get(f"/api/zarr/{w.zarr_id}/"))["checksum"]
    if not expect(api.get(f"/api/dandisets/{w.dandiset}/")).get("embargoed"):
        expect(api.post(f"/api/dandisets/{w.dandiset}/versions/draft/publish/"))


def _add_blob(api: httpx.Client, w: World) -> None:
    """A blob asset of the dandiset (uploaded by the owner), known by its dandi-etag."""
    data = f"blob of {w.dandiset}".encode()
    plan = expect(
        api.post(
            "/api/uploads/initialize/",
            json={"size": len(data), "md5": md5(data), "dandiset": w.dandiset},
        )
    )
    with httpx.Client(timeout=30) as raw:
        expect(put_presigned(raw, plan["parts"][0]["upload_url"], data))
    blob = expect(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))
    asset = expect(
        api.post(
            f"/api/dandisets/{w.dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "blob.bin"}, "blob_id": blob["blob_id"]},
        )
    )
    w.blob_etag, w.blob_id, w.blob_asset_id = blob["etag"], blob["blob_id"], asset["asset_id"]


def _open_multipart_batch(api: httpx.Client, w: World) -> None:
    """An open batch holding a file big enough to be uploaded in parts (none sent)."""
    body = [{"path": "big", "etag": md5(b"big"), "size": 200 * 1024 * 1024}]
    expect(api.post(f"/api/zarr/{w.zarr_id}/upload/", json=body))


def _add_key(api: httpx.Client, w: World) -> None:
    made = expect(api.post("/api/auth/tokens/", json={"name": "spare", "scope": "read"}), 201)
    w.key_id = made["id"]


def _trash_blob_asset(api: httpx.Client, w: World) -> None:
    """A blob asset of the dandiset, deleted (in its trash): ``blob_asset_id``."""
    _add_blob(api, w)
    expect(api.delete(f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.blob_asset_id}/"), 204)


def _trash_dandiset(api: httpx.Client, w: World) -> None:
    """The world's dandiset becomes a deleted one (a new dandiset without Zarrs, embargoed
    as the world's, with the world's reviewer, then deleted)."""
    embargoed = bool(expect(api.get(f"/api/dandisets/{w.dandiset}/")).get("embargoed"))
    w.dandiset = create_dandiset(api, "trashed", embargo=embargoed)
    expect(api.put(f"/api/dandisets/{w.dandiset}/reviewers/", json=[{"username": REVIEWER}]))
    expect(api.delete(f"/api/dandisets/{w.dandiset}/"), 204)


def _note_checksum(api: httpx.Client, w: World) -> None:
    """The Zarr's current checksum in ``checksum`` (restoring to it changes nothing)."""
    w.checksum = expect(api.get(f"/api/zarr/{w.zarr_id}/"))["checksum"]


def _add_zarr(api: httpx.Client, w: World) -> None:
    w.zarr_id = create_zarr(api, w.dandiset, "second.zarr")


#: A blob upload is its uploader's: others are told it does not exist.
PRIVATE_TO_UPLOADER = frozenset({404})
Z = "/api/zarr/{zarr_id}/"
S = Z + "snapshots/{checksum}/"
D = "/api/dandisets/{dandiset_id}/"
V = D + "versions/{version}/"
ROWS = [
    Row("GET", "/api/info/", "open", lambda w: "/api/info/"),
    Row("GET", "/server-info", "open", lambda w: "/server-info"),
    Row("GET", "/api/auth/token/", "login", lambda w: "/api/auth/token/"),
    Row(
        "POST",
        "/api/dandisets/",
        "login-write",
        lambda w: "/api/dandisets/",
        lambda w: {"name": "n"},
    ),
    Row("GET", "/api/users/me/", "login", lambda w: "/api/users/me/"),
    Row("GET", "/api/auth/tokens/", "login", lambda w: "/api/auth/tokens/"),
    Row(
        "POST",
        "/api/auth/tokens/",
        "login-write",
        lambda w: "/api/auth/tokens/",
        lambda w: {"name": "made by the matrix", "scope": "read"},
    ),
    # the matrix's keys are not named "default": this replaces none of them
    Row("POST", "/api/auth/token/", "login-write", lambda w: "/api/auth/token/"),
    Row(
        "DELETE",
        "/api/auth/tokens/{key_id}/",
        "own-key",
        lambda w: f"/api/auth/tokens/{w.key_id}/",
        mutating=True,
        prepare=_add_key,
    ),
    Row(
        "GET", D + "reviewers/", "owners-read", lambda w: f"/api/dandisets/{w.dandiset}/reviewers/"
    ),
    Row(
        "PUT",
        D + "reviewers/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/reviewers/",
        lambda w: [{"username": REVIEWER}, {"username": "other"}],
        mutating=True,
    ),
    Row("GET", "/api/dandisets/", "open", lambda w: "/api/dandisets/?embargoed=true"),
    Row("GET", D, "read", lambda w: f"/api/dandisets/{w.dandiset}/"),
    Row("GET", D + "users/", "read", lambda w: f"/api/dandisets/{w.dandiset}/users/"),
    Row(
        "PUT",
        D + "users/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/users/",
        lambda w: [{"username": "owner"}, {"username": "admin"}],
        mutating=True,
    ),
    Row("GET", D + "audit/", "owners-read", lambda w: f"/api/dandisets/{w.dandiset}/audit/"),
    # refused (409) for allowed roles: the world's dandiset holds a Zarr
    Row("DELETE", D, "write", lambda w: f"/api/dandisets/{w.dandiset}/", mutating=True),
    Row("GET", D + "trash/", "owners-read", lambda w: f"/api/dandisets/{w.dandiset}/trash/"),
    Row(
        "POST",
        D + "trash/{asset_id}/restore/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/trash/{w.blob_asset_id}/restore/",
        mutating=True,
        prepare=_trash_blob_asset,
    ),
    # a deleted dandiset is its owners' and admins' only: others are told it does not exist
    Row(
        "POST",
        D + "restore/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/restore/",
        mutating=True,
        prepare=_trash_dandiset,
        extra=frozenset({404}),
    ),
    Row("GET", "/api/stats/", "open", lambda w: "/api/stats/"),
    Row(
        "POST",
        D + "unembargo/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/unembargo/",
        mutating=True,
    ),
    Row(
        "POST",
        "/api/zarr/",
        "write",
        lambda w: "/api/zarr/",
        lambda w: {"name": "x.zarr", "dandiset": w.dandiset},
        mutating=True,
    ),
    Row("GET", "/api/zarr/", "read", lambda w: f"/api/zarr/?dandiset={w.dandiset}"),
    Row("GET", Z, "read", lambda w: f"/api/zarr/{w.zarr_id}/"),
    Row(
        "POST",
        Z + "download/",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/download/",
        lambda w: [{"path": "arr/0"}],
    ),
    Row("GET", Z + "manifests/", "read", lambda w: f"/api/zarr/{w.zarr_id}/manifests/"),
    Row(
        "GET",
        Z + "upload/",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/",
        mutating=True,
        prepare=_open_batch,
    ),
    Row(
        "POST",
        Z + "upload/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/",
        lambda w: [{"path": "x", "etag": md5(b"x")}],
        mutating=True,
    ),
    Row(
        "DELETE",
        Z + "upload/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/",
        mutating=True,
        prepare=_open_batch,
    ),
    Row(
        "POST",
        Z + "upload/import/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/import/",
        lambda w: {
            "batch": "0" * 32,
            "bucket": "a-source",
            "prefix": "z.zarr",
            "files": [{"path": "new", "etag": md5(b"new")}],
        },
        mutating=True,
        # who may write is decided first; the test archive imports from no bucket: 403
        allowed_also=frozenset({403}),
    ),
    Row(
        "POST",
        Z + "upload/import/hash/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/import/hash/",
        lambda w: {
            "bucket": "a-source",
            "prefix": "z.zarr",
            "files": [{"path": "new", "size": 3, "etag": "0" * 32 + "-2"}],
        },
        # who may write is decided first; the test archive imports from no bucket: 403
        allowed_also=frozenset({403}),
    ),
    Row(
        "POST",
        Z + "upload/complete/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/complete/",
        mutating=True,
        prepare=_open_batch,
    ),
    Row(
        "DELETE",
        Z + "files/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/files/",
        lambda w: [{"path": "arr/0"}],
        mutating=True,
    ),
    Row("GET", Z + "snapshots/", "read", lambda w: f"/api/zarr/{w.zarr_id}/snapshots/"),
    Row("GET", Z + "history/", "read", lambda w: f"/api/zarr/{w.zarr_id}/history/"),
    Row(
        "POST",
        Z + "restore/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/restore/",
        lambda w: {"checksum": w.checksum},
        mutating=True,
        prepare=_note_checksum,
    ),
    Row(
        "GET",
        S,
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/snapshots/{w.checksum}/",
        prepare=_publish,
        snapshot=True,
    ),
    Row(
        "GET",
        S + "files/",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/snapshots/{w.checksum}/files/",
        prepare=_publish,
        snapshot=True,
    ),
    Row(
        "GET",
        S + "{path}",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/snapshots/{w.checksum}/arr/0",
        prepare=_publish,
        snapshot=True,
    ),
    Row(
        "POST",
        S + "download/",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/snapshots/{w.checksum}/download/",
        lambda w: [{"path": "arr/0"}],
        prepare=_publish,
        snapshot=True,
    ),
    Row(
        "GET",
        S + "refs.json",
        "read",
        lambda w: f"/api/zarr/{w.zarr_id}/snapshots/{w.checksum}/refs.json",
        prepare=_publish,
        snapshot=True,
    ),
    Row("GET", Z + "refs.json", "read", lambda w: f"/api/zarr/{w.zarr_id}/refs.json"),
    Row("GET", Z + "read/{path}", "read", lambda w: f"/api/zarr/{w.zarr_id}/read/arr/0"),
    Row("GET", Z + "node/{path}", "read", lambda w: f"/api/zarr/{w.zarr_id}/node/arr"),
    Row("GET", Z + "files/", "read", lambda w: f"/api/zarr/{w.zarr_id}/files/"),
    Row("HEAD", Z + "files/", "read", lambda w: f"/api/zarr/{w.zarr_id}/files/?prefix=arr/0"),
    Row(
        "POST",
        Z + "files/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/files/",
        lambda w: [{"path": "x", "base64md5": md5_to_content_md5(md5(b"x"))}],
        mutating=True,
    ),
    Row(
        "POST",
        Z + "finalize/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/finalize/",
        mutating=True,
        prepare=_open_batch,
    ),
    Row("GET", "/api/zarr/{zarr_id}.zarr/{path}", "read", lambda w: f"/api/zarr/{w.zarr_id}.zarr/"),
    Row("GET", Z + "{path}", "read", lambda w: f"/api/zarr/{w.zarr_id}/arr/0"),
    Row("GET", D + "versions/", "read", lambda w: f"/api/dandisets/{w.dandiset}/versions/"),
    Row("GET", V, "read", lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/"),
    Row("GET", V + "info/", "read", lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/info/"),
    Row(
        "GET",
        V + "assets/paths/",
        "read",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/paths/",
    ),
    Row(
        "GET",
        V + "assets/{asset_id}/info/",
        "read",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.asset_id}/info/",
    ),
    # a Zarr asset: 400 (no download link, as DANDI) for those allowed to read it
    Row(
        "GET",
        V + "assets/{asset_id}/download/",
        "read",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.asset_id}/download/",
    ),
    Row(
        "PUT",
        V,
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/",
        lambda w: {"metadata": {"name": "changed"}},
        mutating=True,
    ),
    Row(
        "POST",
        D + "versions/draft/publish/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/publish/",
        mutating=True,
    ),
    Row(
        "POST",
        V + "assets/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/",
        lambda w: {"metadata": {"path": "second.zarr"}, "zarr_id": w.zarr_id},
        mutating=True,
        prepare=_add_zarr,
    ),
    Row(
        "GET",
        V + "assets/",
        "read",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/",
    ),
    Row(
        "GET",
        V + "assets/{asset_id}/",
        "read",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.asset_id}/",
    ),
    Row(
        "PUT",
        V + "assets/{asset_id}/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.asset_id}/",
        lambda w: {"metadata": {"path": "renamed.zarr"}, "zarr_id": w.zarr_id},
        mutating=True,
    ),
    Row(
        "DELETE",
        V + "assets/{asset_id}/",
        "write",
        lambda w: f"/api/dandisets/{w.dandiset}/versions/draft/assets/{w.asset_id}/",
        mutating=True,
    ),
    Row("GET", "/api/assets/{asset_id}/", "read", lambda w: f"/api/assets/{w.asset_id}/"),
    Row("GET", "/api/assets/{asset_id}/info/", "read", lambda w: f"/api/assets/{w.asset_id}/info/"),
    Row(
        "GET",
        "/api/assets/{asset_id}/download/",
        "read",
        lambda w: f"/api/assets/{w.asset_id}/download/",
    ),
    Row(
        "POST",
        "/api/uploads/initialize/",
        "write",
        lambda w: "/api/uploads/initialize/",
        lambda w: {"size": 3, "md5": md5(b"new"), "dandiset": w.dandiset},
        mutating=True,
    ),
    # an embargoed blob is not found (404) by those who may not read its dandiset
    Row(
        "GET",
        "/api/assets/{asset_id}/lindi.json",
        "read",
        lambda w: f"/api/assets/{w.blob_asset_id}/lindi.json",
        prepare=_add_blob,
        allowed_also=frozenset({404, 503}),  # the blob is not HDF5: no LINDI file
    ),
    *(
        Row(
            method,
            "/api/lindi/blobs/{blob_id}/data/",
            "read",
            lambda w: f"/api/lindi/blobs/{w.blob_id}/data/",
            prepare=_add_blob,
            extra=frozenset({404}),
        )
        for method in ("GET", "HEAD")
    ),
    Row(
        "POST",
        Z + "upload/parts/",
        "write",
        lambda w: f"/api/zarr/{w.zarr_id}/upload/parts/",
        lambda w: {"path": "big", "parts": [{"part_number": 1, "md5": md5(b"part")}]},
        mutating=True,
        prepare=_open_multipart_batch,
    ),
    Row("GET", Z + "upload/refused/", "write", lambda w: f"/api/zarr/{w.zarr_id}/upload/refused/"),
    Row(
        "POST",
        "/api/blobs/digest/",
        "read",
        lambda w: "/api/blobs/digest/",
        lambda w: {"algorithm": "dandi:dandi-etag", "value": w.blob_etag},
        prepare=_add_blob,
        extra=frozenset({404}),
    ),
    Row(
        "POST",
        "/api/uploads/{upload_id}/complete/",
        "write",
        lambda w: f"/api/uploads/{w.upload_id}/complete/",
        lambda w: {"parts": []},
        mutating=True,
        extra=PRIVATE_TO_UPLOADER,
    ),
    Row(
        "POST",
        "/api/uploads/{upload_id}/validate/",
        "write",
        lambda w: f"/api/uploads/{w.upload_id}/validate/",
        mutating=True,
        extra=PRIVATE_TO_UPLOADER,
    ),
    Row(
        "DELETE",
        "/api/uploads/{upload_id}/",
        "write",
        lambda w: f"/api/uploads/{w.upload_id}/",
        mutating=True,
        extra=PRIVATE_TO_UPLOADER,
    ),
]


def _routes() -> set[tuple[str, str]]:
    schema = create_app(None).openapi()  # type: ignore[arg-type]
    return {(m.upper(), p) for p, ops in schema["paths"].items() for m in ops}


def test_every_route_has_a_row() -> None:
    rows = {(r.method, r.path) for r in ROWS}
    assert len(rows) == len(ROWS)
    assert rows == _routes(), {"without a row": _routes() - rows, "stale rows": rows - _routes()}


def make_world(api: httpx.Client, embargoed: bool) -> World:
    dandiset = create_dandiset(api, "authz", embargo=embargoed)
    expect(api.put(f"/api/dandisets/{dandiset}/reviewers/", json=[{"username": REVIEWER}]))
    zarr_id = create_zarr(api, dandiset)
    upload(api, zarr_id, FILES)
    asset = expect(
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "test.zarr"}, "zarr_id": zarr_id},
        )
    )
    plan = expect(
        api.post(
            "/api/uploads/initialize/",
            json={"size": 4, "md5": md5(b"blob"), "dandiset": dandiset},
        )
    )
    return World(dandiset, zarr_id, asset["asset_id"], plan["upload_id"])


def expected_denial(row: Row, role: str, embargoed: bool) -> set[int] | None:
    """The statuses *role* may get (None: it is allowed)."""
    if row.kind == "open":
        return None
    if row.kind == "own-key":  # another's key does not exist for you
        return {"owner": None, "anonymous": {401}, "read-key": {403}}.get(role, {404})
    if role in ("owner", "admin"):
        return None
    if row.kind == "login":
        return {401} if role == "anonymous" else None
    if row.kind == "login-write":
        return {"anonymous": {401}, "read-key": {403}}.get(role)
    # reviewers and the owner's read key see the embargoed dandiset
    sees = not embargoed or role in ("reviewer", "read-key")
    if row.kind == "read":
        if sees:
            return None
        # anonymous callers are asked to authenticate (DANDI's clients send their key only
        # after a 401); strangers learn nothing
        return {401} if role == "anonymous" else {404}
    if row.kind == "owners-read" and role == "read-key":
        return None
    # writes: authenticate first; an embargoed dandiset's existence is not revealed to who
    # can't see it; who sees it is refused (a read key, a reviewer)
    if role == "anonymous":
        return {401, 404} if embargoed else {401}
    return {403} if sees else {404}


@pytest.fixture(scope="module")
def role_tokens(module_archive: Archive, module_tokens: Tokens) -> dict[str, str | None]:
    """Every role's key: the module's users', a reviewer's and a read key of the owner.  None
    is named "default", so that DANDI's ``POST /api/auth/token/`` replaces none of them."""
    with module_archive.db.write_session() as session:
        _reviewer, reviewer_token = create_user(session, REVIEWER)
        owner = session.get(ApiToken, _key_id(session, module_tokens.owner))
        assert owner is not None
        read_key = create_token(session, owner.user, name="matrix read", scope=TokenScope.READ)
        session.execute(update(ApiToken).values(name="matrix"))
    return {
        "anonymous": None,
        "other": module_tokens.other,
        "owner": module_tokens.owner,
        "admin": module_tokens.admin,
        "reviewer": reviewer_token,
        "read-key": read_key,
    }


def _key_id(session: Session, token: str) -> int:
    found = session.scalar(select(ApiToken.id).where(ApiToken.token_hash == token_hash(token)))
    assert found is not None
    return found


@pytest.mark.parametrize("embargoed", [False, True], ids=["public", "embargoed"])
def test_authorization_matrix(
    embargoed: bool,
    module_api: httpx.Client,
    role_tokens: dict[str, str | None],
    module_database_url: str,
) -> None:
    if not FULL and not module_database_url.startswith("sqlite"):
        pytest.skip("the matrix runs on PostgreSQL under make reliability only (time budget)")
    base = str(module_api.base_url)
    tokens = role_tokens
    shared = make_world(module_api, embargoed)
    failures: list[str] = []
    for index, row in enumerate(ROWS):
        # the row's prepared world (made when a role first needs it): every denied role's,
        # and every allowed role's when the request changes nothing
        prepared: World | None = None
        # denied roles first, on a world they must not change; then the allowed ones
        for role in sorted(ROLES, key=lambda r: expected_denial(row, r, embargoed) is None):
            denial = expected_denial(row, role, embargoed)
            if (
                not FULL
                and row.mutating
                and denial is None
                and role == ("owner", "admin")[index % 2]
            ):
                # make test's budget: each change is made by one of its allowed roles (by
                # turns); every refusal is still checked.  make reliability makes both.
                continue
            world = shared
            if row.mutating and denial is None:  # an allowed change: a world of its own
                world = make_world(module_api, embargoed)
                if row.prepare is not None:
                    row.prepare(module_api, world)
            elif row.prepare is not None:
                if prepared is None:
                    prepared = make_world(module_api, embargoed)
                    row.prepare(module_api, prepared)
                world = prepared
            with authed(base, tokens[role]) as client:
                body = row.body(world) if row.body else None
                kwargs = {"json": body} if body is not None else {}
                response = client.request(row.method, row.url(world), **kwargs)
            status = response.status_code
            expected_5xx = denial is None and status in row.allowed_also  # e.g. 503: later
            count(PART, cases=1, server_errors=int(status >= 500 and not expected_5xx))
            label = f"{row.method} {row.path} as {role}: {status} {response.text[:160]}"
            if status >= 500 and not expected_5xx:
                failures.append(label)
            elif denial is not None and status not in denial | row.extra:
                failures.append(f"{label} (expected {sorted(denial)})")
            elif denial is None and row.snapshot and embargoed and status == 404:
                pass  # nothing published to read
            elif denial is None and status in row.allowed_also:
                pass
            elif denial is None and status in (401, 403, 404):
                failures.append(f"{label} (expected to be allowed)")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("embargoed", [False, True], ids=["public", "embargoed"])
def test_s3_objects_follow_the_embargo(
    embargoed: bool,
    module_api: httpx.Client,
    module_archive: Archive,
    seaweedfs: SeaweedFS,
    role_tokens: dict[str, str | None],
) -> None:
    """Objects, ``.checksum`` nodes and manifests: public ones anonymously readable,
    embargoed ones unreadable without authorization (and not in the public bucket)."""
    world = make_world(module_api, embargoed)
    checksum = expect(module_api.get(f"/api/zarr/{world.zarr_id}/"))["checksum"]
    write_manifest(module_archive, world.zarr_id)
    keys = [
        f"zarr/{world.zarr_id}/arr/0",
        checksum_node_key(world.zarr_id, ""),
        checksum_node_key(world.zarr_id, "arr"),
        manifest_key(world.zarr_id, checksum),
    ]
    public, private = module_archive.settings.s3_bucket, module_archive.settings.s3_embargo_bucket
    with httpx.Client(timeout=30) as anon:
        for key in keys:
            count(PART, cases=2)
            in_public = anon.get(f"{seaweedfs.endpoint_url}/{public}/{key}").status_code
            in_private = anon.get(f"{seaweedfs.endpoint_url}/{private}/{key}").status_code
            if embargoed:
                assert in_public in (403, 404) and in_private == 403, key
            else:
                assert in_public == 200 and in_private in (403, 404), key
    # owners read embargoed objects through presigned URLs; others get nothing
    urls = expect(module_api.post(f"/api/zarr/{world.zarr_id}/download/", json=[{"path": "arr/0"}]))
    assert httpx.get(urls[0]["url"]).content == b"zero"
