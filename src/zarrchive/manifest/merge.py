"""Merging a manifest's entries with recorded changes, and diffing two manifests (pure).

Both work on streams sorted by path in S3 key order (Python's ``str`` order is code-point
order, which is UTF-8 byte order, which is the order S3 lists keys in): one pass, like a
sorted-merge join, memory bounded whatever the number of entries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from zarrchive.errors import InvalidManifest
from zarrchive.manifest.model import ManifestEntry, format_timestamp


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
