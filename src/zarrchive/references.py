"""fsspec reference files (the kerchunk ``version: 1`` format) of a Zarr's state (pure).

A reference file names every file of a Zarr: small metadata documents inline, every other
file by the URL of its object. ``fsspec.filesystem("reference", fo=URL)`` then serves the
Zarr to zarr-python with no listing and no zarrchive code::

    {"version": 1,
     "templates": {"u": "https://s3.example/bucket/zarr/ID/"},
     "refs": {".zgroup": "{\\"zarr_format\\": 2}",
              "arr/0.0": ["{{u}}arr/0.0?versionId=3HL4kqtJ"]}}

URLs that begin with the template's value are written with ``{{u}}`` (fsspec expands it;
a million entries then cost their paths, not a million copies of the base URL). fsspec's
"simple templates" expand with ``str.format``, so a URL given here must have no ``{`` or
``}`` of its own: the archive's URLs are percent-encoded.

The writer streams: memory stays bounded whatever the number of entries.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

#: The names of the documents a Zarr reader opens first (Zarr v2 and v3).
METADATA_NAMES = frozenset({".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"})
#: Metadata documents up to this size are written inline; larger ones are referenced.
MAX_INLINE_BYTES = 64 * 1024
#: The name of the one template.
TEMPLATE = "u"


def is_metadata(path: str) -> bool:
    """Whether *path* names a Zarr metadata document (written inline when small)."""
    return path.rpartition("/")[2] in METADATA_NAMES


def should_inline(path: str, size: int) -> bool:
    """Whether the file *path* of *size* bytes goes inline in a reference file."""
    return is_metadata(path) and size <= MAX_INLINE_BYTES


@dataclass(frozen=True, slots=True)
class Reference:
    """One file of a reference file: its *content* inline, or the *url* of its object."""

    path: str
    url: str | None = None
    content: bytes | None = None

    def __post_init__(self) -> None:
        if (self.url is None) == (self.content is None):
            raise ValueError("a reference has either a URL or inline content")
        if self.url is not None and ("{" in self.url or "}" in self.url):
            raise ValueError(f"a referenced URL must be percent-encoded: {self.url!r}")


def inline_value(content: bytes) -> str:
    """How fsspec wants inline content: the text when it is UTF-8 (and not mistakable for
    base64), else ``base64:`` and the bytes in base64."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(content).decode("ascii")
    if text.startswith("base64:"):
        return "base64:" + base64.b64encode(content).decode("ascii")
    return text


def write_reference_file(references: Iterable[Reference], sink: IO[bytes], base_url: str) -> int:
    """Write a reference file of *references* to *sink*; the number of files written.

    *base_url* is the template ``u``: every URL that begins with it is written as
    ``{{u}}`` and the rest. Paths must be unique (the caller's listing guarantees it).
    """
    if "{" in base_url or "}" in base_url:
        raise ValueError(f"the base URL must be percent-encoded: {base_url!r}")
    sink.write(b'{"version": 1, "templates": ')
    sink.write(json.dumps({TEMPLATE: base_url}).encode("utf-8"))
    sink.write(b', "refs": {')
    count = 0
    marker = "{{" + TEMPLATE + "}}"
    for reference in references:
        if reference.content is not None:
            value: str | list[str] = inline_value(reference.content)
        else:
            assert reference.url is not None
            url = reference.url
            if base_url and url.startswith(base_url):
                url = marker + url[len(base_url) :]
            value = [url]
        sink.write(b"\n" if count == 0 else b",\n")
        sink.write(json.dumps(reference.path).encode("utf-8"))
        sink.write(b": ")
        sink.write(json.dumps(value).encode("utf-8"))
        count += 1
    sink.write(b"\n}}\n")
    return count
