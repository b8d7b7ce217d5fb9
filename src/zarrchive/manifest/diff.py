"""What brings a Zarr from one manifest's state to another's (pure): the changes of a restore.

Both manifests' entries are streams sorted by path (S3 key order, as manifests list them):
one pass, a sorted-merge join, memory bounded whatever the number of entries.  A change is a
:class:`~zarrchive.manifest.merge.ManifestChange`: the path's entry in the target (to be
copied into place from that very version), or ``None`` (the path is deleted).  So
``merge_changes(current, restore_changes(current, target))`` is ``target``, entry for entry.

Only differences are changes: a path whose current entry already holds the target's content
(the same version, or the same md5 and size: a version written again with the same bytes)
is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from zarrchive.checksum import is_md5
from zarrchive.errors import InvalidManifest
from zarrchive.manifest.merge import ManifestChange
from zarrchive.manifest.model import ManifestEntry


def same_content(current: ManifestEntry, target: ManifestEntry) -> bool:
    """Whether *current* holds *target*'s bytes: the same version of the path, or the same
    size and the same md5 (an ETag that is not an md5, of an object assembled from parts,
    proves nothing)."""
    if current.version_id == target.version_id:
        return True
    return current.size == target.size and current.etag == target.etag and is_md5(target.etag)


def _checked(entries: Iterable[ManifestEntry], what: str) -> Iterator[ManifestEntry]:
    previous: str | None = None
    for entry in entries:
        if previous is not None and entry.path <= previous:
            raise InvalidManifest(
                f"{what}: {entry.path!r} comes after {previous!r}: entries must be sorted by "
                "path (S3 key order), each path once"
            )
        previous = entry.path
        yield entry


def restore_changes(
    current: Iterable[ManifestEntry], target: Iterable[ManifestEntry]
) -> Iterator[ManifestChange]:
    """The changes that make the entries *current* into *target*, sorted by path: a path
    only in *current* is deleted, a path of *target* absent from *current* or holding other
    content is written with *target*'s entry.  Both inputs sorted by path, each path once
    (else :class:`~zarrchive.errors.InvalidManifest`)."""
    left = _checked(current, "current manifest")
    right = _checked(target, "target manifest")
    a = next(left, None)
    b = next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a.path < b.path):
            assert a is not None
            yield ManifestChange(a.path, None)
            a = next(left, None)
        elif a is None or b.path < a.path:
            yield ManifestChange(b.path, b)
            b = next(right, None)
        else:
            if not same_content(a, b):
                yield ManifestChange(b.path, b)
            a = next(left, None)
            b = next(right, None)
