"""The headers a client sends with a PUT to one of the archive's presigned URLs.

Every URL signs ``Content-MD5``; those of the archive's own flows (Zarr batch targets, a
blob's single PUT) also sign ``Content-Type`` (:mod:`zarrchive.content_types`), which the
client must then send exactly: the type of the key the URL names.  DANDI's routes sign none
(dandi-cli sends its own, or none)."""

from __future__ import annotations

import base64
import hashlib
import urllib.parse

from zarrchive.content_types import zarr_content_type


def signed_headers(url: str) -> list[str]:
    """The headers *url* signs (``X-Amz-SignedHeaders``), lowercase."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    return ";".join(query.get("X-Amz-SignedHeaders", [])).split(";")


def signed_content_type(url: str) -> str | None:
    """The ``Content-Type`` *url* signs (the archive's type of its key), or None."""
    if "content-type" not in signed_headers(url):
        return None
    return zarr_content_type(urllib.parse.unquote(urllib.parse.urlsplit(url).path))


def put_headers(url: str, body: bytes) -> dict[str, str]:
    """What a client sends with a PUT of *body* to *url*: its ``Content-MD5``, and the
    ``Content-Type`` the URL signs, if it signs one."""
    headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode("ascii")}
    content_type = signed_content_type(url)
    if content_type is not None:
        headers["Content-Type"] = content_type
    return headers
