"""DANDI's ``dandi:dandi-etag`` of a regular file: pure functions, no I/O.

A file is cut into parts (:func:`part_plan`): 64 MiB each, larger when 64 MiB would need
10,000 parts or more (then ``ceil(size / 10000)``), the last part taking the rest; a file of
one part is that one part.  The etag is the S3 multipart ETag of an upload made of exactly
these parts: ``md5(md5(part 1) + md5(part 2) + ...)-{number of parts}``, so S3 computes it
itself when the parts are assembled.  An empty file has no part: ``md5(b"")-0``.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from zarrchive.errors import InvalidDigest

MIB = 1024**2
#: The size of every part but the last, for files up to 10,000 x 64 MiB.
DEFAULT_PART_SIZE = 64 * MIB
#: S3's limits.
MIN_PART_SIZE = 5 * MIB
MAX_PART_SIZE = 5 * 1024**3
MAX_PARTS = 10_000
#: S3's largest object.
MAX_FILE_SIZE = 5 * 1024**4

_ETAG_RE = re.compile(r"([0-9a-f]{32})-([0-9]{1,5})")


@dataclass(frozen=True)
class Part:
    """Part *number* (from 1) of a file: *size* bytes from *offset*."""

    number: int
    offset: int
    size: int


@dataclass(frozen=True)
class PartPlan:
    """How a file of *file_size* bytes is cut: *count* parts of *part_size* bytes, the last
    of *last_size*."""

    file_size: int
    count: int
    part_size: int
    last_size: int

    def parts(self) -> Iterator[Part]:
        for number in range(1, self.count + 1):
            yield self.part(number)

    def part(self, number: int) -> Part:
        if not 1 <= number <= self.count:
            raise IndexError(f"part {number} of a file of {self.count} parts")
        size = self.last_size if number == self.count else self.part_size
        return Part(number, (number - 1) * self.part_size, size)


def part_plan(file_size: int) -> PartPlan:
    """DANDI's parts of a file of *file_size* bytes (``ValueError`` beyond 5 TiB)."""
    if file_size < 0 or file_size > MAX_FILE_SIZE:
        raise ValueError(f"a file must have 0 to {MAX_FILE_SIZE} bytes, not {file_size}")
    if file_size == 0:
        return PartPlan(0, 0, 0, 0)
    part_size = DEFAULT_PART_SIZE
    if math.ceil(file_size / part_size) >= MAX_PARTS:
        part_size = math.ceil(file_size / MAX_PARTS)
    count, last = divmod(file_size, part_size)
    if last == 0:
        last = part_size
    else:
        count += 1
    if count == 1:
        part_size = last
    return PartPlan(file_size, count, part_size, last)


def etag_from_part_md5s(part_md5s: Iterable[bytes]) -> str:
    """The etag of a file whose parts have these (binary, 16-byte) md5 digests."""
    digests = list(part_md5s)
    return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"


class DandiETagHasher:
    """Incremental etag of a file of known size: :meth:`update` with its bytes in order."""

    def __init__(self, file_size: int) -> None:
        self.plan = part_plan(file_size)
        self._digests: list[bytes] = []
        self._current = hashlib.md5()
        self._in_part = 0
        self._seen = 0

    def update(self, data: bytes) -> None:
        view = memoryview(data)
        if self._seen + len(view) > self.plan.file_size:
            raise ValueError(f"more than the announced {self.plan.file_size} bytes")
        self._seen += len(view)
        while view:
            part_size = self.plan.part(len(self._digests) + 1).size
            taken = view[: part_size - self._in_part]
            self._current.update(taken)
            self._in_part += len(taken)
            view = view[len(taken) :]
            if self._in_part == part_size:
                self._digests.append(self._current.digest())
                self._current = hashlib.md5()
                self._in_part = 0

    def hexdigest(self) -> str:
        if self._seen != self.plan.file_size:
            raise ValueError(f"{self._seen} of the announced {self.plan.file_size} bytes seen")
        return etag_from_part_md5s(self._digests)


def dandi_etag(data: bytes) -> str:
    """The etag of *data*."""
    hasher = DandiETagHasher(len(data))
    hasher.update(data)
    return hasher.hexdigest()


def single_part_etag(md5_hex: str) -> str:
    """The etag of a non-empty file of one part (up to 64 MiB), from its md5."""
    return etag_from_part_md5s([bytes.fromhex(md5_hex)])


def is_dandi_etag(value: object) -> bool:
    return isinstance(value, str) and _ETAG_RE.fullmatch(value) is not None


def validate_dandi_etag(value: object, file_size: int | None = None) -> str:
    """*value* if it is a dandi-etag (``{32 hex}-{parts}``), with the part count DANDI's rule
    gives for *file_size* when given; else :class:`InvalidDigest`."""
    if not isinstance(value, str) or (match := _ETAG_RE.fullmatch(value)) is None:
        raise InvalidDigest(
            f"{value!r} is not a dandi-etag: 32 lowercase hex characters, '-', the part count"
        )
    if file_size is not None:
        try:
            count = part_plan(file_size).count
        except ValueError as exc:
            raise InvalidDigest(str(exc)) from None
        if int(match.group(2)) != count:
            raise InvalidDigest(
                f"a file of {file_size} bytes has {count} parts, so its dandi-etag ends "
                f"with '-{count}', not '-{match.group(2)}'"
            )
    return value
