"""DANDI's Zarr upload as dandi-cli 0.81 does it (``dandi/files/zarr.py``), over real HTTP:
POST ``files/`` in groups of 255 ``{path, base64md5}``, PUT each file to its URL with
``Content-MD5`` (and an unsigned ``Content-Type`` for metadata files), DELETE ``files/``,
POST ``finalize/``, then poll ``GET /api/zarr/{id}/`` until ``status`` is ``Complete``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from tests.helpers.zarr_client import expect, md5
from zarrchive.storage.objects import md5_to_content_md5

#: dandi-cli's ZARR_UPLOAD_BATCH_SIZE
GROUP = 255
#: dandi-cli sends this Content-Type (unsigned) with Zarr metadata files
METADATA_NAMES = (".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json")


def base64md5(body: bytes) -> str:
    return md5_to_content_md5(md5(body))


def announce(api: httpx.Client, zarr_id: str, files: Mapping[str, bytes]) -> list[str]:
    """POST files/ for *files*: the presigned URLs, in request order."""
    body = [{"path": p, "base64md5": base64md5(b)} for p, b in files.items()]
    urls: list[str] = expect(api.post(f"/api/zarr/{zarr_id}/files/", json=body))
    assert isinstance(urls, list) and len(urls) == len(files)
    assert all(isinstance(u, str) for u in urls)
    return urls


def put(storage: httpx.Client, url: str, path: str, body: bytes) -> httpx.Response:
    headers = {"Content-MD5": base64md5(body)}
    if path.rsplit("/", 1)[-1] in METADATA_NAMES:
        headers["Content-Type"] = "application/json"
    return storage.put(url, content=body, headers=headers)


def put_all(urls: Iterable[str], files: Mapping[str, bytes]) -> None:
    with httpx.Client(timeout=60) as storage:
        for url, (path, body) in zip(urls, files.items(), strict=True):
            response = put(storage, url, path, body)
            assert response.status_code == 200, (path, response.status_code, response.text)


def wait_complete(api: httpx.Client, zarr_id: str, timeout: float = 120) -> dict[str, Any]:
    """Poll as dandi-cli does (it never gives up; this does after *timeout*)."""
    deadline = time.monotonic() + timeout
    while True:
        info: dict[str, Any] = expect(api.get(f"/api/zarr/{zarr_id}/"))
        if info["status"] == "Complete":
            return info
        assert info["status"] in ("Pending", "Ingesting"), info
        assert time.monotonic() < deadline, f"Zarr {zarr_id} not Complete after {timeout} s"
        time.sleep(0.05)


def dandi_upload(
    api: httpx.Client,
    zarr_id: str,
    files: Mapping[str, bytes],
    *,
    delete: Iterable[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Upload *files* (then delete *delete*) as dandi-cli does; ``(finalize answer, info)``."""
    items = list(files.items())
    for start in range(0, len(items), GROUP):
        group = dict(items[start : start + GROUP])
        put_all(announce(api, zarr_id, group), group)
    paths = list(delete)
    for start in range(0, len(paths), 100):  # dandi-cli's ZARR_DELETE_BATCH_SIZE
        chunk = [{"path": p} for p in paths[start : start + 100]]
        expect(api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=chunk), 204)
    report: dict[str, Any] = expect(api.post(f"/api/zarr/{zarr_id}/finalize/"))
    return report, wait_complete(api, zarr_id)


def flat_listing(
    client: httpx.Client, zarr_id: str, **params: Any
) -> tuple[list[dict[str, Any]], int]:
    """Every object of DANDI's flat listing, following ``next``; and how many pages."""
    url: str | None = f"/api/zarr/{zarr_id}/files/"
    results: list[dict[str, Any]] = []
    pages = 0
    query: dict[str, Any] | None = params
    while url:
        page = expect(client.get(url, params=query))
        assert set(page) == {"next", "results"}
        results += page["results"]
        pages += 1
        url, query = page["next"], None
    return results, pages
