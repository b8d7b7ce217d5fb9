"""``zarrchive checksum``."""

from __future__ import annotations


def checksum() -> None:
    """Compute the Dandi Zarr checksum of a local directory."""
    raise NotImplementedError
