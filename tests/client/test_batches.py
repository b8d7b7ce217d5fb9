"""How the sync engine cuts files into batches (pure): by count and by bytes, in order."""

from __future__ import annotations

from zarrchive.checksum import ZarrEntry
from zarrchive.client.upload.pipeline import Batcher


def _entries(*sizes: int) -> list[ZarrEntry]:
    return [ZarrEntry(f"f{i}", size, "0" * 32) for i, size in enumerate(sizes)]


def _names(batches: list[list[ZarrEntry]]) -> list[list[str]]:
    return [[e.path for e in batch] for batch in batches]


def test_batches_hold_at_most_files_and_bytes_in_order() -> None:
    entries = _entries(10, 10, 10, 60, 10, 200, 5, 5)
    assert _names(list(Batcher(entries, 3, 100))) == [
        ["f0", "f1", "f2"],
        ["f3", "f4"],
        ["f5"],  # larger than the byte limit: alone
        ["f6", "f7"],
    ]
    assert list(Batcher([], 3, 100)) == []


def test_the_file_limit_can_be_lowered_between_batches() -> None:
    batcher = Batcher(_entries(*[1] * 9), 4, 100)
    assert _names([batcher.next()]) == [["f0", "f1", "f2", "f3"]]
    batcher.files = 2
    assert _names(list(batcher)) == [["f4", "f5"], ["f6", "f7"], ["f8"]]
    assert batcher.next() == []


def test_given_the_total_the_last_batches_shrink() -> None:
    # 3001 files in batches of 500: a quarter and a half of one first (the apply starts
    # sooner), full ones, then half of what is left each time, down to TAIL_FILES (64): the
    # apply the uploader waits for at the end is of few files
    sizes = [len(b) for b in Batcher(_entries(*[1] * 3001), 500, 10**9, total=3001)]
    assert sizes == [125, 250, 500, 500, 500, 500, 313, 157, 156]
    assert sum(sizes) == 3001
    # not more than four full batches: no smaller first ones
    sizes = [len(b) for b in Batcher(_entries(*[1] * 2000), 500, 10**9, total=2000)]
    assert sizes == [500, 500, 500, 250, 125, 125]
    # a total within one batch: still split (its apply is the whole wait)
    assert [len(b) for b in Batcher(_entries(*[1] * 500), 500, 10**9, total=500)] == [
        250,
        125,
        125,
    ]
    # few files: one batch
    assert [len(b) for b in Batcher(_entries(*[1] * 200), 500, 10**9, total=200)] == [200]
    # the byte limit still holds in the tail
    tail = Batcher(_entries(*[40] * 10), 8, 100, total=10)
    assert [len(b) for b in tail] == [2, 2, 2, 2, 2]


def test_the_first_batches_never_pass_the_limit() -> None:
    # a limit under TAIL_FILES (an archive's max_batch_files of 40, say): the first batches
    # are not raised to TAIL_FILES above it (the archive would refuse them: BatchTooLarge)
    sizes = [len(b) for b in Batcher(_entries(*[1] * 1000), 40, 10**9, total=1000)]
    assert max(sizes) == 40 and sum(sizes) == 1000
    assert sizes[:3] == [40, 40, 40]
