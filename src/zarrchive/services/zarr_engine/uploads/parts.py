"""PURE: how a big file of a Zarr batch is cut into S3 multipart parts, and the checks of what
a client says about them.

The rule is DANDI's blobs' (at most :data:`MAX_PARTS` parts, objects up to
:data:`MAX_OBJECT_SIZE`), with a part size of at least the smaller of the archive's multipart
threshold and :data:`DEFAULT_PART_SIZE` (never below S3's 5 MiB minimum), grown (in whole MiB)
until the file fits in :data:`MAX_PARTS` parts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from zarrchive.errors import InvalidInput

MIB = 1024**2
#: S3's limits: the smallest part (all but the last), the most parts, the largest object.
MIN_PART_SIZE = 5 * MIB
MAX_PARTS = 10_000
MAX_OBJECT_SIZE = 5 * 1024**4
#: The largest part S3 takes.
MAX_PART_SIZE = 5 * 1024**3
#: The part size of files that fit in MAX_PARTS of it.
DEFAULT_PART_SIZE = 64 * MIB
#: Part URLs answered by one request (a client asks for more in later requests).
MAX_PARTS_PER_REQUEST = 1000


def part_size_for(size: int, threshold: int) -> int:
    """The part size of a file of *size* bytes (0 <= size <= MAX_OBJECT_SIZE)."""
    if not 0 <= size <= MAX_OBJECT_SIZE:
        raise InvalidInput(f"size must be between 0 and {MAX_OBJECT_SIZE} bytes (5 TiB)")
    base = max(MIN_PART_SIZE, min(threshold, DEFAULT_PART_SIZE))
    needed = math.ceil(math.ceil(size / MAX_PARTS) / MIB) * MIB
    return max(base, needed)


def part_count(size: int, part_size: int) -> int:
    """How many parts a file of *size* bytes has (an empty file: one empty part)."""
    return max(1, math.ceil(size / part_size))


def part_length(size: int, part_size: int, number: int) -> int:
    """The length of part *number* (1-based) of a file of *size* bytes."""
    count = part_count(size, part_size)
    if not 1 <= number <= count:
        raise InvalidInput(f"part {number} is not between 1 and {count}")
    return min(part_size, size - (number - 1) * part_size)


def check_part_numbers(path: str, numbers: Iterable[int], count: int) -> list[int]:
    """The part numbers a client asks URLs for: each in 1..*count*, none twice, at most
    :data:`MAX_PARTS_PER_REQUEST` (sorted); else :class:`InvalidInput` saying which."""
    asked = list(numbers)
    if not asked:
        raise InvalidInput(f"{path!r}: ask for at least one part")
    if len(asked) > MAX_PARTS_PER_REQUEST:
        raise InvalidInput(
            f"{path!r}: {len(asked)} parts asked at once; at most {MAX_PARTS_PER_REQUEST} "
            "per request (ask for the rest in further requests)"
        )
    bad = sorted({n for n in asked if not 1 <= n <= count})
    if bad:
        raise InvalidInput(
            f"{path!r} has parts 1 to {count}: no part {', '.join(map(str, bad[:10]))}"
        )
    if len(set(asked)) != len(asked):
        raise InvalidInput(f"{path!r}: a part number is asked more than once")
    return sorted(asked)


def missing_or_wrong_parts(
    size: int, part_size: int, found: dict[int, int]
) -> tuple[list[int], list[int]]:
    """Given the parts S3 holds (``number -> length``), the parts missing and those of the
    wrong length (a file's parts must all be there, each exactly as long as the rule says,
    before it can be assembled)."""
    count = part_count(size, part_size)
    missing = [n for n in range(1, count + 1) if n not in found]
    wrong = sorted(
        n for n, length in found.items() if n > count or length != part_length(size, part_size, n)
    )
    return missing, wrong
