"""``zarrchive worker``: consume background jobs from Redis."""

from __future__ import annotations
