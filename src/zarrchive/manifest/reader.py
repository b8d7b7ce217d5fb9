"""Reading manifest files: statistics first, then the entries as a stream.

Files in the archive's layout (ours and the proof of concept's: one entry per
line, or any ``json.dump(..., indent=N)`` output) are read line by line, so
memory stays bounded by the depth, whatever the number of entries.  Any other
valid JSON document (e.g. compact, or with ``entries`` before ``statistics``)
is parsed whole, in memory.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import IO, Any

from zarrchive.checksum import TreeHasher
from zarrchive.errors import InvalidManifest, ZarrchiveError
from zarrchive.manifest.model import (
    FIELDS,
    ManifestEntry,
    ManifestStatistics,
    parse_timestamp,
)
from zarrchive.manifest.writer import chunk_stream


@dataclass
class ParsedManifest:
    """A manifest being read: its header, and its entries as a one-shot iterator.

    With verification on (the default), exhausting :attr:`entries` raises
    :class:`~zarrchive.errors.InvalidManifest` when the entries disagree with
    the statistics (count, depth, total size, newest timestamp, checksum).
    """

    schema_version: int | None
    fields: tuple[str, ...]
    statistics: ManifestStatistics
    entries: Iterator[ManifestEntry]


def read_manifest(source: IO[bytes] | bytes, *, verify: bool = True) -> ParsedManifest:
    """Parse a manifest file from a binary file object (read sequentially) or bytes."""
    stream: IO[bytes] = io.BytesIO(source) if isinstance(source, bytes) else source
    consumed, header, value = _streamed_header(stream)
    if header is None:
        return _parse_whole(consumed, stream, verify)
    schema_version, fields, statistics = header
    if value == b"{":
        raw: Iterator[ManifestEntry] = _stream_entries(stream, _field_indices(fields), len(fields))
    else:
        raw = _trailer(stream, value.endswith(b","))
    entries = _verified(raw, statistics) if verify else raw
    return ParsedManifest(schema_version, fields, statistics, entries)


def read_streamed_header(
    stream: IO[bytes],
) -> tuple[tuple[str, ...], ManifestStatistics, bool] | None:
    """The fields and statistics of a manifest in the archive's streaming layout, and
    whether its entries object is empty, leaving *stream* at the first line of the entries
    (each entry or directory on a line of its own); ``None`` when it is not such a file
    (read it with :func:`read_manifest` from its start)."""
    _consumed, header, value = _streamed_header(stream)
    if header is None:
        return None
    return header[1], header[2], value != b"{"


def _streamed_header(
    stream: IO[bytes],
) -> tuple[list[bytes], tuple[int | None, tuple[str, ...], ManifestStatistics] | None, bytes]:
    """Read the header of a file in the streaming layout: the lines read, the header
    (``None``: not that layout; parse the lines read and the rest whole) and the value
    that opens the entries (``{``, or an empty object)."""
    consumed: list[bytes] = []
    first = stream.readline()
    consumed.append(first)
    if first.strip() != b"{":
        return consumed, None, b""
    # header: every line up to the one that opens the top-level "entries" object
    while True:
        line = stream.readline()
        consumed.append(line)
        if not line:
            return consumed, None, b""
        stripped = line.strip()
        if stripped.startswith(b'"entries":'):
            value = stripped[len(b'"entries":') :].strip()
            if value in (b"{", b"{}", b"{},"):
                break  # (statistics.entries is a number)
    try:
        header = json.loads(b"".join(consumed[:-1]).decode("utf-8") + '"entries": {}}')
    except (ValueError, UnicodeDecodeError):
        return consumed, None, b""
    if not isinstance(header, dict) or "fields" not in header or "statistics" not in header:
        # e.g. "statistics" after "entries": not the streaming layout
        return consumed, None, b""
    return consumed, _parse_header(header), value


def iter_manifest_entries(
    source: IO[bytes] | bytes, *, verify: bool = True
) -> Iterator[ManifestEntry]:
    """Just the entries of a manifest file."""
    return read_manifest(source, verify=verify).entries


def stream_manifest_entries(chunks: Iterator[bytes]) -> Iterator[ManifestEntry]:
    """The entries of a stored manifest read as a stream of byte chunks (a streamed GET:
    one chunk in memory at a time), unverified (its checksum was checked when it was
    written); *chunks* is closed when the entries are, or end."""
    try:
        yield from read_manifest(chunk_stream(chunks), verify=False).entries
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


# -- header ----------------------------------------------------------------------
def _parse_header(doc: object) -> tuple[int | None, tuple[str, ...], ManifestStatistics]:
    if not isinstance(doc, dict):
        raise InvalidManifest("a manifest must be a JSON object")
    for key in ("fields", "statistics", "entries"):
        if key not in doc:
            raise InvalidManifest(f'the manifest has no "{key}" key')
    schema_version = doc.get("schemaVersion")
    if schema_version is not None and (
        not isinstance(schema_version, int) or isinstance(schema_version, bool)
    ):
        raise InvalidManifest(f'"schemaVersion" must be an integer, got {schema_version!r}')
    fields = doc["fields"]
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise InvalidManifest(f'"fields" must be a list of strings, got {fields!r}')
    missing = [f for f in FIELDS if f not in fields]
    if missing or len(set(fields)) != len(fields):
        raise InvalidManifest(
            f'"fields" is {fields!r}: it must name each of {list(FIELDS)} once '
            "(this reader needs all four)"
        )
    stats = doc["statistics"]
    if not isinstance(stats, dict):
        raise InvalidManifest('"statistics" must be an object')

    def integer(name: str) -> int:
        value = stats.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidManifest(
                f'"statistics.{name}" must be a non-negative integer, got {value!r}'
            )
        return value

    checksum = stats.get("zarrChecksum")
    if not isinstance(checksum, str):
        raise InvalidManifest(f'"statistics.zarrChecksum" must be a string, got {checksum!r}')
    last = stats.get("lastModified")
    mismatch = stats.get("zarrChecksumMismatch")
    if mismatch is not None and not isinstance(mismatch, str):
        raise InvalidManifest(
            f'"statistics.zarrChecksumMismatch" must be a string or null, got {mismatch!r}'
        )
    statistics = ManifestStatistics(
        entries=integer("entries"),
        depth=integer("depth"),
        total_size=integer("totalSize"),
        last_modified=None if last is None else parse_timestamp(last, '"statistics.lastModified"'),
        zarr_checksum=checksum,
        zarr_checksum_mismatch=mismatch,
        has_mismatch_field="zarrChecksumMismatch" in stats,
    )
    return schema_version, tuple(fields), statistics


def _field_indices(fields: tuple[str, ...]) -> tuple[int, int, int, int]:
    return (
        fields.index("versionId"),
        fields.index("lastModified"),
        fields.index("size"),
        fields.index("ETag"),
    )


def _entry(
    path: str, value: object, indices: tuple[int, int, int, int], width: int
) -> ManifestEntry:
    if not isinstance(value, list) or len(value) != width:
        raise InvalidManifest(
            f"{path!r}: an entry must be an array of {width} fields, got {value!r}"
        )
    version_id, last_modified, size, etag = (value[i] for i in indices)
    if not isinstance(version_id, str) or not isinstance(etag, str):
        raise InvalidManifest(f"{path!r}: versionId and ETag must be strings, got {value!r}")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidManifest(f"{path!r}: size must be a non-negative integer, got {size!r}")
    return ManifestEntry(path, version_id, parse_timestamp(last_modified, repr(path)), size, etag)


def _check_name(name: str, parts: list[str]) -> None:
    if not name or "/" in name or name in (".", ".."):
        where = "/".join([*parts, name])
        raise InvalidManifest(f"{where!r}: {name!r} is not a valid entry or directory name")


# -- line-by-line entries --------------------------------------------------------
def _stream_entries(
    stream: IO[bytes], indices: tuple[int, int, int, int], width: int
) -> Iterator[ManifestEntry]:
    parts: list[str] = []
    prefix = ""
    for raw in stream:
        line = raw.decode("utf-8").strip()
        if line in ("}", "},"):
            if not parts:
                yield from _trailer(stream, line == "},")
                return
            parts.pop()
            prefix = "".join(p + "/" for p in parts)
            continue
        if not line.startswith('"'):
            raise InvalidManifest(f"unexpected line in the manifest's entries: {line[:80]!r}")
        try:
            name, end = scanstring(line, 1)
        except ValueError as exc:
            raise InvalidManifest(f"bad key in the manifest's entries: {line[:80]!r}") from exc
        _check_name(name, parts)
        rest = line[end:].lstrip()
        if not rest.startswith(":"):
            raise InvalidManifest(f"expected ':' after the key in {line[:80]!r}")
        value = rest[1:].strip()
        if value.endswith(","):
            value = value[:-1].rstrip()
        if value == "{":
            parts.append(name)
            prefix += name + "/"
            continue
        if value == "{}":
            continue  # an empty directory lists nothing
        if value == "[":  # an array over several lines (json.dump with indent)
            pieces = ["["]
            for more in stream:
                text = more.decode("utf-8").strip()
                if text.startswith("]"):
                    pieces.append("]")
                    break
                pieces.append(text)
            value = "".join(pieces)
        try:
            array = json.loads(value)
        except ValueError as exc:
            raise InvalidManifest(f"{prefix + name!r}: bad entry {value[:80]!r}: {exc}") from exc
        yield _entry(prefix + name, array, indices, width)
    raise InvalidManifest("the manifest ends inside its entries: the file is truncated")


def _trailer(stream: IO[bytes], more_keys: bool) -> Iterator[ManifestEntry]:
    """Check what follows the entries object: more keys, then the closing brace."""
    rest = stream.read().decode("utf-8")
    try:
        json.loads("{" + rest if more_keys else '{"entries":{}' + rest)
    except ValueError as exc:
        raise InvalidManifest(f"the manifest does not end as a JSON object should: {exc}") from exc
    yield from ()


# -- whole-document fallback -----------------------------------------------------
def _parse_whole(consumed: list[bytes], stream: IO[bytes], verify: bool) -> ParsedManifest:
    data = b"".join(consumed) + stream.read()
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidManifest(f"the manifest is not valid JSON: {exc}") from exc
    schema_version, fields, statistics = _parse_header(doc)
    tree = doc["entries"]
    if not isinstance(tree, dict):
        raise InvalidManifest('"entries" must be an object')
    raw = _walk(tree, [], _field_indices(fields), len(fields))
    return ParsedManifest(
        schema_version, fields, statistics, _verified(raw, statistics) if verify else raw
    )


def _walk(
    tree: dict[str, Any], parts: list[str], indices: tuple[int, int, int, int], width: int
) -> Iterator[ManifestEntry]:
    for name, value in tree.items():
        _check_name(name, parts)
        if isinstance(value, dict):
            yield from _walk(value, [*parts, name], indices, width)
        else:
            yield _entry("/".join([*parts, name]), value, indices, width)


# -- verification ----------------------------------------------------------------
def _verified(
    entries: Iterable[ManifestEntry], statistics: ManifestStatistics
) -> Iterator[ManifestEntry]:
    hasher = TreeHasher()
    count = total = depth = 0
    newest: datetime | None = None
    for entry in entries:
        etag = entry.etag.strip('"')
        try:
            hasher.add(entry.path, entry.size, etag)
        except ZarrchiveError as exc:
            raise InvalidManifest(f"manifest entry {entry.path!r}: {exc.message}") from exc
        count += 1
        total += entry.size
        depth = max(depth, entry.path.count("/"))
        if newest is None or entry.last_modified > newest:
            newest = entry.last_modified
        yield entry
    checksum = hasher.finish().digest
    found = {
        "entries": (count, statistics.entries),
        "depth": (depth, statistics.depth),
        "totalSize": (total, statistics.total_size),
        "lastModified": (newest, statistics.last_modified),
        "zarrChecksum": (checksum, statistics.zarr_checksum),
    }
    wrong = [
        f"{key} says {said!r} but the entries give {got!r}"
        for key, (got, said) in found.items()
        if got != said
    ]
    if wrong:
        raise InvalidManifest(
            "the manifest's statistics disagree with its entries: "
            + "; ".join(wrong)
            + ". Regenerate the manifest from the Zarr's listing"
        )
