"""DANDI metadata that dandischema finds valid (what a publishable draft needs), and waiting
for the archive's background validation."""

from __future__ import annotations

from typing import Any

import httpx

from tests.helpers.jobs import HeldJobQueue

SCHEMA_VERSION = "0.8.0"


def dandiset_metadata(name: str = "A valid dandiset", **changes: Any) -> dict[str, Any]:
    """Complete dandiset metadata: description, license, a contact person."""
    metadata: dict[str, Any] = {
        "schemaKey": "Dandiset",
        "schemaVersion": SCHEMA_VERSION,
        "name": name,
        "description": "Recordings of a mouse, for the archive's tests.",
        "license": ["spdx:CC-BY-4.0"],
        "keywords": ["mouse", "electrophysiology"],
        "contributor": [
            {
                "schemaKey": "Person",
                "name": "Doe, Jane",
                "email": "jane.doe@example.org",
                "roleName": ["dcite:ContactPerson", "dcite:Author"],
                "includeInCitation": True,
            }
        ],
    }
    metadata.update(changes)
    return metadata


def asset_metadata(
    path: str, encoding: str = "application/x-nwb", **changes: Any
) -> dict[str, Any]:
    """An asset's own metadata (what dandi-cli sends; the archive fills in the rest)."""
    metadata: dict[str, Any] = {
        "schemaKey": "Asset",
        "schemaVersion": SCHEMA_VERSION,
        "path": path,
        "encodingFormat": encoding,
    }
    metadata.update(changes)
    return metadata


def info(api: httpx.Client, dandiset: str, version: str = "draft") -> dict[str, Any]:
    response = api.get(f"/api/dandisets/{dandiset}/versions/{version}/info/")
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def validate_now(api: httpx.Client, held: HeldJobQueue, dandiset: str) -> dict[str, Any]:
    """Run the queued background jobs (sha256s, validations) and answer the draft's info."""
    for _ in range(5):  # a job may queue another (a blob's sha256: its drafts' validation)
        if not held.run():
            break
    return info(api, dandiset)
