"""A tiny real HTTP server that answers every GET with one canned JSON document: an
archive that lies (for testing what the client does with what it is told)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.helpers.static_server import serving


@contextmanager
def serving_json(document: dict[str, Any]) -> Iterator[str]:
    """Serve *document* to every GET on 127.0.0.1; yields the base URL."""
    with serving(json.dumps(document).encode(), "application/json") as url:
        yield url
