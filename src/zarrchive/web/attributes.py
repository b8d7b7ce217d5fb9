"""Uploader-controlled attributes as indented JSON, within a size bound.

``json.dumps(indent=2)`` of 200 KB of deeply nested lists is 161 MB: every line is indented
by its depth.  The text is built piece by piece by the standard library's encoder and
stopped as soon as it passes :data:`MAX_RENDERED_CHARS`, whatever the nesting; the page then
links to the raw document instead of the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The most characters of attributes a page shows.
MAX_RENDERED_CHARS = 64 * 1024


@dataclass(frozen=True)
class RenderedAttributes:
    text: str
    #: The text stops before the end of the attributes (see the raw document).
    truncated: bool


def render_attributes(
    attributes: Mapping[str, Any], limit: int = MAX_RENDERED_CHARS
) -> RenderedAttributes:
    """*attributes* as ``json.dumps(indent=2, sort_keys=True)`` would write them, or its first
    *limit* characters when it is longer."""
    encoder = json.JSONEncoder(indent=2, sort_keys=True, default=str)
    pieces: list[str] = []
    length = 0
    try:
        for piece in encoder.iterencode(attributes):
            pieces.append(piece)
            length += len(piece)
            if length > limit:
                return RenderedAttributes("".join(pieces)[:limit], truncated=True)
    except (RecursionError, ValueError):  # nested deeper than the encoder goes; a cycle
        return RenderedAttributes("".join(pieces)[:limit], truncated=True)
    return RenderedAttributes("".join(pieces), truncated=False)
