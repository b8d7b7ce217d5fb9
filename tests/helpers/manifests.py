"""Reading the manifest the archive stored for a Zarr state."""

from __future__ import annotations

import json
from typing import Any

from zarrchive.manifest import manifest_key
from zarrchive.services.runtime import Archive


def stored_manifest(archive: Archive, zarr_id: str, checksum: str) -> dict[str, Any]:
    data = archive.store.get(manifest_key(zarr_id, checksum))
    assert data is not None, "no manifest"
    parsed: dict[str, Any] = json.loads(data)
    return parsed
