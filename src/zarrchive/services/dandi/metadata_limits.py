"""PURE: bounds on the Zarr metadata an array or group page reads, checked on the raw
document before zarr-python parses it (zarr-python takes seconds over an array declaring
100,000 dimensions, and a thumbnail of it longer).

An array beyond these bounds is still listed as files; its page says why its metadata is not
shown.  The values shown are cut to a length a page can hold.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

#: The most dimensions an array may declare for its page to show its metadata.
MAX_DIMENSIONS = 32
#: The most codecs (v2 filters and compressor; v3 codecs, counting those inside shards).
MAX_CODECS = 16
#: The longest text shown for one metadata value (a codec, a fill value, a dimension name).
MAX_VALUE_CHARS = 200

V2_ARRAY, V2_GROUP, V2_ATTRS, V3_META = ".zarray", ".zgroup", ".zattrs", "zarr.json"


def short(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """``str(value)``, cut to *limit* characters (marked with an ellipsis)."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def _codec_count(codecs: Any) -> int:
    if not isinstance(codecs, list):
        return 0
    total = len(codecs)
    for codec in codecs:
        configuration = codec.get("configuration") if isinstance(codec, dict) else None
        if isinstance(configuration, dict):
            total += _codec_count(configuration.get("codecs"))
            total += _codec_count(configuration.get("index_codecs"))
    return total


def refusal(documents: Mapping[str, bytes]) -> str | None:
    """Why the array these metadata documents describe is beyond the bounds (``None``: it
    is not, or they are not array metadata: zarr-python judges that)."""
    for name in (V3_META, V2_ARRAY):
        body = documents.get(name)
        if body is None:
            continue
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(document, dict):
            return None
        grid = document.get("chunk_grid")
        configuration = grid.get("configuration") if isinstance(grid, dict) else None
        chunk_shape = configuration.get("chunk_shape") if isinstance(configuration, dict) else None
        dimensions = max(
            _length(document.get("shape")),
            _length(document.get("chunks")),
            _length(chunk_shape),
            _length(document.get("dimension_names")),
        )
        if dimensions > MAX_DIMENSIONS:
            return f"the array declares {dimensions} dimensions; at most {MAX_DIMENSIONS} are read"
        if name == V2_ARRAY:  # the filters and the compressor
            codecs = _length(document.get("filters")) + 1
        else:
            codecs = _codec_count(document.get("codecs"))
        if codecs > MAX_CODECS:
            return f"the array declares {codecs} codecs; at most {MAX_CODECS} are read"
        return None
    return None
