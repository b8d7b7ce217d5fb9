"""Embargo review (issue #25): unembargoing keeps every uploader's bytes, and nobody attaches
content they may not read.

Through the real HTTP API and S3: blobs uploaded by DANDI's route (no md5) and by ours
(md5 and dandi-etag), other users' public blobs of the same size, genuine public twins of
the same content (deduplicated or not, the bytes are the uploader's), embargoed blobs and
Zarrs of other users.
"""

from __future__ import annotations

import hashlib
import os

import httpx
import pytest

from tests.conftest import Users
from tests.helpers.assets import assets_url, client_for, ok
from tests.helpers.blob_uploads import Route, attach, dandi_upload_blob, downloaded, upload_by
from tests.helpers.zarr_client import create_dandiset, create_zarr, upload
from zarrchive.checksum.dandi_etag import dandi_etag
from zarrchive.db.models import Blob
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import blob_key

ROUTES: tuple[Route, ...] = ("dandi", "md5")


def _blob_row(archive: Archive, blob_id: str) -> tuple[str | None, str | None, bool] | None:
    with archive.db.session() as session:
        blob = session.get(Blob, blob_id)
        return None if blob is None else (blob.md5, blob.etag, blob.embargoed)


def _digest(client: httpx.Client, asset_id: str) -> dict[str, str]:
    """The digests the asset's metadata carries (DANDI's clients check them)."""
    return dict(ok(client.get(f"/api/assets/{asset_id}/"))["digest"])


def _asset(api: httpx.Client, dandiset: str, path: str) -> dict[str, object]:
    (found,) = [a for a in ok(api.get(assets_url(dandiset)))["results"] if a["path"] == path]
    return dict(found)


@pytest.mark.parametrize("theirs", ROUTES)
@pytest.mark.parametrize("mine", ROUTES)
def test_unembargo_keeps_my_bytes_beside_other_public_blobs_of_the_same_size(
    api: httpx.Client,
    other: httpx.Client,
    anon: httpx.Client,
    archive: Archive,
    mine: Route,
    theirs: Route,
) -> None:
    """Issue #25.1: user B's public blob of the same size is no twin of user A's private one
    (both uploaded DANDI's way have no md5: ``md5 IS NULL`` matched any of them)."""
    public = create_dandiset(other, "theirs")
    their_bytes, my_bytes = b"B" * 1000, b"A" * 1000
    their_blob = upload_by(theirs, other, public, their_bytes)
    their_asset = ok(attach(other, public, "b.bin", blob_id=their_blob))
    secret = create_dandiset(api, "mine", embargo=True)
    my_blob = upload_by(mine, api, secret, my_bytes)
    my_asset = ok(attach(api, secret, "a.bin", blob_id=my_blob))
    assert downloaded(api, my_asset["asset_id"]) == my_bytes

    ok(api.post(f"/api/dandisets/{secret}/unembargo/"))  # no job queue: runs inline

    after = _asset(anon, secret, "a.bin")
    assert after["blob_id"] == my_blob  # nothing else has these bytes: the blob is moved
    assert downloaded(anon, my_asset["asset_id"]) == my_bytes
    assert downloaded(anon, their_asset["asset_id"]) == their_bytes
    assert _asset(other, public, "b.bin")["blob_id"] == their_blob
    assert archive.store.get(blob_key(my_blob)) == my_bytes
    assert archive.embargo_store.head(blob_key(my_blob)) is None  # the private copy purged
    assert archive.store.get(blob_key(their_blob)) == their_bytes


@pytest.mark.parametrize("theirs", ROUTES)
@pytest.mark.parametrize("mine", ROUTES)
def test_unembargo_merges_only_into_a_public_twin_of_equal_digest(
    api: httpx.Client,
    other: httpx.Client,
    anon: httpx.Client,
    archive: Archive,
    mine: Route,
    theirs: Route,
) -> None:
    """A genuine public twin (equal dandi-etag, or equal md5, and size) may take the private
    blob's place; a blob uploaded DANDI's way has no md5, so mixed routes match by the
    dandi-etag while the md5 is NULL on one side.  A decoy of the same size is never taken."""
    data = os.urandom(1000)
    public = create_dandiset(other, "theirs")
    decoy = dandi_upload_blob(other, public, os.urandom(1000))
    twin = upload_by(theirs, other, public, data)
    twin_asset = ok(attach(other, public, "twin.bin", blob_id=twin))
    secret = create_dandiset(api, "mine", embargo=True)
    my_blob = upload_by(mine, api, secret, data)
    assert my_blob != twin  # another bucket: stored again
    my_asset = ok(attach(api, secret, "a.bin", blob_id=my_blob))

    ok(api.post(f"/api/dandisets/{secret}/unembargo/"))

    after = _asset(anon, secret, "a.bin")
    assert after["blob_id"] in (twin, my_blob) and after["blob_id"] != decoy
    digest = _digest(anon, my_asset["asset_id"])
    assert digest["dandi:dandi-etag"] == dandi_etag(data)
    assert downloaded(anon, my_asset["asset_id"]) == data
    assert downloaded(anon, twin_asset["asset_id"]) == data
    assert archive.embargo_store.head(blob_key(my_blob)) is None
    if after["blob_id"] == twin:  # deduplicated: the private blob is gone for good
        assert _blob_row(archive, my_blob) is None
        assert archive.store.head(blob_key(my_blob)) is None  # and its needless public copy
    else:
        md5 = None if mine == "dandi" else hashlib.md5(data).hexdigest()
        assert _blob_row(archive, my_blob) == (md5, dandi_etag(data), False)


def test_unembargo_of_a_blob_shared_with_another_embargoed_dandiset_keeps_both(
    api: httpx.Client, other: httpx.Client, anon: httpx.Client, archive: Archive
) -> None:
    """The copy made for the dandiset going public is matched by digest too (and keeps the
    dandi-etag): a public DANDI blob of the same size is not taken for it."""
    public = create_dandiset(other, "theirs")
    their_asset = ok(
        attach(other, public, "b.bin", blob_id=dandi_upload_blob(other, public, b"B" * 1000))
    )
    first, second = (create_dandiset(api, n, embargo=True) for n in ("first", "second"))
    data = b"A" * 1000
    shared = dandi_upload_blob(api, first, data)
    assert dandi_upload_blob(api, second, data) == shared  # stored once
    mine = ok(attach(api, first, "a.bin", blob_id=shared))
    kept = ok(attach(api, second, "a.bin", blob_id=shared))

    ok(api.post(f"/api/dandisets/{first}/unembargo/"))

    assert _asset(anon, first, "a.bin")["blob_id"] != shared
    assert _digest(anon, mine["asset_id"]) == {"dandi:dandi-etag": dandi_etag(data)}
    assert downloaded(anon, mine["asset_id"]) == data
    assert downloaded(api, kept["asset_id"]) == data  # the other dandiset's private blob
    assert downloaded(anon, their_asset["asset_id"]) == b"B" * 1000


# -- attaching content: only what the caller may read --------------------------------------


def test_attaching_another_users_embargoed_blob_is_refused(
    api: httpx.Client, other: httpx.Client, anon: httpx.Client, archive: Archive
) -> None:
    """Issue #25.2: a blob id (it is in presigned download URLs) is no key to its bytes."""
    victim = create_dandiset(api, "victim", embargo=True)
    data = os.urandom(1000)
    attached = dandi_upload_blob(api, victim, data)
    ok(attach(api, victim, "secret.bin", blob_id=attached))
    unattached = upload_by("md5", api, victim, os.urandom(500))  # validated, no asset yet
    thief_secret = create_dandiset(other, "thief", embargo=True)
    thief_public = create_dandiset(other, "thief public")
    mine = ok(
        attach(
            other, thief_secret, "own.bin", blob_id=dandi_upload_blob(other, thief_secret, b"own")
        )
    )
    missing = attach(other, thief_secret, "x.bin", blob_id="00000000-0000-4000-8000-000000000000")
    assert missing.status_code == 404

    for blob_id in (attached, unattached):
        for dandiset in (thief_secret, thief_public):
            refused = attach(other, dandiset, "stolen.bin", blob_id=blob_id)
            assert refused.status_code == 404, refused.text
            assert blob_id in refused.json()["detail"]
            assert "embargo" not in refused.json()["detail"]  # nothing revealed
        changed = other.put(
            f"{assets_url(thief_secret)}{mine['asset_id']}/",
            json={"metadata": {"path": "own.bin"}, "blob_id": blob_id},
        )
        assert changed.status_code == 404, changed.text
        # anonymous callers are asked to sign in, as for anything embargoed
        for dandiset in (thief_secret, thief_public, victim):
            assert attach(anon, dandiset, "stolen.bin", blob_id=blob_id).status_code == 401
    # nothing changed: the thief's draft holds its own asset only, with its own bytes
    (only,) = ok(other.get(assets_url(thief_secret)))["results"]
    assert only["asset_id"] == mine["asset_id"] and only["blob_id"] == mine["blob_id"]
    assert downloaded(other, mine["asset_id"]) == b"own"
    assert ok(other.get(assets_url(thief_public)))["count"] == 0
    # and unembargoing the thief's dandiset publishes nothing of the victim's
    ok(other.post(f"/api/dandisets/{thief_secret}/unembargo/"))
    assert archive.store.head(blob_key(attached)) is None
    assert archive.embargo_store.get(blob_key(attached)) == data


def test_attaching_own_uploads_and_public_content_still_works(
    api: httpx.Client, other: httpx.Client, users: Users, archive: Archive
) -> None:
    """One's own upload (also when validate deduplicated it into someone else's embargoed
    blob: the uploader proved to hold the bytes), public content, and, for an admin,
    anything."""
    victim = create_dandiset(api, "victim", embargo=True)
    data = os.urandom(700)
    theirs = dandi_upload_blob(api, victim, data)
    ok(attach(api, victim, "a.bin", blob_id=theirs))
    secret = create_dandiset(other, "secret", embargo=True)
    # the same bytes uploaded again: validate answers the stored blob, which is now "mine"
    same = upload_by("md5", other, secret, data)
    assert same == theirs
    asset = ok(attach(other, secret, "same.bin", blob_id=same))
    assert downloaded(other, asset["asset_id"]) == data
    # public content may go into an embargoed dandiset
    public = create_dandiset(api, "public")
    public_blob = dandi_upload_blob(api, public, b"public bytes")
    ok(attach(other, secret, "public.bin", blob_id=public_blob))
    # an upload that an update points at
    fresh = upload_by("md5", other, secret, b"fresh bytes")
    updated = other.put(
        f"{assets_url(secret)}{asset['asset_id']}/",
        json={"metadata": {"path": "same.bin"}, "blob_id": fresh},
    )
    assert ok(updated)["blob_id"] == fresh
    assert downloaded(other, asset["asset_id"]) == b"fresh bytes"
    # an admin may attach anything
    with client_for(api, users.admin) as admin:
        mine = create_dandiset(admin, "admin's", embargo=True)
        ok(attach(admin, mine, "a.bin", blob_id=theirs))


def test_attaching_another_users_embargoed_zarr_is_refused(
    api: httpx.Client, other: httpx.Client, anon: httpx.Client
) -> None:
    victim = create_dandiset(api, "victim", embargo=True)
    zarr_id = create_zarr(api, victim, "secret.zarr")
    upload(api, zarr_id, {"arr/.zarray": b"{}", "arr/0": b"secret"})
    thief = create_dandiset(other, "thief", embargo=True)
    refused = attach(other, thief, "stolen.zarr", zarr_id=zarr_id)
    assert refused.status_code == 404, refused.text
    assert victim not in refused.json()["detail"]  # not even whose it is
    assert attach(anon, thief, "stolen.zarr", zarr_id=zarr_id).status_code == 401
    assert ok(other.get(assets_url(thief)))["count"] == 0
    # one's own Zarr (with files) still becomes an asset
    own = create_zarr(other, thief, "own.zarr")
    upload(other, own, {"a": b"mine"})
    assert ok(attach(other, thief, "own.zarr", zarr_id=own))["zarr_id"] == own
    assert ok(attach(api, victim, "secret.zarr", zarr_id=zarr_id))["zarr_id"] == zarr_id


# -- issue #26.3: a Zarr without files is no asset ------------------------------------------


def test_a_zarr_without_files_may_be_an_asset_as_dandi_cli_makes_it(
    api: httpx.Client, dandiset: str, zarr_id: str
) -> None:
    """dandi-cli creates the asset of a new Zarr before it uploads the Zarr's files (its
    Zarr upload failed with 400 when empty Zarrs were refused as assets)."""
    asset = ok(attach(api, dandiset, "empty.zarr", zarr_id=zarr_id))
    assert asset["zarr_id"] == zarr_id
    upload(api, zarr_id, {"a": b"now"})
    assert ok(api.get(f"/api/zarr/{zarr_id}/"))["file_count"] == 1


def test_nothing_is_purged_unless_the_twin_is_verified(
    api: httpx.Client, other: httpx.Client, archive: Archive
) -> None:
    """A twin whose object is missing in S3, or whose digests collide with the private
    blob's (an equal dandi-etag, another md5), never takes its place: the move stops before
    anything changes, and the owner still reads their bytes."""
    data = os.urandom(1000)
    public = create_dandiset(other, "theirs")
    twin = dandi_upload_blob(other, public, data)
    secret = create_dandiset(api, "mine", embargo=True)
    my_blob = upload_by("md5", api, secret, data)
    asset = ok(attach(api, secret, "a.bin", blob_id=my_blob))

    archive.store.delete_all_versions(blob_key(twin))  # the twin's object is lost
    refused = api.post(f"/api/dandisets/{secret}/unembargo/")
    assert refused.status_code == 502, refused.text
    assert "nothing was purged" in refused.json()["detail"]
    assert downloaded(api, asset["asset_id"]) == data
    assert archive.embargo_store.get(blob_key(my_blob)) == data
    assert _blob_row(archive, my_blob) == (hashlib.md5(data).hexdigest(), dandi_etag(data), True)

    # a collision: the twin's md5 differs from the private blob's
    with archive.db.write_session() as session:
        row = session.get(Blob, twin)
        assert row is not None
        row.md5 = "0" * 32
    archive.store.put(blob_key(twin), data, "application/octet-stream")
    refused = api.post(f"/api/dandisets/{secret}/unembargo/")
    assert refused.status_code == 409, refused.text
    assert downloaded(api, asset["asset_id"]) == data
    assert archive.embargo_store.get(blob_key(my_blob)) == data

    # repaired, the move finishes (deduplicated into the twin, or not: the same bytes)
    with archive.db.write_session() as session:
        row = session.get(Blob, twin)
        assert row is not None
        row.md5 = None
    ok(api.post(f"/api/dandisets/{secret}/unembargo/"))
    with httpx.Client(base_url=str(api.base_url), timeout=60) as anon:
        assert downloaded(anon, asset["asset_id"]) == data
    assert archive.embargo_store.head(blob_key(my_blob)) is None
