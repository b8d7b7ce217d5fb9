"""The shard index parser and the selection maths of shard reads (pure)."""

from __future__ import annotations

import itertools
import math
import struct

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.storage import MemoryStore

from zarrchive.services.views.shard_index import (
    EMPTY,
    ByteRange,
    IndexLayout,
    InvalidShard,
    coalesce,
    encode_index,
    group_by_shard,
    holder,
    parse_index,
)

LARGE = 2**40
BOOLEANS = st.booleans()


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("checksum", [True, False])
def test_the_index_of_shards_zarr_python_writes(location: str, checksum: bool) -> None:
    store = MemoryStore()
    index_codecs: list[object] = [zarr.codecs.BytesCodec()]
    if checksum:
        index_codecs.append(zarr.codecs.Crc32cCodec())
    sharding = zarr.codecs.ShardingCodec(
        chunk_shape=(4, 5),
        codecs=[zarr.codecs.BytesCodec(), ZstdCodec(level=3)],
        index_codecs=index_codecs,  # type: ignore[arg-type]
        index_location=location,
    )
    array = zarr.create_array(
        store,
        shape=(24, 30),
        chunks=(12, 15),  # the shards
        dtype="uint16",
        serializer=sharding,
        compressors=None,
        fill_value=0,
        config={"write_empty_chunks": False},
    )
    values = np.arange(24 * 30, dtype="uint16").reshape(24, 30)
    values[0:4, 0:5] = 0  # an empty inner chunk of shard (0, 0)
    values[12:24, 15:30] = 0  # a whole shard of fill: not stored
    array[:] = values
    layout = IndexLayout((3, 3), at_start=location == "start", checksum=checksum)
    shards = {k: v.to_bytes() for k, v in store._store_dict.items() if k.startswith("c/")}
    assert sorted(shards) == ["c/0/0", "c/0/1", "c/1/0"]
    for key, body in shards.items():
        index = layout.index_range(len(body))
        entries = parse_index(layout, body[index.start : index.end], len(body), 4 * 5 * 2 + 64)
        stored = [e for e in entries if e is not None]
        # every byte of the shard is the index or exactly one inner chunk
        assert sum(e.length for e in stored) + layout.nbytes == len(body)
        data = layout.data_range(len(body))
        assert sorted(stored)[0].start == data.start and max(e.end for e in stored) == data.end
        assert (entries[0] is None) == (key == "c/0/0")
        assert sum(e is None for e in entries) == (1 if key == "c/0/0" else 0)
        # re-encoded, the index is the same bytes
        assert encode_index(layout, entries) == body[index.start : index.end]


def entries_strategy(count: int, size: int) -> st.SearchStrategy[list[ByteRange | None]]:
    def entry(draw: st.DrawFn) -> ByteRange | None:
        if draw(st.booleans()):
            return None
        start = draw(st.integers(0, size - 1))
        return ByteRange(start, draw(st.integers(1, size - start)))

    return st.lists(st.composite(lambda draw: entry(draw))(), min_size=count, max_size=count)


@st.composite
def shard_cases(
    draw: st.DrawFn, checksum: st.SearchStrategy[bool] = BOOLEANS
) -> tuple[IndexLayout, list[ByteRange | None], int]:
    per = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    layout = IndexLayout(per, at_start=draw(st.booleans()), checksum=draw(checksum))
    data = draw(st.integers(1, 5000))
    entries = draw(entries_strategy(layout.count, data))
    shift = layout.nbytes if layout.at_start else 0
    entries = [None if e is None else ByteRange(e.start + shift, e.length) for e in entries]
    return layout, entries, data + layout.nbytes


@settings(deadline=None)
@given(shard_cases())
def test_a_valid_index_parses_back_to_its_entries(
    case: tuple[IndexLayout, list[ByteRange | None], int],
) -> None:
    layout, entries, size = case
    raw = encode_index(layout, entries)
    assert tuple(parse_index(layout, raw, size, LARGE)) == tuple(entries)
    longest = max((e.length for e in entries if e is not None), default=0)
    if longest > 1:
        with pytest.raises(InvalidShard, match="its declared size allows"):
            parse_index(layout, raw, size, longest - 1)
    with pytest.raises(InvalidShard, match="index is"):
        parse_index(layout, raw[:-1], size, LARGE)


@settings(deadline=None)
@given(shard_cases(checksum=st.just(True)), st.data())
def test_any_changed_byte_of_a_checksummed_index_is_refused(
    case: tuple[IndexLayout, list[ByteRange | None], int], data: st.DataObject
) -> None:
    layout, entries, size = case
    raw = bytearray(encode_index(layout, entries))
    position = data.draw(st.integers(0, len(raw) - 1))
    raw[position] ^= data.draw(st.integers(1, 255))
    with pytest.raises(InvalidShard, match="crc32c"):
        parse_index(layout, bytes(raw), size, LARGE)


@settings(deadline=None)
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.booleans(),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.data(),
)
def test_a_hostile_index_is_refused_or_names_only_bounded_ranges_in_the_shard(
    per: list[int], at_start: bool, size: int, max_chunk: int, data: st.DataObject
) -> None:
    layout = IndexLayout(tuple(per), at_start=at_start, checksum=False)
    words = st.one_of(
        st.just(EMPTY), st.integers(0, 2**64 - 1), st.integers(0, size + 10), st.just(2**63)
    )
    pairs = [(data.draw(words), data.draw(words)) for _ in range(layout.count)]
    raw = b"".join(struct.pack("<QQ", *pair) for pair in pairs)
    try:
        region = layout.data_range(size)
    except InvalidShard:
        with pytest.raises(InvalidShard):
            parse_index(layout, raw, size, max_chunk)
        return
    # the reference: each entry judged on its own, in Python's unbounded integers
    expected: list[ByteRange | None] = []
    for offset, length in pairs:
        if offset == EMPTY and length == EMPTY:
            expected.append(None)
        elif (
            offset != EMPTY
            and length != EMPTY
            and 1 <= length <= max_chunk
            and region.start <= offset
            and offset + length <= region.end
        ):
            expected.append(ByteRange(offset, length))
        else:
            with pytest.raises(InvalidShard):
                parse_index(layout, raw, size, max_chunk)
            return
    assert list(parse_index(layout, raw, size, max_chunk)) == expected


def test_hostile_entries_are_refused_by_name() -> None:
    layout = IndexLayout((2,), at_start=False, checksum=False)
    size = 1000 + layout.nbytes

    def index(*pairs: tuple[int, int]) -> bytes:
        return b"".join(struct.pack("<QQ", *p) for p in pairs)

    ok = (EMPTY, EMPTY)
    cases = {
        "outside the shard": [(990, 20), (2**64 - 2, 3), (1000, 1)],  # the last: on the index
        "its declared size allows": [(0, 2**63)],
        "half an empty marker": [(EMPTY, 5), (5, EMPTY)],
        "no bytes": [(0, 0)],
    }
    for message, pairs in cases.items():
        for pair in pairs:
            with pytest.raises(InvalidShard, match=message):
                parse_index(layout, index(ok, pair), size, 500)
    with pytest.raises(InvalidShard, match="shorter than its"):
        parse_index(layout, index(ok, ok), 10, 500)
    start = IndexLayout((2,), at_start=True, checksum=False)
    with pytest.raises(InvalidShard, match="outside the shard"):  # within the index itself
        parse_index(start, index(ok, (0, 8)), size, 500)


@pytest.mark.parametrize("per", [(1,), (5,), (2, 3), (3, 1, 4), (2, 2, 2, 2)])
def test_local_index_is_c_order_onto_every_position(per: tuple[int, ...]) -> None:
    layout = IndexLayout(per, at_start=False, checksum=False)
    positions = [layout.local_index(local) for local in itertools.product(*map(range, per))]
    assert positions == list(range(math.prod(per)))
    assert positions == [
        int(np.ravel_multi_index(local, per)) for local in itertools.product(*map(range, per))
    ]
    with pytest.raises(ValueError):
        layout.local_index(tuple(per))


@settings(deadline=None)
@given(
    st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
        lambda per: st.tuples(
            st.just(tuple(per)),
            st.lists(st.tuples(*[st.integers(0, 12) for _ in per]), min_size=0, max_size=40),
        )
    )
)
def test_inner_chunks_are_grouped_by_their_shard_each_once(
    case: tuple[tuple[int, ...], list[tuple[int, ...]]],
) -> None:
    per, chunks = case
    layout = IndexLayout(per, at_start=False, checksum=False)
    reads = group_by_shard(chunks, layout)
    assert [r.shard for r in reads] == sorted({r.shard for r in reads})
    seen = [coords for read in reads for _, coords in read.chunks]
    assert sorted(seen) == sorted(set(chunks))
    for read in reads:
        assert [p for p, _ in read.chunks] == sorted({p for p, _ in read.chunks})
        for position, coords in read.chunks:
            local = tuple(c - s * n for c, s, n in zip(coords, read.shard, per, strict=True))
            assert all(0 <= i < n for i, n in zip(local, per, strict=True))
            assert layout.local_index(local) == position


ranges = st.lists(
    st.builds(ByteRange, st.integers(0, 2000), st.integers(1, 300)), min_size=0, max_size=30
)


@settings(deadline=None)
@given(ranges, st.integers(0, 200))
def test_coalesced_reads_cover_every_range_and_little_more(
    asked: list[ByteRange], gap: int
) -> None:
    reads = coalesce(asked, gap)
    assert reads == sorted(reads)
    for before, after in itertools.pairwise(reads):
        assert after.start > before.end + gap  # no two reads could have been one
    for item in asked:
        outer = holder(reads, item)
        assert outer.start <= item.start and item.end <= outer.end
        assert item.within(outer).length == item.length
    # every byte read is within gap of a byte asked for
    covered = sorted(asked)
    for read in reads:
        inside = [a for a in covered if a.start >= read.start and a.end <= read.end]
        assert inside and inside[0].start == read.start
        assert max(a.end for a in inside) == read.end
    assert len(reads) <= len(asked)
    if gap == 0:
        asked_bytes = set().union(*(range(a.start, a.end) for a in asked)) if asked else set()
        assert sum(r.length for r in reads) == len(asked_bytes)


def test_holder_refuses_a_range_outside_the_reads() -> None:
    reads = coalesce([ByteRange(10, 5), ByteRange(40, 5)], 0)
    with pytest.raises(ValueError):
        holder(reads, ByteRange(12, 10))
    with pytest.raises(ValueError):
        holder(reads, ByteRange(0, 1))


def test_blosc_shards_too() -> None:
    store = MemoryStore()
    array = zarr.create_array(
        store, shape=(8, 8), chunks=(2, 2), shards=(4, 8), dtype="int32", compressors=BloscCodec()
    )
    array[:] = np.arange(64, dtype="int32").reshape(8, 8)
    layout = IndexLayout((2, 4), at_start=False, checksum=True)
    body = store._store_dict["c/1/0"].to_bytes()
    index = layout.index_range(len(body))
    entries = parse_index(layout, body[index.start :], len(body), 1000)
    assert all(e is not None for e in entries)
