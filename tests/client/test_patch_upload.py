"""``zarrchive upload --patch`` and ``--include``/``--exclude`` against the live server.

A patch sends the new and changed local files and deletes nothing; it lists only the
directories that hold them (and their ancestors); files outside the globs are never read and
directories no glob can reach never listed (shown by their access times, which reading or
listing them would move, and, when not run as root, by making them unreadable).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers.local_zarr import zarr_checksum_of
from zarrchive.cli import app
from zarrchive.client import ApiClient, NullProgress, Uploader
from zarrchive.client.selection import Selection
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import InvalidInput

#: An access time long past (and before every file's mtime): reading or listing moves it.
LONG_AGO_NS = 1_000_000_000 * 1_000_000_000


class ListingClient(ApiClient):
    """A real client that also records which directories it listed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listed: list[str] = []

    def list_page(self, zarr_id: str, directory: str, **kwargs: Any) -> Any:
        self.listed.append(directory)
        return super().list_page(zarr_id, directory, **kwargs)


@pytest.fixture
def listing_client(client_env: dict[str, str]) -> Iterator[ListingClient]:
    with ListingClient.from_env(environ=client_env) as client:
        assert isinstance(client, ListingClient)
        yield client


def make_tree(root: Path, arrays: int = 3, rows: int = 4, columns: int = 10) -> list[str]:
    """A Zarr v3-like tree: metadata at the root and in each array, nested chunks."""
    paths = ["zarr.json", ".zattrs"]
    for a in range(arrays):
        paths += [f"arr{a}/zarr.json", f"arr{a}/.zattrs"]
        paths += [f"arr{a}/c/{i}/{j}" for i in range(rows) for j in range(columns)]
    for path in paths:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f"content of {path}".encode())
    return paths


def uploaded_copy(tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords) -> Path:
    full = tmp_path / "full" / "data.zarr"
    make_tree(full)
    result = Uploader(client, jobs=4, records=records).upload(full, dandiset=dandiset)
    assert result.ok
    return full


def zarr_files(client: ApiClient, zarr_id: str, directory: str = "") -> dict[str, str]:
    """Every file of the Zarr with its md5 (a full walk of the listings: for checking)."""
    listing = client.list_directory(zarr_id, directory)
    found = {f.path: f.digest for f in listing.files}
    for sub in listing.directories:
        found.update(zarr_files(client, zarr_id, sub.path))
    return found


def test_patch_sends_new_and_changed_deletes_nothing_lists_affected_only(
    tmp_path: Path, listing_client: ListingClient, dandiset: str, records: BatchRecords
) -> None:
    client = listing_client
    full = uploaded_copy(tmp_path, client, dandiset, records)
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None
    before = zarr_files(client, zarr.zarr_id)

    # a partial copy: two changed files, one unchanged, two new (one in a new directory)
    part = tmp_path / "part" / "data.zarr"
    (part / "arr1" / "c" / "2").mkdir(parents=True)
    (part / "arr1" / "c" / "9").mkdir(parents=True)
    (part / ".zattrs").write_bytes(b'{"title": "patched"}')
    (part / "arr1" / ".zattrs").write_bytes(b'{"units": "mV"}')
    shutil.copy(full / "arr1" / "c" / "2" / "3", part / "arr1" / "c" / "2" / "3")
    (part / "arr1" / "c" / "2" / "new").write_bytes(b"new chunk")
    (part / "arr1" / "c" / "9" / "0").write_bytes(b"new row")
    # the same changes on the full copy: the Zarr must end up equal to it
    for path in (".zattrs", "arr1/.zattrs", "arr1/c/2/new", "arr1/c/9/0"):
        (full / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(part / path, full / path)

    client.listed.clear()
    result = Uploader(client, jobs=4, records=records).upload(part, dandiset=dandiset, patch=True)
    assert (result.uploaded, result.new, result.skipped, result.deleted) == (4, 2, 1, 0)
    assert result.local_files == 5
    assert result.ok and result.remote_checksum == result.expected_checksum
    assert result.remote_checksum == zarr_checksum_of(full)  # the oracle, on the whole tree
    # listed: the directories holding the files and their ancestors, never the new one
    assert sorted(set(client.listed)) == ["", "arr1", "arr1/c", "arr1/c/2"]
    assert result.listed == 4
    after = zarr_files(client, zarr.zarr_id)
    assert set(before) <= set(after)  # nothing deleted
    assert set(after) - set(before) == {"arr1/c/2/new", "arr1/c/9/0"}

    # again: nothing to send, and still only the affected directories listed
    again = Uploader(client, jobs=4, records=records).upload(part, dandiset=dandiset, patch=True)
    assert (again.uploaded, again.skipped, again.ok) == (0, 5, True)
    assert again.remote_checksum == result.remote_checksum


def _age(paths: list[Path]) -> None:
    for path in paths:
        st = os.stat(path)
        os.utime(path, ns=(LONG_AGO_NS, st.st_mtime_ns))


def test_metadata_only_patch_reads_nothing_else(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    full = uploaded_copy(tmp_path, client, dandiset, records)
    metadata = sorted(p for p in full.rglob("*") if p.name in (".zattrs", "zarr.json"))
    chunks = sorted(p for p in full.rglob("*") if p.is_file() and p not in metadata)
    assert len(metadata) == 8 and len(chunks) == 120
    for path in metadata[:3]:
        path.write_bytes(path.read_bytes() + b" (edited)")
    _age(chunks + metadata)
    not_root = os.geteuid() != 0
    if not_root:  # then reading one is an error, not just a moved access time
        for path in chunks:
            path.chmod(0)
    try:
        args = ["upload", str(full), "--dandiset", dandiset, "--patch"]
        args += ["--include", "**/.zattrs", "--include", "**/zarr.json"]
        out = CliRunner().invoke(app, args, env=client_env)
    finally:
        for path in chunks:
            path.chmod(0o644)
    assert out.exit_code == 0, out.stderr
    assert "uploaded 3 files" in out.stdout and "skipped 5 unchanged (of 8 selected" in out.stdout
    assert "deleted none (--patch)" in out.stdout
    assert "a local checksum of the Zarr would need its whole tree here" in out.stdout
    read = [p for p in metadata if os.stat(p).st_atime_ns != LONG_AGO_NS]
    if not read:
        pytest.skip("this file system does not record access times (noatime)")
    assert set(metadata[:3]) <= set(read)  # the edited ones were read (the others may be)
    assert [p for p in chunks if os.stat(p).st_atime_ns != LONG_AGO_NS] == []
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None and zarr.checksum == zarr_checksum_of(full)


def test_subtree_patch_never_walks_other_subtrees(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    full = uploaded_copy(tmp_path, client, dandiset, records)
    (full / "arr0" / "c" / "1" / "0").write_bytes(b"changed")
    (full / "arr2" / "c" / "1" / "0").write_bytes(b"changed too, but outside the glob")
    elsewhere = [
        p for p in full.rglob("*") if p.is_dir() and p.relative_to(full).parts[0] != "arr0"
    ]
    _age(elsewhere)
    selection = Selection.parse(["arr0/**"], ["arr0/c/3"])
    uploader = Uploader(client, jobs=4, records=records, progress=NullProgress())
    result = uploader.upload(full, dandiset=dandiset, patch=True, selection=selection)
    assert (result.uploaded, result.local_files) == (1, 2 + 30)  # arr0/c/3 excluded
    assert result.ok
    listed = [p for p in elsewhere if os.stat(p).st_atime_ns != LONG_AGO_NS]
    assert listed == []  # not one directory outside arr0 was read
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None and zarr.checksum == result.remote_checksum
    # the change outside the glob was not sent
    (full / "arr2" / "c" / "1" / "0").write_bytes(b"content of arr2/c/1/0")
    assert zarr.checksum == zarr_checksum_of(full)


def test_filters_need_patch(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    full = uploaded_copy(tmp_path, client, dandiset, records)
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None
    (full / "arr0" / "c" / "0" / "0").unlink()
    args = ["upload", str(full), "--dandiset", dandiset, "--include", "**/.zattrs"]
    out = CliRunner().invoke(app, args, env=client_env)
    assert out.exit_code == 2
    assert out.stderr.startswith("zarrchive upload: --include/--exclude need --patch")
    assert "Add --patch" in out.stderr
    assert client.get_zarr(zarr.zarr_id).checksum == zarr.checksum  # nothing deleted
    with pytest.raises(InvalidInput, match="need --patch"):
        Uploader(client, records=records).upload(
            full, dandiset=dandiset, selection=Selection.parse([], ["arr0/**"])
        )
    bad = CliRunner().invoke(app, [*args[:4], "--patch", "--include", "/abs/**"], env=client_env)
    assert bad.exit_code == 2 and "relative to the Zarr root" in bad.stderr


def test_dry_runs_change_nothing(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    full = uploaded_copy(tmp_path, client, dandiset, records)
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None
    files = zarr_files(client, zarr.zarr_id)
    (full / ".zattrs").write_bytes(b"{}")
    (full / "arr0" / "c" / "0" / "new").write_bytes(b"12345")
    for j in range(10):
        (full / "arr2" / "c" / "3" / str(j)).unlink()
    base = ["upload", str(full), "--dandiset", dandiset, "--dry-run"]

    out = CliRunner().invoke(app, [*base, "--patch"], env=client_env)
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "dry run (--patch): would upload 2 files (7 B; 1 new), delete none, skip 117 "
        f"unchanged (of 119 selected local files); Zarr {zarr.zarr_id}"
    )
    assert lines[1:3] == ["  upload .zattrs (2 B)", "  upload arr0/c/0/new (5 B)"]
    assert lines[3].startswith("the Zarr's checksum would become ")

    out = CliRunner().invoke(app, base, env=client_env)
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == (
        "dry run: would upload 2 files (7 B), delete 10 (210 B), skip 117 (of 119 local "
        f"files); Zarr {zarr.zarr_id}"
    )
    assert lines[3:6] == [
        "  delete arr2/c/3/0 (21 B)",
        "  delete arr2/c/3/1 (21 B)",
        "  delete arr2/c/3/2 (21 B)",
    ]
    assert client.get_zarr(zarr.zarr_id).checksum == zarr.checksum
    assert zarr_files(client, zarr.zarr_id) == files


def test_a_clash_is_refused_before_anything_is_sent(
    tmp_path: Path,
    client: ApiClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    uploaded_copy(tmp_path, client, dandiset, records)
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None
    part = tmp_path / "part" / "data.zarr"
    (part / "arr0" / "c").mkdir(parents=True)
    (part / "arr0" / "c" / "1").write_bytes(b"a file where the archive has a directory")
    (part / "arr0" / ".zattrs").write_bytes(b"{}")
    args = ["upload", str(part), "--dandiset", dandiset, "--patch"]
    out = CliRunner().invoke(app, args, env=client_env)
    assert out.exit_code == 2
    assert "1 local path(s) clash with the archive's Zarr" in out.stderr
    assert "'arr0/c/1'" in out.stderr and "A patch deletes nothing" in out.stderr
    assert client.get_zarr(zarr.zarr_id).checksum == zarr.checksum


def test_a_change_by_someone_else_meanwhile_fails_the_check(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    uploaded_copy(tmp_path, client, dandiset, records)
    zarr = client.find_zarr(dandiset, "data.zarr")
    assert zarr is not None
    part = tmp_path / "part" / "data.zarr"
    part.mkdir(parents=True)
    (part / ".zattrs").write_bytes(b'{"v": 2}')

    def meanwhile(files: int) -> None:  # another client deletes a file while ours is sent
        client.delete_files(zarr.zarr_id, ["arr2/c/0/0"])

    uploader = Uploader(client, records=records, on_batch_open=meanwhile)
    result = uploader.upload(part, dandiset=dandiset, patch=True)
    assert result.uploaded == 1 and not result.ok
    assert result.remote_checksum != result.expected_checksum
    assert any("not the one expected after this patch" in n for n in result.notes)


def test_a_patch_creates_a_missing_zarr(
    tmp_path: Path, client: ApiClient, dandiset: str, records: BatchRecords
) -> None:
    local = tmp_path / "fresh.zarr"
    make_tree(local, arrays=1, rows=1, columns=3)
    selection = Selection.parse(["arr0/**"])
    dry = Uploader(client, records=records).upload(
        local, dandiset=dandiset, patch=True, selection=selection, dry_run=True
    )
    assert (dry.zarr_id, dry.planned_uploads) == (None, 5)
    result = Uploader(client, records=records).upload(
        local, dandiset=dandiset, patch=True, selection=selection
    )
    assert result.created and result.ok and result.uploaded == 5
    assert result.remote_checksum == dry.expected_checksum
    assert result.asset_created


def test_a_directory_of_many_pages_is_looked_up_name_by_name(
    tmp_path: Path,
    listing_client: ListingClient,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    """With pages of 3 entries, directories of more than one page holding few of the patch's
    files are not listed whole; the final check then looks at what the patch changed."""
    client = listing_client
    full = uploaded_copy(tmp_path, client, dandiset, records)
    part = tmp_path / "part" / "data.zarr"
    (part / "arr0" / "c" / "0").mkdir(parents=True)
    for path, content in ((".zattrs", b"{}"), ("arr0/c/0/5", b"five"), ("arr0/c/0/new", b"n")):
        (part / path).write_bytes(content)
        (full / path).write_bytes(content)
    shutil.copy(full / "arr0" / "zarr.json", part / "arr0" / "zarr.json")
    uploader = Uploader(client, jobs=4, records=records)
    uploader.listing_page_size, uploader.probe_limit = 3, 4
    client.listed.clear()
    result = uploader.upload(part, dandiset=dandiset, patch=True)
    assert (result.uploaded, result.new, result.skipped) == (3, 1, 1)
    assert result.partly_listed == ["", "arr0/c", "arr0/c/0"]
    assert result.expected_checksum is None and result.verified and result.ok
    assert result.remote_checksum == zarr_checksum_of(full)
    # one page of each partly listed directory; arr0 (one page) listed whole
    assert sorted(client.listed) == ["", "arr0", "arr0/c", "arr0/c/0"]

    (part / "arr0" / "c" / "0" / "5").write_bytes(b"five again")
    (full / "arr0" / "c" / "0" / "5").write_bytes(b"five again")
    out = CliRunner().invoke(
        app,
        ["upload", str(part), "--dandiset", dandiset, "--patch", "--dry-run"],
        env=client_env,
    )
    assert out.exit_code == 0, out.stderr  # default pages: every directory listed whole
    assert out.stdout.splitlines()[-1].startswith("the Zarr's checksum would become ")


def test_a_patch_selecting_nothing_creates_no_zarr(
    tmp_path: Path, client: ApiClient, client_env: dict[str, str], dandiset: str
) -> None:
    local = tmp_path / "empty.zarr"
    make_tree(local, arrays=1, rows=1, columns=2)
    args = ["upload", str(local), "--dandiset", dandiset, "--patch", "--include", "other/**"]
    out = CliRunner().invoke(app, args, env=client_env)
    assert out.exit_code == 2
    assert "no local file is selected (--include 'other/**'); no Zarr was created" in out.stderr
    assert client.find_zarr(dandiset, "empty.zarr") is None
