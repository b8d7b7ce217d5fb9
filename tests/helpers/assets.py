"""Helpers for the version, asset, blob and publishing tests (not fixtures of conftest)."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from tests.helpers.presigned import put_headers


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json() if response.content else None


def assets_url(dandiset: str, version: str = "draft") -> str:
    return f"/api/dandisets/{dandiset}/versions/{version}/assets/"


def add_zarr_asset(
    api: httpx.Client, dandiset: str, zarr_id: str, path: str, **metadata: Any
) -> dict[str, Any]:
    body = {"metadata": {"path": path, **metadata}, "zarr_id": zarr_id}
    result: dict[str, Any] = ok(api.post(assets_url(dandiset), json=body))
    return result


def upload_blob(api: httpx.Client, dandiset: str, data: bytes) -> str:
    """Upload *data* as a blob (single PUT or multipart, as the server says); its blob_id."""
    plan = ok(
        api.post(
            "/api/uploads/initialize/",
            json={"size": len(data), "md5": md5(data), "dandiset": dandiset},
        )
    )
    if plan["blob_id"] is not None:
        return str(plan["blob_id"])
    upload_id = plan["upload_id"]
    with httpx.Client(timeout=60) as s3:
        if not plan["multipart"]:
            (part,) = plan["parts"]
            response = s3.put(
                part["upload_url"],
                content=data,
                headers=put_headers(part["upload_url"], data),
            )
            assert response.status_code == 200, response.text
        else:
            etags = []
            offset = 0
            for part in plan["parts"]:
                chunk = data[offset : offset + part["size"]]
                offset += part["size"]
                response = s3.put(part["upload_url"], content=chunk)
                assert response.status_code == 200, response.text
                etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
            ok(api.post(f"/api/uploads/{upload_id}/complete/", json={"parts": etags}))
    result = ok(api.post(f"/api/uploads/{upload_id}/validate/"))
    return str(result["blob_id"])


def add_blob_asset(
    api: httpx.Client, dandiset: str, data: bytes, path: str, **metadata: Any
) -> dict[str, Any]:
    blob_id = upload_blob(api, dandiset, data)
    body = {"metadata": {"path": path, **metadata}, "blob_id": blob_id}
    result: dict[str, Any] = ok(api.post(assets_url(dandiset), json=body))
    return result


def client_for(api: httpx.Client, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=str(api.base_url), headers={"Authorization": f"token {token}"}, timeout=60
    )
