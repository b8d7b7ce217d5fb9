"""How the pages name a codec: its name and settings as a person reads them, from the codec's
JSON configuration (pure), e.g. ``zstd (level 0)`` or
``sharding (inner chunks 16 × 16: bytes (endian little), zstd (level 0, checksum false))``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Nested codec lists described at most this deep (a sharding codec's chain is one level).
MAX_DEPTH = 3


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple) and all(isinstance(v, int) for v in value):
        return " × ".join(str(v) for v in value)
    return str(value)


def _as_config(codec: Any) -> Mapping[str, Any] | None:
    """A codec's JSON configuration (zarr-python leaves a sharding codec's inner chain as
    codec objects in ``to_dict()``)."""
    if isinstance(codec, Mapping):
        return codec
    to_dict = getattr(codec, "to_dict", None)
    config = to_dict() if callable(to_dict) else None
    return config if isinstance(config, Mapping) else None


def describe(config: Mapping[str, Any], depth: int = 0) -> str:
    """The codec of this configuration (Zarr v2's ``{"id": ..., ...}`` or Zarr v3's
    ``{"name": ..., "configuration": {...}}``) in words."""
    name = config.get("name", config.get("id", "?"))
    if "configuration" in config:
        settings = config.get("configuration")
    else:
        settings = {k: v for k, v in config.items() if k not in ("id", "name")}
    if not isinstance(settings, Mapping):
        settings = {}
    if name == "sharding_indexed" and depth < MAX_DEPTH:
        inner = settings.get("chunk_shape")
        chain = settings.get("codecs")
        codecs = ", ".join(
            describe(c, depth + 1)
            for c in map(_as_config, chain if isinstance(chain, list | tuple) else ())
            if c is not None
        )
        shape = f"inner chunks {_value(inner)}" if inner is not None else "inner chunks"
        return f"sharding ({shape}: {codecs})" if codecs else f"sharding ({shape})"
    parts = [f"{key} {_value(value)}" for key, value in settings.items() if value is not None]
    return f"{name} ({', '.join(parts)})" if parts else str(name)
