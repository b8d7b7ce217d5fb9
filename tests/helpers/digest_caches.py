"""The digest cache tests' clock: the walk's clock (``hashing.clock_ns``) set :data:`LATER`
ahead makes the files just written look settled (``settled`` in tests/client/conftest.py)."""

from __future__ import annotations

#: How far ahead the walk's clock runs (ns): past the settling time of any file just written.
LATER = 10 * 1_000_000_000

__all__ = ["LATER"]
