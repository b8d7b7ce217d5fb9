"""How the sync engine cuts files into batches (pure): by count and by bytes, in order."""

from __future__ import annotations

from zarrchive.checksum import ZarrEntry
from zarrchive.client.upload import _Batcher


def _entries(*sizes: int) -> list[ZarrEntry]:
    return [ZarrEntry(f"f{i}", size, "0" * 32) for i, size in enumerate(sizes)]


def _names(batches: list[list[ZarrEntry]]) -> list[list[str]]:
    return [[e.path for e in batch] for batch in batches]


def test_batches_hold_at_most_files_and_bytes_in_order() -> None:
    entries = _entries(10, 10, 10, 60, 10, 200, 5, 5)
    assert _names(list(_Batcher(entries, 3, 100))) == [
        ["f0", "f1", "f2"],
        ["f3", "f4"],
        ["f5"],  # larger than the byte limit: alone
        ["f6", "f7"],
    ]
    assert list(_Batcher([], 3, 100)) == []


def test_the_file_limit_can_be_lowered_between_batches() -> None:
    batcher = _Batcher(_entries(*[1] * 9), 4, 100)
    assert _names([batcher.next()]) == [["f0", "f1", "f2", "f3"]]
    batcher.files = 2
    assert _names(list(batcher)) == [["f4", "f5"], ["f6", "f7"], ["f8"]]
    assert batcher.next() == []
