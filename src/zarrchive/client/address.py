"""Addresses of a Zarr at a published version: ``DANDISET@VERSION/PATH``, and the archive's
own address as users give it (pure).

``000001@0.261124.1530/data/brain.zarr`` names the Zarr asset ``data/brain.zarr`` of
version ``0.261124.1530`` of dandiset ``000001``: the state that version pins.
``000001@draft/PATH`` is the draft's (live) Zarr at PATH, the same as ``000001/PATH``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from zarrchive.errors import InvalidInput

DRAFT = "draft"
_DANDISET = re.compile(r"^[0-9]{6}$")
_VERSION = re.compile(r"^(draft|[0-9]+\.[0-9]{6}\.[0-9]{4})$")


@dataclass(frozen=True)
class VersionedAddress:
    dandiset: str
    version: str
    path: str

    @property
    def is_draft(self) -> bool:
        return self.version == DRAFT

    def __str__(self) -> str:
        return f"{self.dandiset}@{self.version}/{self.path}"


def is_versioned_address(ref: str) -> bool:
    """True if *ref* has the ``DANDISET@VERSION/...`` form (valid or not): an ``@`` before
    the first ``/`` (a URL or a Zarr id never has one there)."""
    head = ref.strip().split("/", 1)[0]
    return "@" in head and "://" not in ref


def parse_address(ref: str) -> VersionedAddress:
    """Parse ``DANDISET@VERSION/PATH``; anything else is :class:`InvalidInput` saying why."""
    text = ref.strip()
    head, sep, path = text.partition("/")
    dandiset, at, version = head.partition("@")
    path = path.strip("/")
    if not at or not sep or not path:
        raise InvalidInput(
            f"{ref!r} is not DANDISET@VERSION/PATH (e.g. 000001@0.261124.1530/data.zarr)"
        )
    if not _DANDISET.match(dandiset):
        raise InvalidInput(f"{ref!r}: {dandiset!r} is not a dandiset identifier (six digits)")
    if not _VERSION.match(version):
        raise InvalidInput(f"{ref!r}: {version!r} is not a version ('draft' or 0.YYMMDD.HHMM)")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise InvalidInput(f"{ref!r}: {path!r} is not a valid asset path")
    return VersionedAddress(dandiset, version, path)


def archive_root(url: str) -> str:
    """The archive's root URL from what a user gives as ``ZARRCHIVE_URL``/``--api-url``:
    ``https://host``, ``https://host/`` or the API's own ``https://host/api`` (as DANDI's
    server info names it) are all ``https://host``; a URL that is not http(s) is
    :class:`InvalidInput`."""
    text = url.strip()
    if not text.startswith(("http://", "https://")):
        raise InvalidInput(f"the archive URL {url!r} must start with http:// or https://")
    text = text.rstrip("/")
    if text.endswith("/api"):
        text = text.removesuffix("/api")
    return text
