"""``dandi:dandi-etag``: our pure implementation against its definition and against
dandischema's (the reference, in the dandi venv)."""

from __future__ import annotations

import hashlib
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers.dandi import run_json

from zarrchive.checksum.dandi_etag import (
    DEFAULT_PART_SIZE,
    MAX_FILE_SIZE,
    MAX_PARTS,
    MIB,
    DandiETagHasher,
    dandi_etag,
    etag_from_part_md5s,
    part_plan,
    single_part_etag,
    validate_dandi_etag,
)
from zarrchive.errors import InvalidDigest

sizes = st.one_of(
    st.integers(0, 3 * DEFAULT_PART_SIZE),
    st.integers(0, MAX_FILE_SIZE),
    st.sampled_from(
        [
            1,
            DEFAULT_PART_SIZE - 1,
            DEFAULT_PART_SIZE,
            DEFAULT_PART_SIZE + 1,
            MAX_PARTS * DEFAULT_PART_SIZE - 1,
            MAX_PARTS * DEFAULT_PART_SIZE,
            MAX_PARTS * DEFAULT_PART_SIZE + 1,
            MAX_FILE_SIZE,
        ]
    ),
)


@given(sizes)
def test_parts_tile_the_file_within_s3_limits(size: int) -> None:
    plan = part_plan(size)
    parts = list(plan.parts())
    assert len(parts) == plan.count <= MAX_PARTS
    assert sum(p.size for p in parts) == size
    offset = 0
    for number, part in enumerate(parts, start=1):
        assert (part.number, part.offset) == (number, offset)
        offset += part.size
        assert 0 < part.size <= 5 * 1024**3
        if number < plan.count:
            assert part.size == plan.part_size >= 5 * MIB
    if size and size <= DEFAULT_PART_SIZE:
        assert plan.count == 1
    if 0 < size < MAX_PARTS * DEFAULT_PART_SIZE:
        assert plan.count == math.ceil(size / DEFAULT_PART_SIZE)


@given(st.binary(max_size=4096), st.lists(st.integers(1, 700), max_size=20))
def test_incremental_hash_ignores_how_bytes_arrive(data: bytes, cuts: list[int]) -> None:
    hasher = DandiETagHasher(len(data))
    start = 0
    for cut in cuts:
        hasher.update(data[start : start + cut])
        start = min(len(data), start + cut)
    hasher.update(data[start:])
    assert hasher.hexdigest() == dandi_etag(data)


@given(st.binary(min_size=1, max_size=2048))
def test_one_part_is_md5_of_md5(data: bytes) -> None:
    md5 = hashlib.md5(data).digest()
    expected = hashlib.md5(md5).hexdigest() + "-1"
    assert dandi_etag(data) == expected == single_part_etag(md5.hex())
    assert validate_dandi_etag(expected, len(data)) == expected


def test_empty_file_and_two_parts() -> None:
    assert dandi_etag(b"") == hashlib.md5(b"").hexdigest() + "-0"
    rng = random.Random(7)
    data = rng.randbytes(DEFAULT_PART_SIZE + 1000)
    parts = [data[:DEFAULT_PART_SIZE], data[DEFAULT_PART_SIZE:]]
    expected = etag_from_part_md5s(hashlib.md5(p).digest() for p in parts)
    assert dandi_etag(data) == expected
    assert expected.endswith("-2")


def test_malformed_and_mismatched_etags_are_refused() -> None:
    for bad in ("", "x" * 32 + "-1", "A" * 32 + "-1", "a" * 32, "a" * 32 + "-123456", 5):
        with pytest.raises(InvalidDigest):
            validate_dandi_etag(bad)
    with pytest.raises(InvalidDigest, match="has 2 parts"):
        validate_dandi_etag("a" * 32 + "-1", DEFAULT_PART_SIZE + 1)
    with pytest.raises(ValueError):
        part_plan(MAX_FILE_SIZE + 1)
    with pytest.raises(ValueError):
        DandiETagHasher(3).update(b"four")


REFERENCE = """
import json, sys
from dandischema.digests.dandietag import DandiETag, PartGenerator
sizes = json.loads(sys.argv[1])
plans = []
for size in sizes:
    g = PartGenerator.for_file_size(size)
    plans.append([g.part_qty, g.initial_part_size, g.final_part_size])
etags = []
for seed, size in json.loads(sys.argv[2]):
    import random
    data = random.Random(seed).randbytes(size)
    tag = DandiETag(len(data))
    for part in tag.get_parts():
        tag.update(data[part.offset : part.offset + part.size])
    etags.append(tag.as_str())
print(json.dumps({"plans": plans, "etags": etags}))
"""


@settings(max_examples=1, deadline=None)
@given(st.lists(sizes, min_size=200, max_size=200, unique=True))
def test_matches_dandischema(random_sizes: list[int]) -> None:
    """Part plans of many sizes and etags of real data (several parts included) equal
    dandischema's: one run of the reference for them all."""
    edges = [
        0,
        1,
        DEFAULT_PART_SIZE - 1,
        DEFAULT_PART_SIZE,
        DEFAULT_PART_SIZE + 1,
        MAX_PARTS * DEFAULT_PART_SIZE - 1,
        MAX_PARTS * DEFAULT_PART_SIZE,
        MAX_PARTS * DEFAULT_PART_SIZE + 1,
        MAX_PARTS * DEFAULT_PART_SIZE + 10_000,
        MAX_FILE_SIZE - 1,
        MAX_FILE_SIZE,
    ]
    all_sizes = edges + random_sizes
    blobs = [(1, 0), (2, 1), (3, 5000), (4, DEFAULT_PART_SIZE), (5, 2 * DEFAULT_PART_SIZE + 17)]
    found = run_json(REFERENCE, json.dumps(all_sizes), json.dumps(blobs))
    assert isinstance(found, dict)
    ours = [[p.count, p.part_size, p.last_size] for p in map(part_plan, all_sizes)]
    assert found["plans"] == ours
    assert found["etags"] == [dandi_etag(random.Random(s).randbytes(n)) for s, n in blobs]
