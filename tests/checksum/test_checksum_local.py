"""zarrchive.client.local: the local walk and the parallel md5."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from pathlib import Path

import pytest
from zarr_checksum import compute_zarr_checksum
from zarr_checksum.generators import yield_files_local

from zarrchive.checksum import (
    EMPTY_CHECKSUM,
    ZarrEntry,
    compute_checksum,
    iter_directory_digests,
)
from zarrchive.client.local import (
    BLOCK_SIZE,
    LocalFile,
    default_jobs,
    iter_local_entries,
    local_checksum,
    local_directory_digests,
    local_entries,
    md5_file,
    walk_local,
)
from zarrchive.errors import InvalidInput, InvalidPath, LocalFileError


def _modes_are_enforced() -> bool:
    """False when this process reads files whatever their mode (root, CAP_DAC_OVERRIDE)."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        probe = Path(directory) / "probe"
        probe.write_bytes(b"")
        probe.chmod(0)
        try:
            probe.open("rb").close()
        except PermissionError:
            return True
        return False


MODES_ENFORCED = _modes_are_enforced()


def write(root: Path, path: str, data: bytes) -> ZarrEntry:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return ZarrEntry(path, len(data), hashlib.md5(data).hexdigest())


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, list[ZarrEntry]]:
    root = tmp_path / "data.zarr"
    root.mkdir()
    entries = [
        write(root, ".zgroup", b'{"zarr_format":2}'),
        write(root, "a.b", b"file a.b"),
        write(root, "a/b", b"file in a"),
        write(root, "a/b.c/d", b""),
        write(root, "a-b/x", b"x" * 5000),
        write(root, "arr/.zarray", b"{}"),
        write(root, "arr/0/0", bytes(range(256)) * 3),
        write(root, "arr/0/1", b"\x00" * 7),
        write(root, "arr/10/0", b"ten"),
        write(root, "arr/9/0", b"nine"),
        write(root, "é/\uffff", b"bmp"),
        write(root, "é/\U00010000", b"astral"),
    ]
    (root / "empty" / "deeper").mkdir(parents=True)
    (root / "arr" / "empty").mkdir()
    return root, sorted(entries)


def test_entries_sizes_digests_and_order(tree: tuple[Path, list[ZarrEntry]]) -> None:
    root, expected = tree
    got = local_entries(root)
    assert got == expected
    # Sorted by code point: "a-b/x" < "a.b" < "a/b" ('-' < '.' < '/'), U+FFFF < U+10000.
    assert [e.path for e in got] == [
        ".zgroup",
        "a-b/x",
        "a.b",
        "a/b",
        "a/b.c/d",
        "arr/.zarray",
        "arr/0/0",
        "arr/0/1",
        "arr/10/0",
        "arr/9/0",
        "é/\uffff",
        "é/\U00010000",
    ]
    assert all(isinstance(e, ZarrEntry) for e in got)
    assert got[4] == ZarrEntry("a/b.c/d", 0, "d41d8cd98f00b204e9800998ecf8427e")


def test_checksum_equals_zarr_checksum(tree: tuple[Path, list[ZarrEntry]]) -> None:
    root, expected = tree
    reference = str(compute_zarr_checksum(yield_files_local(root)).digest)
    assert local_checksum(root) == reference
    assert local_checksum(root, jobs=1) == reference
    assert compute_checksum(iter_local_entries(root, jobs=3), grouped=True) == reference
    assert compute_checksum(expected) == reference
    assert reference.endswith(f"-12--{sum(e.size for e in expected)}")


def test_directory_digests(tree: tuple[Path, list[ZarrEntry]]) -> None:
    root, expected = tree
    got = local_directory_digests(root, with_nodes=True)
    assert got == list(iter_directory_digests(expected, with_nodes=True))
    assert [d.path for d in got] == [
        "a-b",
        "a/b.c",
        "a",
        "arr/0",
        "arr/10",
        "arr/9",
        "arr",
        "é",
        "",
    ]
    assert got[-1].digest == local_checksum(root)


def test_walk_local(tree: tuple[Path, list[ZarrEntry]]) -> None:
    root, expected = tree
    files = list(walk_local(root))
    assert files[:2] == [
        LocalFile(".zgroup", os.path.join(root, ".zgroup")),
        LocalFile("a-b/x", os.path.join(root, "a-b", "x")),
    ]
    assert [f.path for f in files] == [e.path for e in expected]
    assert [f.os_path for f in walk_local(str(root) + "/")] == [f.os_path for f in files]


@pytest.mark.parametrize("layout", [[], ["empty/"], ["e1/e2/", "e3/"]])
def test_empty_trees(tmp_path: Path, layout: list[str]) -> None:
    for directory in layout:
        (tmp_path / directory).mkdir(parents=True)
    assert local_entries(tmp_path) == []
    assert local_checksum(tmp_path) == EMPTY_CHECKSUM
    assert [(d.path, d.digest) for d in local_directory_digests(tmp_path)] == [("", EMPTY_CHECKSUM)]


def test_many_files_in_batches_and_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zarrchive.client.local import hashing

    monkeypatch.setattr(hashing, "PROGRESS_INTERVAL", 0.001)  # reports while hashing
    # Sizes from empty to several blocks, so batches adapt and large files are split in reads.
    sizes = [0, 1, 100, 4096, 70_000, BLOCK_SIZE, BLOCK_SIZE + 1, 3 * BLOCK_SIZE + 17]
    expected = [
        write(tmp_path, f"d{i % 7}/f{i:04d}", os.urandom(sizes[i % len(sizes)] if i < 40 else 300))
        for i in range(700)
    ]
    calls: list[tuple[int, int]] = []
    got = local_entries(tmp_path, jobs=3, progress=lambda f, b: calls.append((f, b)))
    assert got == sorted(expected)
    assert calls[-1] == (700, sum(e.size for e in expected))
    assert calls == sorted(calls)  # cumulative
    assert len(calls) >= 2
    for jobs in (1, 2, 8):
        assert local_checksum(tmp_path, jobs=jobs) == compute_checksum(expected)


def test_md5_file(tmp_path: Path) -> None:
    data = os.urandom(2 * BLOCK_SIZE + 5)
    (tmp_path / "f").write_bytes(data)
    assert md5_file(tmp_path / "f") == (len(data), hashlib.md5(data).hexdigest())
    (tmp_path / "e").write_bytes(b"")
    assert md5_file(str(tmp_path / "e")) == (0, "d41d8cd98f00b204e9800998ecf8427e")
    with pytest.raises(LocalFileError, match=r"cannot read .*: No such file or directory"):
        md5_file(tmp_path / "missing")


def test_default_jobs() -> None:
    jobs = default_jobs()
    assert 2 <= jobs <= 32
    assert jobs == min(32, len(os.sched_getaffinity(0)) + 2)


@pytest.mark.parametrize("jobs", [0, -1])
def test_bad_jobs(tmp_path: Path, jobs: int) -> None:
    with pytest.raises(InvalidInput, match=f"jobs must be at least 1, got {jobs}"):
        iter_local_entries(tmp_path, jobs=jobs)
    with pytest.raises(InvalidInput):
        local_checksum(tmp_path, jobs=jobs)


# -- symbolic links ---------------------------------------------------------------------------
def test_symlinks_are_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    root = tmp_path / "root"
    target = write(outside, "sub/t", b"target file")
    write(root, "real/f", b"real")
    (root / "link-file").symlink_to(outside / "sub" / "t")
    (root / "link-dir").symlink_to(outside / "sub")
    (root / "twin").symlink_to("real")  # a sibling, not a loop: walked twice
    got = local_entries(root)
    assert got == [
        ZarrEntry("link-dir/t", target.size, target.md5),
        ZarrEntry("link-file", target.size, target.md5),
        ZarrEntry("real/f", 4, hashlib.md5(b"real").hexdigest()),
        ZarrEntry("twin/f", 4, hashlib.md5(b"real").hexdigest()),
    ]
    # The root itself may be a link.
    (tmp_path / "root-link").symlink_to(root)
    assert local_entries(tmp_path / "root-link") == got


@pytest.mark.parametrize(
    ("link", "target", "ancestor"),
    [("loop", ".", "."), ("a/b/up", "../..", "."), ("a/b/up", "..", "a")],
)
def test_symlink_loops(tmp_path: Path, link: str, target: str, ancestor: str) -> None:
    write(tmp_path, "a/b/f", b"f")
    (tmp_path / link).symlink_to(target)
    message = re.escape(
        f"symbolic link loop: '{tmp_path / link}' leads back to its ancestor '{ancestor}' "
        "(relative to the Zarr root)"
    )
    with pytest.raises(LocalFileError, match=message):
        local_entries(tmp_path)
    with pytest.raises(LocalFileError, match="symbolic link loop"):
        local_checksum(tmp_path)


def test_self_referencing_symlink(tmp_path: Path) -> None:
    (tmp_path / "self").symlink_to("self")
    with pytest.raises(LocalFileError, match=r"cannot access '.*/self': Too many levels"):
        local_entries(tmp_path)


def test_broken_symlink(tmp_path: Path) -> None:
    write(tmp_path, "ok", b"ok")
    (tmp_path / "dangling").symlink_to("nowhere")
    with pytest.raises(
        LocalFileError, match=r"'.*/dangling' is a broken symbolic link \(it points to 'nowhere'\)"
    ):
        local_entries(tmp_path)


def test_special_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(LocalFileError, match=r"'.*/fifo' is not a regular file or a directory"):
        local_entries(tmp_path)


# -- errors ----------------------------------------------------------------------------------
def test_missing_root(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    message = f"'{missing}': no such file or directory"
    with pytest.raises(LocalFileError) as info:
        iter_local_entries(missing)  # at once, not when iterated
    assert info.value.message == message
    for call in (walk_local, local_checksum, local_entries, local_directory_digests):
        with pytest.raises(LocalFileError, match=re.escape(message)):
            call(missing)


def test_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(LocalFileError) as info:
        iter_local_entries(tmp_path / "f")
    assert info.value.message == f"'{tmp_path / 'f'}' is not a directory"


def test_unreadable_file_proc(tmp_path: Path) -> None:
    if not Path("/proc/self/mem").exists():
        pytest.skip("needs Linux /proc")
    for i in range(50):
        write(tmp_path, f"f{i:02d}", b"ok")
    (tmp_path / "g-mem").symlink_to("/proc/self/mem")  # open works, read gives EIO
    with pytest.raises(LocalFileError, match=r"cannot read '.*/g-mem': Input/output error"):
        local_entries(tmp_path, jobs=2)
    with pytest.raises(LocalFileError, match="Input/output error"):
        local_checksum(tmp_path)


@pytest.mark.skipif(not MODES_ENFORCED, reason="this process reads files whatever their mode")
def test_unreadable_file_mode(tmp_path: Path) -> None:
    write(tmp_path, "secret", b"s")
    (tmp_path / "secret").chmod(0)
    with pytest.raises(LocalFileError, match=r"cannot read '.*/secret': Permission denied"):
        local_entries(tmp_path)


@pytest.mark.skipif(not MODES_ENFORCED, reason="this process reads files whatever their mode")
def test_unreadable_directory_mode(tmp_path: Path) -> None:
    write(tmp_path, "d/f", b"s")
    (tmp_path / "d").chmod(0)
    try:
        with pytest.raises(LocalFileError, match=r"cannot read directory '.*/d': Permission"):
            local_entries(tmp_path)
    finally:
        (tmp_path / "d").chmod(0o755)


def test_closing_early_stops_the_threads(tmp_path: Path) -> None:
    for i in range(300):
        write(tmp_path, f"f{i:03d}", b"x" * 100)
    before = threading.active_count()
    iterator = iter_local_entries(tmp_path, jobs=4)
    assert next(iterator) == ZarrEntry("f000", 100, hashlib.md5(b"x" * 100).hexdigest())
    iterator.close()  # type: ignore[attr-defined]
    assert threading.active_count() == before


# -- paths -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("back\\slash", r"'back\\\\slash' contains a backslash"),
        ("new\nline", r"'new\\nline' contains the control character U\+000A"),
        ("dir\x7f/f", r"'dir\\x7f/f' contains the control character U\+007F"),
    ],
)
def test_invalid_names(tmp_path: Path, name: str, message: str) -> None:
    write(tmp_path, "fine", b"x")
    write(tmp_path, name, b"x")
    with pytest.raises(InvalidPath, match=message):
        local_entries(tmp_path)


def test_non_utf8_name(tmp_path: Path) -> None:
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff"), "wb") as f:
        f.write(b"x")
    with pytest.raises(InvalidPath, match=r"b'bad\\xff' is not valid UTF-8: invalid start byte"):
        local_entries(tmp_path)


def test_path_too_long(tmp_path: Path) -> None:
    deep = "/".join(["d" * 230] * 4) + "/" + "f" * 30  # 920 + 4 + 30 bytes
    write(tmp_path, deep, b"x")
    write(tmp_path, "/".join(["d" * 230] * 4) + "/ok", b"x")  # 926 bytes: fine
    with pytest.raises(InvalidPath, match="is 954 bytes long: at most 941 are allowed"):
        local_entries(tmp_path)
    (tmp_path / deep).unlink()
    assert [len(e.path.encode()) for e in local_entries(tmp_path)] == [926]


def test_invalid_directory_names_matter_only_with_files(tmp_path: Path) -> None:
    (tmp_path / "bad\\dir" / "empty").mkdir(parents=True)
    write(tmp_path, "ok/f", b"x")
    assert [e.path for e in local_entries(tmp_path)] == ["ok/f"]
    write(tmp_path, "bad\\dir/empty/f", b"x")
    with pytest.raises(InvalidPath, match="contains a backslash"):
        local_entries(tmp_path)


@pytest.mark.parametrize("chunk", [1, 37, 10_000])
def test_chunks_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    from zarrchive.client.local import hashing

    monkeypatch.setattr(hashing, "CHUNK_FILES", chunk)
    expected = [write(tmp_path, f"d{i % 3}/s{i % 2}/f{i:03d}", os.urandom(i)) for i in range(250)]
    expected += [write(tmp_path, f"d{i}.{i}", b"top") for i in range(3)]  # between directories
    calls: list[tuple[int, int]] = []
    got = local_entries(tmp_path, jobs=2, progress=lambda f, b: calls.append((f, b)))
    assert got == sorted(expected)
    assert calls[-1] == (253, sum(e.size for e in expected))
    assert local_checksum(tmp_path, jobs=3) == compute_checksum(expected)
