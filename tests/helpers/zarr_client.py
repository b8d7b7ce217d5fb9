"""Driving a Zarr through the HTTP API and presigned URLs, as a client does (httpx only)."""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import ZarrArchiveFile

from tests.helpers.presigned import put_headers


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def oracle_checksum(files: Mapping[str, bytes]) -> str:
    """The DANDI Zarr checksum of *files* (path -> content), computed by zarr-checksum."""
    return str(
        compute_zarr_checksum(
            ZarrArchiveFile(path=Path(p), size=len(b), digest=md5(b)) for p, b in files.items()
        )
    )


def oracle_from_digests(entries: Mapping[str, tuple[int, str]]) -> str:
    """The DANDI Zarr checksum of path -> (size, md5)."""
    return str(
        compute_zarr_checksum(
            ZarrArchiveFile(path=Path(p), size=s, digest=d) for p, (s, d) in entries.items()
        )
    )


def authed(base_url: str, token: str | None, timeout: float = 60) -> httpx.Client:
    headers = {"Authorization": f"token {token}"} if token else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=timeout)


def expect(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (
        response.request.url,
        response.status_code,
        response.text,
    )
    return response.json() if response.content else None


def create_dandiset(api: httpx.Client, name: str = "d", *, embargo: bool = False) -> str:
    body = expect(api.post("/api/dandisets/", json={"name": name, "embargo": embargo}))
    return str(body["identifier"])


def create_zarr(api: httpx.Client, dandiset: str, name: str = "test.zarr") -> str:
    body = expect(api.post("/api/zarr/", json={"name": name, "dandiset": dandiset}))
    return str(body["zarr_id"])


def put_presigned(s3: httpx.Client, url: str, body: bytes) -> httpx.Response:
    return s3.put(url, content=body, headers=put_headers(url, body))


def upload(api: httpx.Client, zarr_id: str, files: Mapping[str, bytes]) -> dict[str, Any]:
    """One batch: open, PUT every file to its presigned URL, complete; the Zarr's info."""
    urls = expect(
        api.post(
            f"/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": md5(b)} for p, b in files.items()],
        )
    )
    with httpx.Client(timeout=60) as s3:
        for item in urls:
            expect(put_presigned(s3, item["upload_url"], files[item["path"]]))
    expect(api.post(f"/api/zarr/{zarr_id}/upload/complete/"))
    return wait_at_rest(api, zarr_id)


def wait_at_rest(api: httpx.Client, zarr_id: str, timeout: float = 120) -> dict[str, Any]:
    """Poll the Zarr until no completed batch waits to be applied; its info then.

    ``complete`` answers before its batch is applied (``upload_state`` ``applying``);
    the checksum is the new one once the Zarr is ``at_rest`` (or ``open``: a new batch)."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        info: dict[str, Any] = expect(api.get(f"/api/zarr/{zarr_id}/"))
        if info.get("upload_state", "at_rest") != "applying":
            return info
        assert time.monotonic() < deadline, f"Zarr {zarr_id} still applying after {timeout} s"
        time.sleep(pause)
        pause = min(pause * 1.5, 0.5)


def delete_files(api: httpx.Client, zarr_id: str, paths: list[str]) -> dict[str, Any]:
    """Delete files (DANDI's 204), then the Zarr's info."""
    expect(
        api.request("DELETE", f"/api/zarr/{zarr_id}/files/", json=[{"path": p} for p in paths]),
        204,
    )
    info: dict[str, Any] = expect(api.get(f"/api/zarr/{zarr_id}/"))
    return info


def directory_url(zarr_id: str, directory: str) -> str:
    """The route listing a directory of the live Zarr (``""``: the root)."""
    path = urllib.parse.quote(directory, safe="/~") + "/" if directory else ""
    return f"/api/zarr/{zarr_id}.zarr/{path}"


def list_files(api: httpx.Client, zarr_id: str) -> dict[str, tuple[int, str]]:
    """Every file of the Zarr as the API lists it: path -> (size, md5), walking directories."""
    found: dict[str, tuple[int, str]] = {}
    pending = [""]
    while pending:
        directory = pending.pop()
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": 1000}
            if cursor:
                params["cursor"] = cursor
            page = expect(api.get(directory_url(zarr_id, directory), params=params))
            for entry in page["files"]:
                found[entry["path"]] = (entry["size"], entry["digest"])
            pending += [entry["path"] for entry in page["directories"]]
            cursor = page.get("next")
            if not cursor:
                break
    return found
