"""Uploading blobs through the API as clients do: DANDI's route (dandi-etag, the client
completes at S3) or ours (md5), and reading an asset's bytes back through its download."""

from __future__ import annotations

from typing import Any, Literal

import httpx

from tests.helpers.assets import assets_url, ok, upload_blob
from zarrchive.checksum.dandi_etag import dandi_etag

#: How a blob is uploaded: DANDI's route (no md5 recorded) or ours (md5 and dandi-etag).
Route = Literal["dandi", "md5"]


def dandi_upload_blob(api: httpx.Client, dandiset: str, data: bytes) -> str:
    """Upload *data* the way dandi-cli does (409: stored already); its blob id."""
    body = {
        "contentSize": len(data),
        "digest": {"algorithm": "dandi:dandi-etag", "value": dandi_etag(data)},
        "dandiset": dandiset,
    }
    response = api.post("/api/uploads/initialize/", json=body)
    if response.status_code == 409:
        return str(response.json()["blob_id"])
    plan = ok(response)
    parts = []
    offset = 0
    with httpx.Client(timeout=60) as s3:
        for part in plan["parts"]:
            chunk = data[offset : offset + part["size"]]
            offset += part["size"]
            put = s3.put(part["upload_url"], content=chunk)
            assert put.status_code == 200, put.text
            etag = put.headers["ETag"].strip('"')
            parts.append({"part_number": part["part_number"], "size": part["size"], "etag": etag})
        done = ok(api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": parts}))
        assembled = s3.post(done["complete_url"], content=done["body"])
        assert assembled.status_code == 200, assembled.text
    blob = ok(api.post(f"/api/uploads/{plan['upload_id']}/validate/"))
    return str(blob["blob_id"])


def upload_by(route: Route, api: httpx.Client, dandiset: str, data: bytes) -> str:
    """Upload *data* by *route*; its blob id."""
    if route == "dandi":
        return dandi_upload_blob(api, dandiset, data)
    return upload_blob(api, dandiset, data)


def attach(
    api: httpx.Client, dandiset: str, path: str, *, blob_id: str | None = None, **ids: str
) -> httpx.Response:
    """Ask to make an asset at *path* of the draft of *dandiset* (a blob or ``zarr_id``)."""
    body: dict[str, Any] = {"metadata": {"path": path}, **ids}
    if blob_id is not None:
        body["blob_id"] = blob_id
    return api.post(assets_url(dandiset), json=body)


def downloaded(client: httpx.Client, asset_id: str) -> bytes:
    """The bytes *client* gets by following the asset's download redirect."""
    redirect = client.get(f"/api/assets/{asset_id}/download/")
    assert redirect.status_code == 302, (redirect.status_code, redirect.text)
    with httpx.Client(timeout=60) as s3:
        response = s3.get(redirect.headers["location"])
    assert response.status_code == 200, response.text
    return response.content
