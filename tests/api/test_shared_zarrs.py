"""One Zarr in several dandisets (#39 item 2): an asset of dandiset B reads a frozen Zarr of
dandiset A as its own; every refusal (who may share what) changes nothing.  On the in-memory
store; the snapshot mode and gc: tests/api/test_shared_zarr_snapshots.py."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import assets_url, client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.shared_zarrs import FIRST, SHARED_PATH, published_zarr, share, what_b_reads
from tests.helpers.snapshots import oracle
from tests.helpers.zarr_client import create_dandiset, create_zarr
from zarrchive.db.models import Asset, SharedZarrAsset
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import shared_zarrs

pytestmark = SQLITE_ONLY


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def test_b_reads_a_frozen_zarr_live_and_refusals_change_nothing(
    api: httpx.Client, archive: Archive, users: Users
) -> None:
    draft_only = create_dandiset(api, "unpublished")
    unpublished = create_zarr(api, draft_only, "draft.zarr")
    upload(api, unpublished, {"f": b"x"})
    a, zarr_id, _ = published_zarr(api, FIRST)
    secret = create_dandiset(api, "secret", embargo=True)
    secret_zarr = create_zarr(api, secret, "s.zarr")
    b = create_dandiset(api, "B")
    embargoed_b = create_dandiset(api, "embargoed B", embargo=True)
    with client_for(api, users.other) as other:
        theirs = create_dandiset(other, "theirs")
        # someone else's embargoed Zarr: 404, as if it did not exist
        assert "no Zarr" in share(other, theirs, secret_zarr, 404)["detail"]
        # a reviewer of the embargoed dandiset reads it but does not own it: 403
        reviewers = f"/api/dandisets/{secret}/reviewers/"
        ok(api.put(reviewers, json=[{"username": "other"}]))
        assert "only its owners" in share(other, theirs, secret_zarr, 403)["detail"]
        # a public published Zarr is anyone's to share
        assert share(other, theirs, zarr_id)["shared_zarr"]["mode"] == "freeze"
    # the owner of both: not into a public dandiset (409); into an embargoed one, the Zarr
    # still has no published state (409)
    assert "shared only with embargoed" in share(api, b, secret_zarr, 409)["detail"]
    assert "no published state" in share(api, embargoed_b, secret_zarr, 409)["detail"]
    # a Zarr nobody published: 409; a Zarr id that does not exist: 404
    assert "no published state" in share(api, b, unpublished, 409)["detail"]
    assert share(api, b, "00000000-0000-0000-0000-000000000000", 404)
    # a checksum for a Zarr of the dandiset itself: 400
    mine = create_zarr(api, b, "mine.zarr")
    share(api, b, mine, 400, zarr_checksum=oracle(FIRST))
    with archive.db.session() as session:
        assert session.query(Asset).join(Asset.version).filter_by(dandiset_id=int(b)).count() == 0
        assert session.query(SharedZarrAsset).filter_by(dandiset_id=int(b)).count() == 0

    # freeze mode: the Zarr is frozen, B reads it live (what dandi-cli reads)
    shared = share(api, b, zarr_id, zarr_checksum=oracle(FIRST))
    assert shared["shared_zarr"] == {
        "dandiset": a,
        "zarr_id": zarr_id,
        "mode": "freeze",
        "checksum": oracle(FIRST),
        "snapshot_url": None,
    }
    seen = what_b_reads(api, b, shared["asset_id"])
    assert seen["files"] == FIRST
    # the frozen Zarr refuses every change, so nothing A does changes B
    change = [{"path": "z", "etag": "0" * 32}]
    assert api.post(f"/api/zarr/{zarr_id}/upload/", json=change).status_code == 403
    # B's asset given its own Zarr instead: no longer shared
    body = {"metadata": {"path": SHARED_PATH}, "zarr_id": mine}
    changed = ok(api.put(f"{assets_url(b)}{shared['asset_id']}/", json=body))
    assert changed["shared_zarr"] is None and changed["zarr_id"] == mine
    with archive.db.session() as session:
        assert shared_zarrs.held_checksums(session, zarr_id) == {oracle(FIRST)}  # (other's)
