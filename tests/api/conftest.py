"""Fixtures and helpers for API tests: a dandiset, a Zarr, uploading through presigned URLs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from zarrchive.storage.objects import md5_to_content_md5


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture
def dandiset(api: httpx.Client) -> str:
    response = api.post("/api/dandisets/", json={"name": "test dandiset"})
    assert response.status_code == 200, response.text
    identifier: str = response.json()["identifier"]
    return identifier


@pytest.fixture
def zarr_id(api: httpx.Client, dandiset: str) -> str:
    response = api.post("/api/zarr/", json={"name": "test.zarr", "dandiset": dandiset})
    assert response.status_code == 200, response.text
    zid: str = response.json()["zarr_id"]
    return zid


def put_files(urls: list[dict[str, str]], files: Mapping[str, bytes]) -> None:
    """PUT each file to its presigned URL, as any client would."""
    with httpx.Client(timeout=60) as client:
        for item in urls:
            body = files[item["path"]]
            response = client.put(
                item["upload_url"],
                content=body,
                headers={"Content-MD5": md5_to_content_md5(md5(body))},
            )
            assert response.status_code == 200, response.text


def upload(
    api: httpx.Client, zarr_id: str, files: Mapping[str, bytes], batch_size: int = 500
) -> dict[str, Any]:
    """Upload *files* in batches through the API; returns the final Zarr info."""
    items = list(files.items())
    info: dict[str, Any] = {}
    for start in range(0, len(items), batch_size):
        batch = dict(items[start : start + batch_size])
        response = api.post(
            f"/api/zarr/{zarr_id}/upload/",
            json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
        )
        assert response.status_code == 200, response.text
        put_files(response.json(), batch)
        # wait=true: applied before the answer, so its checksum is the new one
        response = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
        assert response.status_code == 200, response.text
        info = response.json()
    return info


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file below *root*: relative '/' path -> content."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
