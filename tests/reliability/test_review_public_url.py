"""With ``ZARRCHIVE_PUBLIC_URL`` set, a forged ``Host`` never appears in an answer (issue #35,
item 7).

Every request here carries ``Host: evil.example:666``.  Before the fix the archive wrote
that host into ``next``/``previous`` links, ``/api/info/``'s ``services.api.url``, the
LINDI routes of assets and the API address inside an embargoed blob's LINDI file, and
Starlette's trailing-slash redirects.  Now each uses the configured address, and no answer
(status line, headers or body) of these routes holds the forged host: pagination links
(DANDI's pages and the flat listing of a Zarr), ``/api/info/`` and ``/server-info``, an
embargoed asset's ``lindi_url`` and its LINDI file's data route, the web pages, redirects.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import httpx
import numpy as np
import pytest

from tests.helpers.assets import ok
from tests.helpers.blob_uploads import attach, upload_by
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.jobs import HeldJobQueue
from tests.helpers.zarr_client import create_dandiset, create_zarr, expect, upload
from zarrchive.services.runtime import Archive, set_current_archive

PUBLIC = "https://archive.example.org"
FORGED = "evil.example:666"

pytestmark = [SQLITE_ONLY, pytest.mark.settings(public_url=PUBLIC)]


def _clean(response: httpx.Response) -> httpx.Response:
    """*response*, checked to hold the forged host nowhere."""
    seen = [response.text, *(f"{k}: {v}" for k, v in response.headers.items())]
    assert not any("evil.example" in text for text in seen), (response.request.url, seen)
    return response


def _get(client: httpx.Client, url: str, **params: str | int) -> httpx.Response:
    return _clean(client.get(url, params=params, headers={"Host": FORGED}))


def _hdf5(tmp_path: Path) -> bytes:
    path = tmp_path / "secret.nwb"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", data=np.arange(1000, dtype="int32"), chunks=(100,))
    return path.read_bytes()


def test_a_forged_host_never_reaches_an_answer(
    api: httpx.Client, anon: httpx.Client, archive: Archive, tmp_path: Path
) -> None:
    # /api/info/ and /server-info
    for route in ("/api/info/", "/server-info"):
        info = expect(_get(anon, route))
        assert info["services"]["api"]["url"] == f"{PUBLIC}/api"
        assert info["services"]["webui"]["url"] == PUBLIC
    # DANDI's pages: next and previous
    first = create_dandiset(api, "one")
    create_dandiset(api, "two")
    page = expect(_get(anon, "/api/dandisets/", page_size=1))
    assert page["next"].startswith(f"{PUBLIC}/api/dandisets/?")
    page = expect(_get(anon, "/api/dandisets/", page_size=1, page=2))
    assert page["previous"].startswith(f"{PUBLIC}/api/dandisets/?")
    # the flat listing of a Zarr: next
    zarr_id = create_zarr(api, first)
    upload(api, zarr_id, {"a": b"1", "b": b"2"})
    listing = expect(_get(anon, f"/api/zarr/{zarr_id}/files/", limit=1))
    assert listing["next"].startswith(f"{PUBLIC}/api/zarr/{zarr_id}/files/?")
    # Starlette's own redirects (a missing trailing slash)
    moved = _get(anon, "/api/dandisets", page_size=1)
    assert moved.status_code in (301, 307, 308)
    assert moved.headers["location"].startswith((f"{PUBLIC}/", "/"))
    # the web pages
    for route in ("/", f"/dandiset/{first}", f"/zarr/{zarr_id}/", "/docs"):
        assert _get(anon, route).status_code == 200, route
    # an embargoed NWB: its asset's lindi_url and the LINDI file's data route
    held = HeldJobQueue()  # (the Zarr's batches were applied at once, without a queue)
    archive.jobs = held
    set_current_archive(archive)
    try:
        secret = ok(api.post("/api/dandisets/", json={"name": "secret", "embargo": True}))
        blob_id = upload_by("md5", api, secret["identifier"], _hdf5(tmp_path))
        asset = ok(attach(api, secret["identifier"], "sub-1/secret.nwb", blob_id=blob_id))
        held.run("lindi:")
    finally:
        archive.jobs = None
        set_current_archive(None)
    shown = expect(_get(api, f"/api/assets/{asset['asset_id']}/info/"))
    assert shown["lindi_url"].startswith(f"{PUBLIC}/api/")
    lindi_route = shown["lindi_url"][len(PUBLIC) :]
    document = expect(_get(api, lindi_route))
    urls = {v[0] for v in document["refs"].values() if isinstance(v, list)}
    urls = {document.get("templates", {}).get(u[2:-2], u) for u in urls}
    assert urls == {f"{PUBLIC}/api/lindi/blobs/{blob_id}/data/"}
