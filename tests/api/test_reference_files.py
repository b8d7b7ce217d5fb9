"""Stock readers: fsspec reference files of a Zarr's live state and of each pinned snapshot,
and the read route that lets zarr-python over fsspec's HTTP filesystem read an embargoed Zarr
with a token.  The oracle is stock fsspec + zarr-python (no zarrchive code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.conftest import Users
from tests.helpers.api_uploads import upload
from tests.helpers.assets import add_zarr_asset, client_for, ok
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.fsspec_oracle import read_with_fsspec, s3fs_python
from tests.helpers.s3fs_oracle import local_zarr
from zarrchive.config import PublishedZarrs
from zarrchive.references import MAX_INLINE_BYTES
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.references import REFERENCES_PREFIX

pytestmark = SQLITE_ONLY


@pytest.fixture
def python() -> str:
    return s3fs_python()


def refs_of(client: httpx.Client, url: str) -> dict[str, Any]:
    document: dict[str, Any] = ok(client.get(url))
    return document


def test_live_reference_file_inlines_metadata_and_references_chunks(
    api: httpx.Client,
    anon: httpx.Client,
    archive: Archive,
    zarr_id: str,
    python: str,
    tmp_path: Path,
) -> None:
    files, expected = local_zarr(python, tmp_path)
    big_attrs = json.dumps({"x": "y" * MAX_INLINE_BYTES}).encode()
    files["g/.zattrs"] = big_attrs  # larger than the inline limit: referenced
    upload(api, zarr_id, files)
    url = f"/api/zarr/{zarr_id}/refs.json"
    assert ok(anon.get(f"/api/zarr/{zarr_id}/"))["refs_url"] == url  # linked from the Zarr
    response = anon.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert int(response.headers["content-length"]) == len(response.content)
    document = response.json()
    assert document["version"] == 1
    base = archive.store.public_url(f"zarr/{zarr_id}/")
    assert document["templates"] == {"u": base}
    refs = document["refs"]
    assert set(refs) == set(files)
    for path, body in files.items():
        if path.rpartition("/")[2] in (".zgroup", ".zarray", ".zattrs") and path != "g/.zattrs":
            assert refs[path] == body.decode(), path
        else:
            assert refs[path] == ["{{u}}" + path], path
    # the referenced URLs serve exactly the bytes, anonymously
    chunk = next(p for p in files if p.startswith("a/") and not p.endswith(".zarray"))
    assert httpx.get(base + chunk).content == files[chunk]

    got = read_with_fsspec(python, "refs", str(api.base_url) + url, "", tmp_path)
    assert got == expected

    # a state at rest is kept: HEAD (fsspec asks the size first) and GET cost one walk
    head = anon.head(url)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) == len(response.content)
    checksum = ok(api.get(f"/api/zarr/{zarr_id}/"))["checksum"]
    kept = [o.key for o in archive.store.iter_objects(f"{REFERENCES_PREFIX}{zarr_id}/")]
    assert len(kept) == 1 and kept[0].startswith(f"{REFERENCES_PREFIX}{zarr_id}/live-{checksum}-")
    # a change: the next reference file is the new state's, the old one is gone
    upload(api, zarr_id, {"a/.zattrs": b'{"changed": true}'})
    assert ok(anon.get(url))["refs"]["a/.zattrs"] == '{"changed": true}'
    now = ok(api.get(f"/api/zarr/{zarr_id}/"))["checksum"]
    kept = [o.key for o in archive.store.iter_objects(f"{REFERENCES_PREFIX}{zarr_id}/")]
    assert len(kept) == 1 and kept[0].startswith(f"{REFERENCES_PREFIX}{zarr_id}/live-{now}-")


def test_embargoed_zarr_is_read_by_its_owner_with_stock_fsspec(
    api: httpx.Client,
    anon: httpx.Client,
    users: Users,
    embargoed: tuple[str, str],
    python: str,
    tmp_path: Path,
) -> None:
    _, zarr_id = embargoed
    files, expected = local_zarr(python, tmp_path)
    upload(api, zarr_id, files)
    base = str(api.base_url).rstrip("/")
    read_url = f"{base}/api/zarr/{zarr_id}/read/"

    # zarr-python over fsspec's HTTP filesystem with the owner's token
    assert read_with_fsspec(python, "http", read_url, users.owner, tmp_path) == expected
    # a stranger and an anonymous reader get nothing
    for token in (users.other, ""):
        refused = read_with_fsspec(python, "http", read_url, token, tmp_path)
        assert "error" in refused, refused

    # the reference file: the owner's only, and its references go through the read route
    refs_url = f"/api/zarr/{zarr_id}/refs.json"
    assert anon.get(refs_url).status_code == 401
    with client_for(api, users.other) as other:
        assert other.get(refs_url).status_code == 404
    document = refs_of(api, refs_url)
    assert document["templates"] == {"u": read_url}
    assert api.get(refs_url).headers["cache-control"] == "private, no-store"
    assert read_with_fsspec(python, "refs", base + refs_url, users.owner, tmp_path) == expected
    assert "error" in read_with_fsspec(python, "refs", base + refs_url, users.other, tmp_path)

    # the read route: a short-lived redirect for files, 404 for anything else
    chunk = next(p for p in files if p.startswith("a/") and not p.endswith(".zarray"))
    redirect = api.get(f"/api/zarr/{zarr_id}/read/{chunk}")
    assert redirect.status_code == 302
    assert redirect.headers["cache-control"] == "no-store"
    assert "X-Amz-Signature" in redirect.headers["location"]
    assert httpx.get(redirect.headers["location"]).content == files[chunk]
    for missing in ("a/nope", "a", "", "../x", "a//b"):
        assert api.get(f"/api/zarr/{zarr_id}/read/{missing}").status_code == 404, missing
    assert anon.get(f"/api/zarr/{zarr_id}/read/{chunk}").status_code == 401


@pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)
def test_snapshot_reference_file_reads_the_pinned_state_after_the_draft_changed(
    api: httpx.Client,
    anon: httpx.Client,
    archive: Archive,
    dandiset: str,
    zarr_id: str,
    python: str,
    tmp_path: Path,
) -> None:
    files, expected = local_zarr(python, tmp_path)
    upload(api, zarr_id, files)
    add_zarr_asset(api, dandiset, zarr_id, "image.zarr")
    ok(api.post(f"/api/dandisets/{dandiset}/versions/draft/publish/"))
    (snapshot,) = ok(api.get(f"/api/zarr/{zarr_id}/snapshots/"))
    checksum = snapshot["checksum"]

    # the draft changes: every chunk of "a" is rewritten with other bytes
    changed = {p: b for p, b in files.items() if p.startswith("a/") and not p.endswith(".zarray")}
    replaced = {p: bytes(reversed(b)) for p, b in changed.items()}
    upload(api, zarr_id, replaced)
    live = ok(api.get(f"/api/zarr/{zarr_id}/"))
    assert live["checksum"] != checksum

    url = f"/api/zarr/{zarr_id}/snapshots/{checksum}/refs.json"
    assert snapshot["refs_url"] == url  # linked from the snapshot
    response = anon.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"].startswith("public")
    refs = response.json()["refs"]
    chunk = next(iter(changed))
    (reference,) = refs[chunk]
    assert "?versionId=" in reference
    base = archive.store.public_url(f"zarr/{zarr_id}/")
    assert httpx.get(reference.replace("{{u}}", base)).content == files[chunk]
    # stock fsspec + zarr-python read exactly the pinned data
    got = read_with_fsspec(python, "refs", str(api.base_url) + url, "", tmp_path)
    assert got == expected
    assert got["a"] == np.arange(70, dtype="int32").reshape(10, 7).tolist()
    # kept once made: the next request streams the same bytes back
    prefix = f"{REFERENCES_PREFIX}{zarr_id}/{checksum}-"
    kept = [o.key for o in archive.store.iter_objects(prefix)]
    assert len(kept) == 1
    assert anon.get(url).content == response.content
    # the live reference file reads the draft's bytes
    live_refs = ok(anon.get(f"/api/zarr/{zarr_id}/refs.json"))["refs"]
    assert live_refs[chunk] == ["{{u}}" + chunk]
    assert httpx.get(base + chunk).content == replaced[chunk]
