"""Big files of a Zarr batch sent in parts, as any client would (tests of issue 20)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from tests.helpers.presigned import put_headers
from tests.helpers.zarr_client import md5

MIB = 1024**2
#: The tests' multipart threshold (and so their part size).
THRESHOLD = 8 * MIB


def big_bytes(size: int, seed: int = 0) -> bytes:
    """*size* pseudo-random bytes (incompressible, reproducible)."""
    import random

    return random.Random(seed).randbytes(size)


def cut(data: bytes, part_size: int) -> dict[int, bytes]:
    """The parts of *data*, by number (1-based)."""
    return {
        n + 1: data[start : start + part_size]
        for n, start in enumerate(range(0, max(len(data), 1), part_size))
    }


def open_sized(
    api: httpx.Client, zarr_id: str, files: Mapping[str, bytes], **params: str
) -> httpx.Response:
    """Open a batch declaring every file's size (and md5)."""
    return api.post(
        f"/api/zarr/{zarr_id}/upload/",
        json=[{"path": p, "etag": md5(b), "size": len(b)} for p, b in files.items()],
        params=params,
    )


def ask_parts(
    api: httpx.Client, zarr_id: str, path: str, parts: Mapping[int, bytes]
) -> httpx.Response:
    return api.post(
        f"/api/zarr/{zarr_id}/upload/parts/",
        json={"path": path, "parts": [{"part_number": n, "md5": md5(b)} for n, b in parts.items()]},
    )


def put_part(url: str, body: bytes) -> httpx.Response:
    with httpx.Client(timeout=60) as s3:
        return s3.put(url, content=body, headers=put_headers(url, body))


def send_parts(
    api: httpx.Client,
    zarr_id: str,
    path: str,
    data: bytes,
    part_size: int,
    only: Iterable[int] | None = None,
) -> dict[str, Any]:
    """Ask URLs for the parts of *data* (those numbered in *only*, default all) and PUT the
    ones not ``done``; the archive's answer."""
    parts = cut(data, part_size)
    chosen = {n: parts[n] for n in (only if only is not None else parts)}
    response = ask_parts(api, zarr_id, path, chosen)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    for item in answer["parts"]:
        if item["upload_url"] is not None:
            put = put_part(item["upload_url"], chosen[item["part_number"]])
            assert put.status_code == 200, put.text
    return answer


def put_small(urls: list[dict[str, Any]], files: Mapping[str, bytes]) -> None:
    """PUT the files that got a URL (not those uploaded in parts)."""
    with httpx.Client(timeout=60) as s3:
        for item in urls:
            if item["upload_url"] is None:
                continue
            body = files[item["path"]]
            response = s3.put(
                item["upload_url"],
                content=body,
                headers=put_headers(item["upload_url"], body),
            )
            assert response.status_code == 200, response.text


def write_tree(root: os.PathLike[str] | str, files: Mapping[str, bytes]) -> None:
    for path, body in files.items():
        target = os.path.join(root, *path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(body)
