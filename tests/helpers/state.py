"""A snapshot of what an archive shows (API and S3), to prove a request changed nothing."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.zarr_client import list_files

#: Fields that may change without a change of content (time stamps, the manifest job).
_VOLATILE = {"manifest_url", "manifest_status"}


def s3_state(s3: Any, bucket: str, prefix: str) -> list[tuple[str, str, bool, str]]:
    """Every version and delete marker under *prefix*: (key, version, latest, etag)."""
    rows: list[tuple[str, str, bool, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            rows.append((v["Key"], v["VersionId"], v["IsLatest"], v["ETag"]))
        for m in page.get("DeleteMarkers", []):
            rows.append((m["Key"], m["VersionId"], m["IsLatest"], "delete-marker"))
    return sorted(rows)


def snapshot(
    api: httpx.Client, s3: Any, buckets: list[str], dandiset: str, zarr_id: str
) -> dict[str, Any]:
    """What the owner sees of *dandiset* and *zarr_id*, and S3's versions of the Zarr."""
    zarr = api.get(f"/api/zarr/{zarr_id}/").json()
    state: dict[str, Any] = {
        "zarr": {k: v for k, v in zarr.items() if k not in _VOLATILE},
        "files": list_files(api, zarr_id),
        "upload": api.get(f"/api/zarr/{zarr_id}/upload/").status_code,
        "dandiset": api.get(f"/api/dandisets/{dandiset}/").json(),
        "versions": api.get(f"/api/dandisets/{dandiset}/versions/").json(),
        "assets": api.get(f"/api/dandisets/{dandiset}/versions/draft/assets/").json(),
        "zarrs": sorted(
            z["zarr_id"]
            for z in api.get("/api/zarr/", params={"page_size": 1000}).json()["results"]
        ),
    }
    for bucket in buckets:
        for prefix in (f"zarr/{zarr_id}/", f"zarr_checksums/{zarr_id}/"):
            state[f"s3:{bucket}:{prefix}"] = s3_state(s3, bucket, prefix)
    return state
