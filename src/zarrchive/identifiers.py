"""PURE: the archive's record ids (Zarrs, assets) as canonical UUID text."""

from __future__ import annotations

import uuid


def canonical_uuid(text: str) -> str | None:
    """The canonical form of a UUID in ASCII hex, or ``None`` (``uuid.UUID`` also takes
    Unicode digits such as ``\u0663`` for ``3``, which would give one record several ids)."""
    try:
        return str(uuid.UUID(text)) if text.isascii() else None
    except (ValueError, AttributeError, TypeError):
        return None
