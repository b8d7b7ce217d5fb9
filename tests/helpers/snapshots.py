"""Reading a Zarr's published snapshots (and its live state) through the API, as any
client would: listings from the API, bytes from the URLs it hands out (plain httpx, no
credentials towards S3)."""

from __future__ import annotations

import urllib.parse
from datetime import datetime, timedelta
from typing import Any

import httpx
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import ZarrArchiveFile

from zarrchive.config import PublishedZarrs
from zarrchive.db.models import Version
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine.snapshots import add_pins, prepare_manifest
from zarrchive.services.zarr_engine.version_gc import ZarrGcReport, collect_zarr
from zarrchive.services.zarr_engine.zarrs import get_zarr


def oracle(files: dict[str, bytes]) -> str:
    """The Dandi Zarr checksum of *files* by the reference implementation (zarr_checksum)."""
    import hashlib
    from pathlib import Path

    return str(
        compute_zarr_checksum(
            [ZarrArchiveFile(Path(p), len(b), hashlib.md5(b).hexdigest()) for p, b in files.items()]
        )
    )


def _ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, (response.status_code, response.text)
    return response.json()


def snapshot_base(zarr_id: str, checksum: str) -> str:
    return f"/api/zarr/{zarr_id}/snapshots/{urllib.parse.quote(checksum, safe='')}/"


def walk(client: httpx.Client, base: str, page_size: int = 2) -> dict[str, dict[str, Any]]:
    """Every file of a snapshot (*base*: ``.../snapshots/{checksum}/``) or of the live Zarr
    (*base*: ``/api/zarr/{id}/``), through ``{base}files/?prefix=`` (the live Zarr:
    ``/api/zarr/{id}.zarr/{directory}/``): ``path -> listing entry``, following every page."""
    found: dict[str, dict[str, Any]] = {}
    stack = [""]
    while stack:
        directory = stack.pop()
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"page_size": page_size}
            if cursor:
                params["cursor"] = cursor
            if "/snapshots/" in base:
                params["prefix"] = directory
                url = base + "files/"
            else:  # the live Zarr: /api/zarr/{id}.zarr/{directory}/
                quoted = urllib.parse.quote(directory, safe="/~") + "/" if directory else ""
                url = base.rstrip("/") + ".zarr/" + quoted
            page = _ok(client.get(url, params=params))
            for entry in page["files"]:
                found[entry["path"]] = entry
            stack.extend(d["path"] for d in page["directories"])
            cursor = page["next"]
            if not cursor:
                break
    return found


def read_snapshot(client: httpx.Client, zarr_id: str, checksum: str) -> dict[str, bytes]:
    """The bytes of every file of a snapshot, through its download URLs (GET without any
    credentials: public, or presigned)."""
    base = snapshot_base(zarr_id, checksum)
    listed = walk(client, base)
    if not listed:
        return {}
    urls = _ok(client.post(base + "download/", json=[{"path": p} for p in sorted(listed)]))
    files: dict[str, bytes] = {}
    with httpx.Client(timeout=60) as plain:
        for item in urls:
            response = plain.get(item["url"])
            assert response.status_code == 200, (item, response.status_code)
            files[item["path"]] = response.content
            assert listed[item["path"]]["size"] == len(response.content)
    return files


def read_live(client: httpx.Client, zarr_id: str) -> dict[str, bytes]:
    """The bytes of every file of the Zarr's live (draft) state."""
    listed = walk(client, f"/api/zarr/{zarr_id}/")
    if not listed:
        return {}
    urls = _ok(
        client.post(f"/api/zarr/{zarr_id}/download/", json=[{"path": p} for p in sorted(listed)])
    )
    with httpx.Client(timeout=60) as plain:
        return {item["path"]: plain.get(item["url"]).content for item in urls}


def admin_env(settings: Any) -> dict[str, str]:
    """Environment variables that point ``zarrchive admin`` at the archive of *settings*."""
    return {
        "ZARRCHIVE_DATA_DIR": str(settings.data_dir),
        "ZARRCHIVE_DATABASE_URL": settings.database_url,
        "ZARRCHIVE_S3_ENDPOINT_URL": settings.s3_endpoint_url,
        "ZARRCHIVE_S3_BUCKET": settings.s3_bucket,
        "ZARRCHIVE_S3_EMBARGO_BUCKET": settings.s3_embargo_bucket,
        "ZARRCHIVE_S3_ACCESS_KEY_ID": settings.s3_access_key_id,
        "ZARRCHIVE_S3_SECRET_ACCESS_KEY": settings.s3_secret_access_key,
        "ZARRCHIVE_PUBLISHED_ZARRS": settings.published_zarrs.value,
    }


def gc_now(
    archive: Archive,
    zarr_id: str,
    *,
    apply: bool = False,
    abandoned_after: timedelta | None = None,
    now: datetime | None = None,
) -> ZarrGcReport:
    """``admin gc`` of one Zarr with no retention: every noncurrent version that no kept
    manifest (a pin's, the current state's) names goes, with its leftovers (what
    ``snapshots.collect_garbage`` did before :func:`collect_zarr` took its place)."""
    return collect_zarr(
        archive,
        zarr_id,
        retention=timedelta(0),
        apply=apply,
        abandoned_after=abandoned_after,
        now=now,
    )


def pin_as_published(archive: Archive, zarr_id: str) -> None:
    """Pin the Zarr's current state as a published version of its dandiset would (a
    ``snapshot``-mode pin under version ``0.000000.0000``), through the services: for
    states publishing refuses (an embargoed dandiset, metadata not valid)."""
    prepare_manifest(archive, zarr_id)
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, check_read=False)
        version = Version(dandiset_id=zarr.dandiset_id, version="0.000000.0000")
        session.add(version)
        session.flush()
        add_pins(session, version.id, [zarr], PublishedZarrs.SNAPSHOT)
