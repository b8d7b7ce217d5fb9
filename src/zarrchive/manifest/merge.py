"""Merging a manifest's entries with recorded changes, and diffing two manifests (pure).

Both work on streams sorted by path in S3 key order (Python's ``str`` order is code-point
order, which is UTF-8 byte order, which is the order S3 lists keys in): one pass, like a
sorted-merge join, memory bounded whatever the number of entries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.encoder import encode_basestring_ascii
from typing import IO

from zarrchive.errors import InvalidManifest
from zarrchive.manifest.model import FIELDS, ManifestEntry, format_timestamp, parse_timestamp
from zarrchive.manifest.reader import read_manifest, read_streamed_header
from zarrchive.manifest.writer import (
    GeneratedManifest,
    ManifestWriter,
    generate_manifest,
    render_header,
)


@dataclass(frozen=True, slots=True)
class ManifestChange:
    """The final effect of the recorded changes on one path: its new entry (written), or
    ``None`` (deleted; a deletion of a path the manifest lacks changes nothing)."""

    path: str
    entry: ManifestEntry | None


def _sorted(items: Iterable[ManifestEntry], what: str) -> Iterator[ManifestEntry]:
    previous: str | None = None
    for item in items:
        if previous is not None and item.path <= previous:
            raise InvalidManifest(
                f"{what}: {item.path!r} comes after {previous!r}: entries must be sorted by "
                "path (S3 key order), each path once"
            )
        previous = item.path
        yield item


def _sorted_changes(changes: Iterable[ManifestChange]) -> Iterator[ManifestChange]:
    previous: str | None = None
    for change in changes:
        if previous is not None and change.path <= previous:
            raise InvalidManifest(
                f"changes: {change.path!r} comes after {previous!r}: changes must be sorted "
                "by path, each path once"
            )
        if change.entry is not None and change.entry.path != change.path:
            raise InvalidManifest(f"change of {change.path!r} carries {change.entry.path!r}")
        previous = change.path
        yield change


def merge_changes(
    base: Iterable[ManifestEntry], changes: Iterable[ManifestChange]
) -> Iterator[ManifestEntry]:
    """The entries of *base* with *changes* applied, sorted by path.

    A written path replaces (or adds) its entry, a deleted one drops it.  Both inputs must
    be sorted by path, each path once (else :class:`~zarrchive.errors.InvalidManifest`).
    """
    entries = _sorted(base, "manifest")
    pending = _sorted_changes(changes)
    entry = next(entries, None)
    change = next(pending, None)
    while entry is not None or change is not None:
        if change is None or (entry is not None and entry.path < change.path):
            assert entry is not None
            yield entry
            entry = next(entries, None)
            continue
        if entry is not None and entry.path == change.path:
            entry = next(entries, None)
        if change.entry is not None:
            yield change.entry
        change = next(pending, None)


#: An entry line as :class:`~zarrchive.manifest.writer.ManifestWriter` renders it: the
#: quoted name, the quoted version id, the timestamp (UTC, to the second), size, ETag.
_ENTRY_LINE = re.compile(
    r' *("[^"\\]*(?:\\.[^"\\]*)*"): \[("[^"\\]*"),"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\+00:00",'
    r'(0|[1-9][0-9]*),"([^"\\]*)"\],?\s*\Z'
)
#: A directory opening (``"name": {``), or an empty one (``"name": {}``).
_DIRECTORY_LINE = re.compile(r' *("[^"\\]*(?:\\.[^"\\]*)*"): \{(\})?,?\s*\Z')
_CLOSING_LINE = re.compile(r" *\},?\s*\Z")


def _unquote(quoted: str) -> str:
    if "\\" not in quoted:
        return quoted[1:-1]
    value, _end = scanstring(quoted, 1)
    return str(value)


def merge_manifest(
    base: IO[bytes],
    changes: Iterable[ManifestChange],
    body: IO[bytes],
    *,
    database_checksum: str | None = None,
) -> GeneratedManifest:
    """:func:`generate_manifest` of :func:`merge_changes` of the manifest file *base*
    (read as a stream) and *changes*: the same bytes, several times faster.

    The lines of a file this archive wrote are reused as they are (their path, size, ETag
    and timestamp read off the line: no JSON decoding, no datetime, no re-rendering):
    only changed entries are rendered.  The tree hash and statistics are computed over
    every entry as :func:`generate_manifest` does.  A line not in the writer's layout is
    decoded and rendered again; a file not in the streaming layout at all is merged
    through :func:`merge_changes`.  Memory is bounded by the depth and the widest
    directory, whatever the number of entries.
    """
    header = read_streamed_header(base)
    if header is not None and header[2]:  # an empty base
        return generate_manifest(
            merge_changes((), changes), body, database_checksum=database_checksum
        )
    if header is None or header[0] != FIELDS:
        if not base.seekable():
            raise InvalidManifest(
                "the base manifest is not in the archive's streaming layout (fields in order, "
                "one entry a line): merge it with merge_changes(read_manifest(...).entries)"
            )
        base.seek(0)
        entries = read_manifest(base, verify=False).entries
        return generate_manifest(
            merge_changes(entries, changes), body, database_checksum=database_checksum
        )
    writer = ManifestWriter(body, database_checksum=database_checksum)
    pending = _sorted_changes(changes)
    change = next(pending, None)
    parts: list[str] = []
    directory = ""
    prefix = ""
    previous = ""
    add = writer.add
    add_rendered = writer.add_rendered
    entry_line = _ENTRY_LINE.match
    #: the entries of *directory* read since the last change or directory line
    run: list[tuple[str, str, int, str, str]] = []
    for raw in base:
        line = raw.decode("utf-8")
        # the common line, split at its quotes: indent, name, ': [', version, ',', time,
        # ',size,', ETag, '],'; anything else (escapes, other spacing) goes to the regex
        pieces = line.split('"')
        if (
            len(pieces) == 9
            and pieces[2] == ": ["
            and pieces[4] == ","
            and len(pieces[5]) == 25
            and pieces[5][10] == "T"
            and pieces[5].endswith("+00:00")
            and pieces[6][:1] == ","
            and pieces[6][-1:] == ","
            and pieces[6][1:-1].isdigit()
            and (pieces[6][1] != "0" or len(pieces[6]) == 3)
            and pieces[8].rstrip() in ("]", "],")
            and line.isascii()
            and "\\" not in line
            and not pieces[0].strip(" ")
        ):
            name, etag, stamp, size = pieces[1], pieces[7], pieces[5][:19], pieces[6][1:-1]
            rendered = line[len(pieces[0]) : len(line) - len(pieces[8]) + 1]
            matched = None
        else:
            matched = entry_line(line) if line.isascii() else None
            if matched is None:
                name = ""
            else:
                quoted, _version, stamp, size, etag = matched.groups()
                end = matched.end(5) + 2
                if "\\" in quoted:  # rendered as the writer escapes it
                    name = _unquote(quoted)
                    rendered = encode_basestring_ascii(name) + line[matched.end(1) : end]
                else:
                    name = quoted[1:-1]
                    rendered = line[matched.start(1) : end]
        if name:
            path = prefix + name
            if path <= previous:
                _unsorted(path, previous)
            previous = path
            if change is None or change.path > path:
                run.append((name, rendered, int(size), etag, stamp))
                continue
            add_rendered(directory, run)
            run = []
            change = _apply_changes_to(path, change, pending, add)
            if change is not None and change.path == path:
                if change.entry is not None:
                    add(change.entry)
                change = next(pending, None)
            else:
                run.append((name, rendered, int(size), etag, stamp))
            continue
        add_rendered(directory, run)
        run = []
        opened = _DIRECTORY_LINE.match(line)
        if opened is not None:
            if opened.group(2) is None:  # an opening (an empty one lists nothing)
                parts.append(_unquote(opened.group(1)))
                directory = "/".join(parts)
                prefix = directory + "/"
            continue
        if _CLOSING_LINE.match(line):
            if not parts:
                break  # the end of the entries
            parts.pop()
            directory = "/".join(parts)
            prefix = directory + "/" if parts else ""
            continue
        entry = _odd_line(line, prefix)  # valid JSON in another layout: rendered again
        if entry.path <= previous:
            _unsorted(entry.path, previous)
        previous = entry.path
        change = _apply_changes_to(entry.path, change, pending, add)
        if change is not None and change.path == entry.path:
            if change.entry is not None:
                add(change.entry)
            change = next(pending, None)
        else:
            add(entry)
    else:
        raise InvalidManifest("the manifest ends inside its entries: the file is truncated")
    while change is not None:
        if change.entry is not None:
            add(change.entry)
        change = next(pending, None)
    statistics = writer.finish()
    return GeneratedManifest(statistics, render_header(statistics), body, writer.body_size)


def _apply_changes_to(
    path: str,
    change: ManifestChange | None,
    pending: Iterator[ManifestChange],
    add: Callable[[ManifestEntry], None],
) -> ManifestChange | None:
    """Add the written entries of the changes before *path*; the first change not before."""
    while change is not None and change.path < path:
        if change.entry is not None:
            add(change.entry)
        change = next(pending, None)
    return change


def _unsorted(path: str, previous: str) -> None:
    raise InvalidManifest(
        f"manifest: {path!r} comes after {previous!r}: entries must be sorted by path (S3 key "
        "order), each path once"
    )


def _odd_line(line: str, prefix: str) -> ManifestEntry:
    """An entry line in another layout than the writer's (e.g. other spacing or escapes)."""
    text = line.strip().rstrip(",")
    try:
        document = json.loads("{" + text + "}")
    except ValueError as exc:
        raise InvalidManifest(f"unexpected line in the manifest's entries: {text[:80]!r}") from exc
    if not isinstance(document, dict) or len(document) != 1:
        raise InvalidManifest(f"unexpected line in the manifest's entries: {text[:80]!r}")
    ((name, value),) = document.items()
    if (
        not isinstance(value, list)
        or len(value) != len(FIELDS)
        or not isinstance(value[0], str)
        or not isinstance(value[3], str)
        or not isinstance(value[2], int)
        or isinstance(value[2], bool)
        or value[2] < 0
    ):
        raise InvalidManifest(f"{prefix + name!r}: bad entry {text[:80]!r}")
    return ManifestEntry(
        prefix + name, value[0], parse_timestamp(value[1], repr(prefix + name)), value[2], value[3]
    )


class DifferenceKind(StrEnum):
    #: in the manifest, not current in S3
    MISSING = "missing"
    #: current in S3, not in the manifest
    EXTRA = "extra"
    #: in both, with another version, ETag, size or last-modified second
    DIFFERENT = "different"


@dataclass(frozen=True, slots=True)
class ManifestDifference:
    path: str
    kind: DifferenceKind
    #: the manifest's entry (``None`` when extra)
    expected: ManifestEntry | None
    #: what S3 holds (``None`` when missing)
    actual: ManifestEntry | None

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the fields that differ (for ``different``)."""
        if self.expected is None or self.actual is None:
            return ()
        return tuple(
            name
            for name, differs in (
                ("versionId", self.expected.version_id != self.actual.version_id),
                ("lastModified", _second(self.expected) != _second(self.actual)),
                ("size", self.expected.size != self.actual.size),
                ("ETag", self.expected.etag.strip('"') != self.actual.etag.strip('"')),
            )
            if differs
        )

    def describe(self) -> str:
        if self.kind is DifferenceKind.DIFFERENT:
            assert self.expected is not None and self.actual is not None
            parts = []
            for name in self.fields:
                want, got = _field(self.expected, name), _field(self.actual, name)
                parts.append(f"{name} {want} in the manifest, {got} in S3")
            return f"{self.path}: different: " + "; ".join(parts)
        if self.kind is DifferenceKind.MISSING:
            return f"{self.path}: missing from S3 (the manifest names it)"
        return f"{self.path}: extra in S3 (the manifest lacks it)"


def _second(entry: ManifestEntry) -> str:
    return format_timestamp(entry.last_modified)


def _field(entry: ManifestEntry, name: str) -> str:
    if name == "versionId":
        return entry.version_id
    if name == "lastModified":
        return _second(entry)
    if name == "size":
        return str(entry.size)
    return entry.etag.strip('"')


def diff_manifests(
    expected: Iterable[ManifestEntry], actual: Iterable[ManifestEntry]
) -> Iterator[ManifestDifference]:
    """Every difference between a manifest's entries (*expected*) and S3's (*actual*), by
    path; both sorted by path.  Times are compared to the second (what a manifest keeps)."""
    left = _sorted(expected, "manifest")
    right = _sorted(actual, "listing")
    a = next(left, None)
    b = next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a.path < b.path):
            assert a is not None
            yield ManifestDifference(a.path, DifferenceKind.MISSING, a, None)
            a = next(left, None)
        elif a is None or b.path < a.path:
            yield ManifestDifference(b.path, DifferenceKind.EXTRA, None, b)
            b = next(right, None)
        else:
            difference = ManifestDifference(a.path, DifferenceKind.DIFFERENT, a, b)
            if difference.fields:
                yield difference
            a = next(left, None)
            b = next(right, None)
