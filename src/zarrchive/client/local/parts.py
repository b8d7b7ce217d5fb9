"""The md5s of a big file's parts, computed in the same read as the whole file's md5.

A file above the archive's multipart threshold is sent in parts, each PUT signing its
part's ``Content-MD5``; the batch that sends it declares the whole file's md5.  Reading the
file once for each would cost a second pass over every big file before it is sent, so the
walk's hashing (:mod:`zarrchive.client.local.hashing`) cuts a file above :data:`PART_HASH_MIN` into
the parts the archive will ask for (:func:`expected_part_size`) while it computes the whole
md5 (:class:`OnePassHasher`), and keeps the parts' md5s here (:func:`remember`), keyed by the
file's stat record.  :class:`~zarrchive.client.multipart.PartSender` takes them
(:func:`recall`) if the file is unchanged since (same device, inode, size, mtime and ctime)
and the archive's part size is the one expected; otherwise it hashes the parts itself.

Bounded memory: at most :data:`MAX_REMEMBERED_PARTS` md5s are kept (oldest files forgotten
first): a forgotten file costs its second read, nothing else.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections import OrderedDict
from typing import NamedTuple

from zarrchive.client.local.digest_cache import StatKey, stat_key

MIB = 1 << 20
#: The archive's part size for files that fit in :data:`MAX_PARTS` parts of it, whatever its
#: multipart threshold at or above it (the default threshold is this size).
DEFAULT_PART_SIZE = 64 * MIB
#: S3's most parts of an upload.
MAX_PARTS = 10_000
#: Files above this size have their parts hashed in the walk's read.  An archive whose
#: threshold is lower cuts files between the two in smaller parts: those are hashed again.
PART_HASH_MIN = DEFAULT_PART_SIZE
#: The most part md5s remembered, over all files (about 100 bytes each).
MAX_REMEMBERED_PARTS = 200_000


def expected_part_size(size: int) -> int:
    """The part size the archive gives a file of *size* bytes when its multipart threshold
    is at least :data:`DEFAULT_PART_SIZE` (``services.uploads.parts.part_size_for``)."""
    needed = math.ceil(math.ceil(size / MAX_PARTS) / MIB) * MIB
    return max(DEFAULT_PART_SIZE, needed)


class OnePassHasher:
    """The md5 of a stream and the md5s of its consecutive parts of *part_size* bytes (the
    last one shorter; an empty stream has one empty part), from one pass over its bytes.

    Feed it with :meth:`update` (any block sizes), then :meth:`finish`."""

    __slots__ = ("_part", "_whole", "done", "in_part", "part_size", "parts")

    def __init__(self, part_size: int) -> None:
        if part_size < 1:
            raise ValueError("part_size must be positive")
        self.part_size = part_size
        self._whole = hashlib.md5(usedforsecurity=False)
        self._part = hashlib.md5(usedforsecurity=False)
        self.parts: list[str] = []
        self.done = 0
        self.in_part = 0

    def update(self, block: bytes | bytearray | memoryview) -> None:
        self._whole.update(block)
        self.done += len(block)
        self._split(block)

    def _split(self, block: bytes | bytearray | memoryview) -> None:
        view = memoryview(block)
        size = self.part_size
        while len(view):
            room = size - self.in_part
            if len(view) < room:
                self._part.update(view)
                self.in_part += len(view)
                return
            self._part.update(view[:room])
            self.parts.append(self._part.hexdigest())
            self._part = hashlib.md5(usedforsecurity=False)
            self.in_part = 0
            view = view[room:]

    def finish(self) -> tuple[str, list[str]]:
        """``(whole md5, [part md5s])``."""
        parts = list(self.parts)
        if self.in_part or not parts:
            parts.append(self._part.hexdigest())
        return self._whole.hexdigest(), parts


class _Remembered(NamedTuple):
    part_size: int
    md5s: tuple[str, ...]


_lock = threading.Lock()
_remembered: OrderedDict[StatKey, _Remembered] = OrderedDict()
_count = [0]


def remember(st: os.stat_result, part_size: int, md5s: list[str]) -> None:
    """Keep the part md5s of the file whose stat record (taken before and unchanged after
    the read) is *st*."""
    key = stat_key(st)
    with _lock:
        old = _remembered.pop(key, None)
        if old is not None:
            _count[0] -= len(old.md5s)
        if len(md5s) > MAX_REMEMBERED_PARTS:
            return
        _remembered[key] = _Remembered(part_size, tuple(md5s))
        _count[0] += len(md5s)
        while _count[0] > MAX_REMEMBERED_PARTS:
            _, dropped = _remembered.popitem(last=False)
            _count[0] -= len(dropped.md5s)


def recall(os_path: str, size: int, part_size: int) -> tuple[str, ...] | None:
    """The part md5s of the file *os_path* cut in *part_size* parts, if they were computed
    while it had its current stat record and *size* bytes; else None."""
    try:
        key = stat_key(os.stat(os_path))
    except OSError:
        return None
    if key.size != size:
        return None
    with _lock:
        found = _remembered.get(key)
    if found is None or found.part_size != part_size:
        return None
    return found.md5s


_uploading = threading.Event()


def start_uploading() -> None:
    """From now on, the walks of this process hash big files' parts with them (what
    :class:`~zarrchive.client.multipart.PartSender` does when it is made: an upload's walk
    then reads each big file once).  Walks not feeding an upload pay a second md5 over big
    files' bytes (not a second read); they pass ``part_md5s=False`` to avoid it."""
    _uploading.set()


def uploading() -> bool:
    """Whether walks hash big files' parts by default (:func:`start_uploading`)."""
    return _uploading.is_set()


def forget_all() -> None:
    """Drop every remembered md5 (tests)."""
    with _lock:
        _remembered.clear()
        _count[0] = 0


__all__ = [
    "DEFAULT_PART_SIZE",
    "MAX_PARTS",
    "PART_HASH_MIN",
    "OnePassHasher",
    "expected_part_size",
    "forget_all",
    "recall",
    "remember",
    "start_uploading",
    "uploading",
]
