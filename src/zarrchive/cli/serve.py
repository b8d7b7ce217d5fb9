"""``zarrchive serve``: start the archive."""

from __future__ import annotations


def serve() -> None:
    """Start the archive."""
    raise NotImplementedError
