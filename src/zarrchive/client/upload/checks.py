"""What an upload refuses before anything is sent: files S3 can't hold, a directory that is
not a Zarr, a filter without ``--patch``.  Also the S3 import's rules (the same limits)."""

from __future__ import annotations

import os
from collections.abc import Iterable

from zarrchive.checksum import ZarrEntry
from zarrchive.client.local import walk_local
from zarrchive.errors import InvalidInput, LocalFileError

#: S3's largest object (5 TiB): bigger files are refused before anything is sent; files
#: above the archive's multipart threshold go up in parts.
MAX_FILE_BYTES = 5 * 1024**4
#: The files at a Zarr's root that say it is one: Zarr v2's group and array metadata, v3's.
ZARR_METADATA_FILES = (".zgroup", ".zarray", "zarr.json")


def require_patch_for_filter(filtered: bool, patch: bool, *, source: bool = False) -> None:
    """Refuse (:class:`InvalidInput`) a filter (``--include``/``--exclude``: *filtered*)
    without *patch*: a full upload deletes what is not here, so a filter would delete
    everything outside it.  *source*: the upload is of an S3 source, not a directory."""
    if filtered and not patch:
        where, absent = ("the source", "there") if source else ("this directory", "here")
        raise InvalidInput(
            "--include/--exclude need --patch: without it, upload makes the archive's Zarr "
            f"equal to {where} and deletes every file that is not {absent}, so a filter "
            "would delete everything outside it. Add --patch (it sends the new and changed "
            "files the filter selects and deletes nothing)"
        )


def require_zarr_root(root: str, files: int) -> None:
    """Refuse (:class:`InvalidInput`) a directory that is not a Zarr: one holding no file
    (*files* is how many it holds), or without Zarr metadata at its root
    (:data:`ZARR_METADATA_FILES`).  What ``zarrchive upload`` checks unless ``--force``."""
    if files == 0:
        raise InvalidInput(
            f"{root!r} is empty: there is nothing to upload (pass --force to upload it anyway, "
            "which leaves the archive's Zarr empty too)"
        )
    if not any(os.path.isfile(os.path.join(root, name)) for name in ZARR_METADATA_FILES):
        raise InvalidInput(
            f"{root!r} is not a Zarr: it has no Zarr metadata (.zgroup, .zarray or zarr.json) "
            "at its root; upload the Zarr's own directory, or pass --force to upload this one "
            "anyway"
        )


def refuse_too_big(entries: Iterable[ZarrEntry]) -> None:
    """Refuse the *entries* larger than :data:`MAX_FILE_BYTES`, if any."""
    refuse_sizes([(e.path, e.size) for e in entries if e.size > MAX_FILE_BYTES])


def refuse_sizes(too_big: list[tuple[str, int]]) -> None:
    """Refuse (:class:`InvalidInput`) the files *too_big* ``(path, size)`` (in path order), if
    any: larger than S3's largest object."""
    if too_big:
        listed = ", ".join(f"{p} ({n} bytes)" for p, n in too_big[:5])
        raise InvalidInput(
            f"{len(too_big)} file(s) larger than 5 TiB, the largest object S3 can hold: {listed}"
        )


def scan_local(root: str) -> tuple[int, int]:
    """Files and bytes below *root*, checked before anything is hashed or sent.

    Raises at once (not after hours of hashing) for what the archive would refuse:
    bad names, symbolic link loops, unreadable entries, files over 5 TiB.  (With a digest
    cache, :meth:`~zarrchive.client.upload.Uploader.upload` checks the same by the first half
    of its walk, :func:`~zarrchive.client.local.tree.survey_tree`.)
    """
    count = nbytes = 0
    too_big: list[tuple[str, int]] = []
    for found in walk_local(root):
        try:
            size = os.stat(found.os_path).st_size
        except OSError as exc:
            raise LocalFileError(f"cannot access {found.os_path!r}: {exc.strerror}") from None
        count += 1
        nbytes += size
        if size > MAX_FILE_BYTES:
            too_big.append((found.path, size))
    refuse_sizes(too_big)
    return count, nbytes


__all__ = [
    "MAX_FILE_BYTES",
    "ZARR_METADATA_FILES",
    "refuse_sizes",
    "refuse_too_big",
    "require_patch_for_filter",
    "require_zarr_root",
    "scan_local",
]
