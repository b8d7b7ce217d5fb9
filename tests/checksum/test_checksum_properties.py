"""Property tests: the tree hash equals zarr-checksum (the reference implementation).

Also: every directory digest equals the reference's digest of that subtree, the
grouped (streaming) mode accepts exactly the grouped orders, and incremental
``.checksum`` node updates equal a recomputation from scratch.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr_checksum.checksum import ZarrChecksum, ZarrChecksumManifest
from zarr_checksum.generators import ZarrArchiveFile
from zarr_checksum.tree import ZarrChecksumTree

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    ChecksumNode,
    ChildDigest,
    ZarrEntry,
    compute_checksum,
    iter_directory_digests,
)
from zarrchive.errors import UngroupedEntries

Entry = tuple[str, int, str]


def oracle(entries: Iterable[Entry]) -> str:
    """zarr-checksum's digest of the entries."""
    tree = ZarrChecksumTree()
    for path, size, md5 in entries:
        tree.add_leaf(Path(path), size, md5)
    return str(tree.process().digest)


def oracle_files(entries: Iterable[Entry]) -> list[ZarrArchiveFile]:
    return [ZarrArchiveFile(path=Path(p), size=s, digest=d) for p, s, d in entries]


# -- strategies -----------------------------------------------------------------------
# Characters chosen to stress ordering and escaping: '.' and '-' sort before '/',
# U+FFFF sorts before U+10000 by code point but after it in UTF-16, surrogates,
# quotes, backslashes and control characters must be escaped like json.dumps does.
TRICKY = ["a", "b", "0", "1", ".", "-", "_", " ", "é", "\uffff", "\U00010000", "\U0001f600"]
TRICKY += ["\ufb01", '"', "\\", "\t", "\x7f", "~", "\ud800", "Z", "ﬀ", "\u2028"]
NAMES = st.one_of(
    st.sampled_from(["a", "b", "a.b", "a-b", "\uffff", "\U00010000", ".zarray", "0", "10"]),
    st.text(st.sampled_from(TRICKY), min_size=1, max_size=4),
    st.text(min_size=1, max_size=3),
).filter(lambda n: "/" not in n and n not in (".", "..") and "\x00" not in n)
MD5S = st.one_of(
    st.sampled_from(["a" * 32, "0" * 32, "0123456789abcdef" * 2]),
    st.binary(min_size=16, max_size=16).map(bytes.hex),
)
SIZES = st.one_of(st.integers(0, 10), st.integers(0, 2**50))
PATHS = st.lists(NAMES, min_size=1, max_size=12).map("/".join)
ENTRIES = st.lists(st.tuples(PATHS, SIZES, MD5S), min_size=0, max_size=60, unique_by=lambda e: e[0])


def directories_of(entries: Iterable[Entry]) -> set[str]:
    dirs = {""}
    for path, _, _ in entries:
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    return dirs


def below(entries: Iterable[Entry], directory: str) -> list[Entry]:
    if not directory:
        return list(entries)
    prefix = directory + "/"
    return [(p[len(prefix) :], s, d) for p, s, d in entries if p.startswith(prefix)]


def is_grouped(paths: Sequence[str]) -> bool:
    """Every directory's descendants are contiguous in *paths*."""
    for directory in directories_of((p, 0, "") for p in paths) - {""}:
        positions = [i for i, p in enumerate(paths) if p.startswith(directory + "/")]
        if positions[-1] - positions[0] + 1 != len(positions):
            return False
    return True


# -- equality with the reference -------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(ENTRIES, st.randoms(use_true_random=False))
def test_equals_zarr_checksum(entries: list[Entry], rnd: random.Random) -> None:
    expected = oracle(entries)
    shuffled = entries[:]
    rnd.shuffle(shuffled)
    assert compute_checksum(shuffled) == expected
    assert compute_checksum(sorted(entries), grouped=True) == expected
    from zarr_checksum import compute_zarr_checksum

    assert compute_zarr_checksum(oracle_files(shuffled)).digest == expected


@settings(max_examples=150, deadline=None)
@given(ENTRIES)
def test_every_directory_digest_equals_the_reference(entries: list[Entry]) -> None:
    digests = list(iter_directory_digests(entries))
    paths = [d.path for d in digests]
    assert sorted(paths) == sorted(directories_of(entries))
    assert paths[-1] == ""
    position = {p: i for i, p in enumerate(paths)}
    for d in digests:
        sub = below(entries, d.path)
        assert d.digest == oracle(sub)
        assert (d.count, d.size) == (len(sub), sum(s for _, s, _ in sub))
        if d.path:  # a directory comes after all its subdirectories, before its parent
            parent = d.path.rpartition("/")[0]
            assert position[d.path] < position[parent]


@settings(max_examples=150, deadline=None)
@given(ENTRIES, st.randoms(use_true_random=False))
def test_grouped_mode_accepts_exactly_the_grouped_orders(
    entries: list[Entry], rnd: random.Random
) -> None:
    expected = oracle(entries)
    order = entries[:]
    rnd.shuffle(order)
    try:
        got = compute_checksum(order, grouped=True)
    except UngroupedEntries:
        assert not is_grouped([p for p, _, _ in order])
    else:
        assert is_grouped([p for p, _, _ in order])
        assert got == expected


def depth_first(entries: list[Entry], rnd: random.Random) -> list[Entry]:
    """A grouped but unsorted order: each directory's files and subtrees shuffled."""
    tree: dict[str, object] = {}
    for entry in entries:
        *dirs, name = entry[0].split("/")
        node = tree
        for d in dirs:
            node = node.setdefault("/" + d, {})  # type: ignore[assignment]
        node[name] = entry

    def walk(node: dict[str, object]) -> list[Entry]:
        keys = list(node)
        rnd.shuffle(keys)
        out: list[Entry] = []
        for key in keys:
            child = node[key]
            out.extend(walk(child) if isinstance(child, dict) else [child])  # type: ignore[list-item]
        return out

    return walk(tree)


@settings(max_examples=150, deadline=None)
@given(ENTRIES, st.randoms(use_true_random=False))
def test_depth_first_orders_stream(entries: list[Entry], rnd: random.Random) -> None:
    order = depth_first(entries, rnd)
    assert is_grouped([p for p, _, _ in order])
    assert compute_checksum(order, grouped=True) == oracle(entries)
    streamed = {d.path: d.digest for d in iter_directory_digests(order, grouped=True)}
    assert streamed == {d.path: d.digest for d in iter_directory_digests(entries)}


def test_utf16_and_code_point_orders_differ() -> None:
    # By code point U+FFFF < U+10000; in UTF-16 (JavaScript) the surrogate pair of
    # U+10000 (D800 DC00) sorts first.  DANDI's order is the code point order.
    entries = [("\uffff", 1, "a" * 32), ("\U00010000", 2, "b" * 32), ("d\uffff/x", 3, "c" * 32)]
    entries += [("d\U00010000/y", 4, "d" * 32)]
    assert compute_checksum(entries) == oracle(entries)
    (_, _, root) = list(iter_directory_digests(entries, with_nodes=True))
    assert root.node_json is not None
    doc = json.loads(root.node_json)
    assert [row["name"] for row in doc["checksums"]["files"]] == ["\uffff", "\U00010000"]
    assert [row["name"] for row in doc["checksums"]["directories"]] == [
        "d\uffff",
        "d\U00010000",
    ]
    assert '"name":"\\uffff"' in root.node_json
    assert '"name":"\\ud800\\udc00"' in root.node_json


def test_thousands_of_siblings() -> None:
    rnd = random.Random(1234)
    alphabet = "abcxyz0189.-_é\uffff\U00010000"
    names = {"".join(rnd.choices(alphabet, k=rnd.randint(1, 8))) for _ in range(5000)}
    names -= {".", ".."}
    files = [(n, rnd.randint(0, 2**20), rnd.randbytes(16).hex()) for n in sorted(names)][:3000]
    subdirs = [(f"sub/{n}/0", 7, "e" * 32) for n in sorted(names)[:2000]]
    entries = files + subdirs
    rnd.shuffle(entries)
    expected = oracle(entries)
    assert compute_checksum(entries) == expected
    assert compute_checksum(sorted(entries), grouped=True) == expected
    digests = {d.path: d.digest for d in iter_directory_digests(entries)}
    assert len(digests) == 2 + len(subdirs)
    assert digests["sub"] == oracle(below(entries, "sub"))


def test_deep_nesting() -> None:
    path = "/".join(f"d{i}" for i in range(200))
    entries = [(path + "/f", 1, "a" * 32), ("d0/g", 2, "b" * 32), (path + "/h", 3, "c" * 32)]
    assert compute_checksum(entries) == oracle(entries)
    assert len(list(iter_directory_digests(entries))) == 201


# -- the node codec against an independent encoder -------------------------------------
ROWS = st.dictionaries(NAMES, st.tuples(MD5S, SIZES), max_size=8)


@settings(max_examples=200, deadline=None)
@given(ROWS, st.dictionaries(NAMES, st.tuples(MD5S, st.integers(1, 99), SIZES), max_size=8))
def test_node_codec(
    files: dict[str, tuple[str, int]], dirs: dict[str, tuple[str, int, int]]
) -> None:
    node = ChecksumNode()
    for name, (md5, size) in files.items():
        node.set_file(name, md5, size)
    for name, (md5, count, size) in dirs.items():
        node.set_directory(name, f"{md5}-{count}--{size}")
    listing = {
        "directories": [
            {"digest": f"{m}-{c}--{s}", "name": n, "size": s}
            for n, (m, c, s) in sorted(dirs.items())
        ],
        "files": [{"digest": m, "name": n, "size": s} for n, (m, s) in sorted(files.items())],
    }
    manifest = ZarrChecksumManifest(
        directories=[ZarrChecksum(f"{m}-{c}--{s}", n, s) for n, (m, c, s) in dirs.items()],
        files=[ZarrChecksum(m, n, s) for n, (m, s) in files.items()],
    )
    digest = manifest.generate_digest().digest
    assert node.digest == digest
    expected = json.dumps({"checksums": listing, "digest": digest}, separators=(",", ":"))
    assert node.to_json() == expected.encode("ascii")
    decoded = ChecksumNode.from_json(node.to_json())
    assert decoded == node
    assert decoded.to_json() == node.to_json()
    assert (decoded.count, decoded.size) == (
        len(files) + sum(c for _, c, _ in dirs.values()),
        sum(s for _, s in files.values()) + sum(s for _, _, s in dirs.values()),
    )


# -- incremental updates -----------------------------------------------------------------
def _bubble(nodes: dict[str, ChecksumNode], directory: str) -> None:
    """Propagate the change of *directory* up to the root, like the server's updater."""
    while directory:
        parent, _, name = directory.rpartition("/")
        node = nodes.get(directory)
        parent_node = nodes.setdefault(parent, ChecksumNode())
        if node is None or node.is_empty:
            nodes.pop(directory, None)
            if name in parent_node.directories:
                parent_node.remove_directory(name)
        else:
            parent_node.set_directory(name, node.digest)
        directory = parent


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), PATHS, SIZES, MD5S),
        st.tuples(st.just("remove"), st.integers(0, 10**6), st.just(0), st.just("")),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPERATIONS)
def test_incremental_updates_equal_recomputation(
    operations: list[tuple[str, object, int, str]],
) -> None:
    files: dict[str, ZarrEntry] = {}
    nodes: dict[str, ChecksumNode] = {"": ChecksumNode()}
    for kind, target, size, md5 in operations:
        if kind == "set":
            assert isinstance(target, str)
            directory, _, name = target.rpartition("/")
            nodes.setdefault(directory, ChecksumNode()).set_file(name, md5, size)
            files[target] = ZarrEntry(target, size, md5)
        else:
            if not files:
                continue
            assert isinstance(target, int)
            path = sorted(files)[target % len(files)]
            del files[path]
            directory, _, name = path.rpartition("/")
            nodes[directory].remove_file(name)
        _bubble(nodes, directory)

        recomputed = {d.path: d for d in iter_directory_digests(files.values(), with_nodes=True)}
        assert set(nodes) == set(recomputed)
        for path, node in nodes.items():
            assert node.digest == recomputed[path].digest
            assert node.to_json().decode() == recomputed[path].node_json
    assert nodes[""].digest == (oracle(files.values()) if files else EMPTY_CHECKSUM)
    assert all(isinstance(c, ChildDigest) for n in nodes.values() for c in n.files.values())
