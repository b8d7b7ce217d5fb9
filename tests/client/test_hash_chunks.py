"""How the walk's runs are cut into hashing chunks (pure), and that ramping the chunks up for
an upload changes when entries come, never which."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from zarrchive.client.local.hashing import _chunks, iter_local_entries

Run = tuple[str, str, list[str]]

runs_strategy = st.lists(st.integers(min_value=0, max_value=40), min_size=0, max_size=12).map(
    lambda sizes: [
        (f"d{i}/", f"/x/d{i}/", [f"f{j}" for j in range(n)]) for i, n in enumerate(sizes)
    ]
)


def _flat(chunks: list[tuple[list[Run], int]]) -> list[tuple[str, str]]:
    return [(prefix, name) for chunk, _ in chunks for prefix, _, names in chunk for name in names]


@given(runs_strategy, st.integers(min_value=1, max_value=50))
def test_whole_runs_in_chunks_of_at_least_the_limit(runs: list[Run], limit: int) -> None:
    chunks = list(_chunks(iter(runs), limit))
    assert _flat(chunks) == [(p, n) for p, _, names in runs for n in names]
    assert [run for chunk, _ in chunks for run in chunk] == runs  # no run is cut
    for chunk, count in chunks:
        assert count == sum(len(names) for _, _, names in chunk)
    for _, count in chunks[:-1]:
        assert count >= limit
    for chunk, count in chunks[:-1]:  # the last run of a chunk is the one that reached it
        assert count - len(chunk[-1][2]) < limit


@given(
    runs_strategy, st.integers(min_value=1, max_value=50), st.integers(min_value=1, max_value=60)
)
def test_ramped_chunks_double_from_the_first_up_to_the_limit(
    runs: list[Run], limit: int, first: int
) -> None:
    chunks = list(_chunks(iter(runs), limit, first))
    assert _flat(chunks) == [(p, n) for p, _, names in runs for n in names]
    target = min(first, limit)
    for chunk, count in chunks[:-1]:
        assert count == sum(len(names) for _, _, names in chunk)
        if target < limit:
            assert count == target  # cut at the chunk's size, runs split where needed
        else:
            assert count >= limit
        target = min(2 * target, limit)
    # an empty run is kept (in order), files of one run stay in order across chunks
    assert [r[0] for chunk, _ in chunks for r in chunk if not r[2]] == [
        r[0] for r in runs if not r[2]
    ]


def test_the_examples() -> None:
    runs: list[Run] = [("a/", "/a/", ["1", "2", "3", "4", "5"]), ("b/", "/b/", ["6", "7"])]
    ramped = [(c, [(p, names) for p, _, names in chunk]) for chunk, c in _chunks(iter(runs), 4, 1)]
    assert ramped == [
        (1, [("a/", ["1"])]),
        (2, [("a/", ["2", "3"])]),
        (4, [("a/", ["4", "5"]), ("b/", ["6", "7"])]),
    ]
    whole = [(c, [p for p, _, _ in chunk]) for chunk, c in _chunks(iter(runs), 4)]
    assert whole == [(5, ["a/"]), (2, ["b/"])]


def test_an_upload_ramp_gives_the_same_entries(tmp_path: Path) -> None:
    root = tmp_path / "z.zarr"
    (root / "flat").mkdir(parents=True)
    for i in range(300):  # one directory of many files: split by the ramp
        (root / "flat" / f"{i}").write_bytes(str(i).encode() * (i % 7))
    (root / "zarr.json").write_bytes(b"{}")
    (root / "empty").mkdir()
    plain = list(iter_local_entries(root, jobs=2))
    assert len(plain) == 301
    assert list(iter_local_entries(root, jobs=2, first_chunk=4)) == plain
    assert list(iter_local_entries(root, jobs=2, first_chunk=1, part_md5s=True)) == plain
