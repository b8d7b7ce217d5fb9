"""Unembargo's copies (issue #40): the cross-bucket copies and the multipart copies' parts
are sent as the apply's copies are (``storage/signed_copy.py``: our SigV4 signer and urllib3,
not botocore), with the same result: every byte, md5 and object version as before; a blob
shared with another embargoed dandiset is copied with its digests, sha256 included."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from tests.helpers.assets import assets_url, upload_blob
from tests.helpers.s3 import object_history, on_s3
from tests.helpers.zarr_client import create_dandiset, create_zarr, expect, upload
from zarrchive.db.models import Asset, Blob, Dandiset, EmbargoStatus, Version
from zarrchive.services.dandi.embargo import move_to_public
from zarrchive.services.runtime import Archive

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

#: 12 MiB and a bit: three parts of 5 MiB above a threshold of 8 MiB (a multipart copy).
BIG = bytes(range(256)) * (12 * 1024 * 1024 // 256 + 17)
THRESHOLD, PART = 8 * 1024**2, 5 * 1024**2


def _botocore_copies(archive: Archive) -> Counter[str]:
    """The copies the stores' botocore clients are asked to make from now on."""
    seen: Counter[str] = Counter()

    def count(event_name: str, **_kwargs: Any) -> None:
        seen[event_name.rsplit(".", 1)[-1]] += 1

    for store in (on_s3(archive.store), on_s3(archive.embargo_store)):
        for client in (store.client, store.copy_client):
            for operation in ("CopyObject", "UploadPartCopy"):
                client.meta.events.register(f"before-call.s3.{operation}", count)
    return seen


def _blob_of(archive: Archive, dandiset: str) -> Blob:
    with archive.db.session() as session:
        blob = session.scalars(
            select(Blob)
            .join(Asset, Asset.blob_id == Blob.id)
            .join(Version, Version.id == Asset.version_id)
            .where(Version.dandiset_id == int(dandiset))
        ).one()
        session.expunge(blob)
        return blob


def test_unembargo_sends_its_copies_signed_and_keeps_every_byte_md5_and_sha256(
    api: httpx.Client, archive: Archive
) -> None:
    identifier = create_dandiset(api, "moved", embargo=True)
    other = create_dandiset(api, "still embargoed", embargo=True)
    # a big blob (a multipart copy), shared with the other dandiset (copied, digests kept)
    blob_id = upload_blob(api, identifier, BIG)
    expect(
        api.post(assets_url(identifier), json={"metadata": {"path": "big.nwb"}, "blob_id": blob_id})
    )
    expect(api.post(assets_url(other), json={"metadata": {"path": "same.nwb"}, "blob_id": blob_id}))
    sha256 = hashlib.sha256(BIG).hexdigest()
    with archive.db.session() as session:
        row = session.get(Blob, blob_id)
        assert row is not None and row.embargoed
        row.sha256 = sha256  # as the content lane's job records it
    # a Zarr with a history (one file overwritten): every version is copied, in order
    zarr_id = create_zarr(api, identifier)
    upload(api, zarr_id, {"a/0": b"zero", "a/1": b"one", "b": b"bee"})
    upload(api, zarr_id, {"a/0": b"zero again"})
    with archive.db.session() as session:
        dandiset = session.get(Dandiset, int(identifier))
        assert dandiset is not None
        dandiset.embargo_status = EmbargoStatus.UNEMBARGOING.value

    botocore = _botocore_copies(archive)
    move_to_public(archive, int(identifier), copy_threshold=THRESHOLD, copy_part_size=PART)
    assert botocore == Counter(), "unembargo's copies went through botocore"

    moved = _blob_of(archive, identifier)
    assert moved.id != blob_id and not moved.embargoed  # a copy: the other keeps the original
    assert (moved.md5, moved.sha256, moved.size) == (hashlib.md5(BIG).hexdigest(), sha256, len(BIG))
    got = archive.store.get(moved.key)
    assert got is not None and hashlib.md5(got).hexdigest() == moved.md5 and got == BIG
    head = archive.store.head(moved.key)
    assert head is not None and head.etag.endswith("-3")  # 5 + 5 + 2 MiB: parts were copied
    kept = _blob_of(archive, other)
    assert (kept.id, kept.embargoed, kept.sha256) == (blob_id, True, sha256)
    assert archive.embargo_store.get(kept.key) == BIG

    assert object_history(archive.store, f"zarr/{zarr_id}/a/0") == [b"zero", b"zero again"]
    for path, data in {"a/1": b"one", "b": b"bee"}.items():
        assert archive.store.get(f"zarr/{zarr_id}/{path}") == data
        head = archive.store.head(f"zarr/{zarr_id}/{path}")
        assert head is not None and head.etag == hashlib.md5(data).hexdigest()
    assert list(archive.embargo_store.iter_versions(f"zarr/{zarr_id}/")) == []
