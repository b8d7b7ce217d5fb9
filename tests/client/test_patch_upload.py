"""``zarrchive upload --patch`` and ``--include``/``--exclude`` against the live server.

A patch sends the new and changed local files and deletes nothing; it reads only the nodes
of the directories that hold them (and their ancestors), each whole in one request however
wide; files outside the globs are never read and directories no glob can reach never listed
(shown by their access times, which reading or listing them would move, and, when not run as
root, by making them unreadable).  The final check compares the archive's checksum with the
one predicted from those nodes plus the patch: a change by another batch meanwhile, to any
file, even one of a directory of thousands the patch does not touch, fails it (exit 1).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from typer.testing import CliRunner

from tests.helpers.local_zarr import zarr_checksum_of
from tests.helpers.seeded_zarr import seed_zarr
from zarrchive.checksum import ChecksumNode
from zarrchive.cli import app
from zarrchive.client import ApiClient, NullProgress, Uploader, remote
from zarrchive.client.selection import Selection
from zarrchive.client.upload import BatchRecords
from zarrchive.errors import InvalidInput, TransferError
from zarrchive.services.runtime import Archive

#: An access time long past (and before every file's mtime): reading or listing moves it.
LONG_AGO_NS = 1_000_000_000 * 1_000_000_000


class ListingClient(ApiClient):
    """A real client that also records which directories it listed or read the node of."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listed: list[str] = []

    def list_page(self, zarr_id: str, directory: str, **kwargs: Any) -> Any:
        self.listed.append(directory)
        return super().list_page(zarr_id, directory, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if "/node/" in path:
            self.listed.append(unquote(path.partition("/node/")[2]).removesuffix("/"))
        return super().request(method, path, **kwargs)


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


#: A Zarr v2 group with one array whose 1,200 chunks lie side by side: a directory of more
#: than one page (1,000 entries) of the listing routes.
WIDE = {
    ".zgroup": b'{"zarr_format": 2}',
    ".zattrs": b"{}",
    "arr/.zarray": b'{"chunks": [1, 1]}',
    "arr/.zattrs": b"{}",
    **{f"arr/{n // 40}.{n % 40}": f"chunk {n}".encode() for n in range(1200)},
}


def wide_zarr(tmp_path: Path, client: ApiClient, archive: Archive, dandiset: str) -> Path:
    """:data:`WIDE` in the archive (seeded) and whole in a local copy ``full/wide.zarr``."""
    full = tmp_path / "full" / "wide.zarr"
    for path, content in WIDE.items():
        (full / path).parent.mkdir(parents=True, exist_ok=True)
        (full / path).write_bytes(content)
    zarr_id = client.create_zarr("wide.zarr", dandiset).zarr_id
    assert seed_zarr(archive, zarr_id, WIDE) == zarr_checksum_of(full)
    return full


def metadata_patch(tmp_path: Path, full: Path) -> Path:
    """A partial copy ``part/wide.zarr``: the array's metadata changed (on *full* too)."""
    part = tmp_path / "part" / "wide.zarr"
    (part / "arr").mkdir(parents=True)
    for path, content in (("arr/.zattrs", b'{"units": "mV"}'), ("arr/.zarray", b"{}")):
        (part / path).write_bytes(content)
        (full / path).write_bytes(content)
    return part


def test_a_wide_directory_is_read_in_one_request_and_the_checksum_predicted(
    tmp_path: Path,
    listing_client: ListingClient,
    archive: Archive,
    client_env: dict[str, str],
    dandiset: str,
    records: BatchRecords,
) -> None:
    client = listing_client
    full = wide_zarr(tmp_path, client, archive, dandiset)
    part = metadata_patch(tmp_path, full)
    client.listed.clear()
    result = Uploader(client, jobs=4, records=records).upload(
        part, dandiset=dandiset, patch=True, dry_run=True
    )
    assert client.listed == ["", "arr"]  # one request each, the 1,204 entries of arr in one
    assert result.expected_checksum == zarr_checksum_of(full)  # the oracle, on the whole tree
    assert result.base_checksum == client.get_zarr(result.zarr_id or "").checksum

    out = CliRunner().invoke(
        app, ["upload", str(part), "--dandiset", dandiset, "--patch"], env=client_env
    )
    assert out.exit_code == 0, out.stderr
    assert f"checksum {zarr_checksum_of(full)} (the one predicted: the Zarr as read before " in (
        out.stdout
    )
    assert "so nothing else in it changed meanwhile" in out.stdout
    assert "a local checksum of the Zarr would need its whole tree here" in out.stdout


def another_client_changes(client: ApiClient, tmp_path: Path, dandiset: str, path: str) -> None:
    """Another client's patch (its own batch, applied before it returns) changes *path*."""
    other = tmp_path / f"other-{len(list(tmp_path.glob('other-*')))}" / "wide.zarr"
    (other / path).parent.mkdir(parents=True, exist_ok=True)
    (other / path).write_bytes(b"changed by someone else: " + other.parent.name.encode())
    result = Uploader(client, records=BatchRecords(tmp_path / "other-state")).upload(
        other, dandiset=dandiset, patch=True
    )
    assert result.ok and result.uploaded == 1


def test_another_batch_changing_an_untouched_file_of_a_wide_directory_fails_the_check(
    tmp_path: Path,
    client: ApiClient,
    archive: Archive,
    client_env: dict[str, str],
    dandiset: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the patch's reading of the archive and its batch, another client's batch
    changes ``arr/7.7``, a file of the 1,204 of ``arr`` the patch does not touch: the final
    check fails (exit 1) and says so; both changes are in the archive."""
    full = wide_zarr(tmp_path, client, archive, dandiset)
    part = metadata_patch(tmp_path, full)
    read_affected = remote.read_affected
    changes = ["arr/7.7"]

    def read_then_someone_else_changes(*args: Any, **kwargs: Any) -> Any:
        nodes = read_affected(*args, **kwargs)
        if changes:  # once (the other client reads too)
            another_client_changes(client, tmp_path, dandiset, changes.pop())
        return nodes

    monkeypatch.setattr(remote, "read_affected", read_then_someone_else_changes)
    out = CliRunner().invoke(
        app, ["upload", str(part), "--dandiset", dandiset, "--patch"], env=client_env
    )
    assert out.exit_code == 1, out.stdout + out.stderr
    zarr = client.find_zarr(dandiset, "wide.zarr")
    assert zarr is not None
    predicted = zarr_checksum_of(full)  # the Zarr as read plus the patch
    assert out.stderr.startswith(
        f"zarrchive upload: CHECKSUM MISMATCH: the archive's checksum {zarr.checksum} "
        f"differs from {predicted}, the one predicted from the Zarr as read before this patch "
        "(checksum "
    )
    assert "another upload or deletion changed the Zarr meanwhile" in out.stderr
    assert "Run the same command again" in out.stderr
    (full / "arr" / "7.7").write_bytes(b"changed by someone else: other-0")
    assert zarr.checksum == zarr_checksum_of(full)  # the patch and the other change

    # run again: nothing to send, and the check passes on the Zarr as it now is
    monkeypatch.setattr(remote, "read_affected", read_affected)
    again = CliRunner().invoke(
        app, ["upload", str(part), "--dandiset", dandiset, "--patch"], env=client_env
    )
    assert again.exit_code == 0, again.stderr
    assert "uploaded 0 files" in again.stdout and f"checksum {zarr.checksum}" in again.stdout


def test_nodes_read_while_another_batch_is_applied_are_read_again(
    tmp_path: Path,
    client: ApiClient,
    listing_client: ListingClient,
    archive: Archive,
    dandiset: str,
    records: BatchRecords,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another batch applied between the reading of the root's node and of ``arr``'s: the two
    disagree, so both are read again, and the patch is checked against the Zarr with that
    change (which happened before it was read)."""
    full = wide_zarr(tmp_path, client, archive, dandiset)
    part = metadata_patch(tmp_path, full)
    fetch_node = remote.fetch_node
    changes = ["arr/3.3"]

    def fetch(client_: ApiClient, zarr_id: str, directory: str) -> ChecksumNode | None:
        if directory == "arr" and changes:
            another_client_changes(client, tmp_path, dandiset, changes.pop())
        return fetch_node(client_, zarr_id, directory)

    monkeypatch.setattr(remote, "fetch_node", fetch)
    result = Uploader(listing_client, jobs=4, records=records).upload(
        part, dandiset=dandiset, patch=True
    )
    assert listing_client.listed == ["", "arr", "", "arr"]
    assert result.ok and result.uploaded == 2
    (full / "arr" / "3.3").write_bytes(b"changed by someone else: other-0")
    assert result.remote_checksum == zarr_checksum_of(full)


def test_a_zarr_that_keeps_changing_is_not_patched(
    tmp_path: Path,
    client: ApiClient,
    archive: Archive,
    dandiset: str,
    records: BatchRecords,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    full = wide_zarr(tmp_path, client, archive, dandiset)
    part = metadata_patch(tmp_path, full)
    fetch_node = remote.fetch_node
    other: list[bool] = []  # the other client is patching (it reads too)

    def fetch(client_: ApiClient, zarr_id: str, directory: str) -> ChecksumNode | None:
        if directory == "arr" and not other:
            other.append(True)
            try:
                another_client_changes(client, tmp_path, dandiset, "arr/0.0")
            finally:
                other.clear()
        return fetch_node(client_, zarr_id, directory)

    monkeypatch.setattr(remote, "fetch_node", fetch)
    with pytest.raises(TransferError, match=r"kept changing .* nothing was sent"):
        Uploader(client, records=records).upload(part, dandiset=dandiset, patch=True)
    zarr = client.find_zarr(dandiset, "wide.zarr")
    assert zarr is not None
    found = client.get_file(zarr.zarr_id, "arr/.zattrs")
    assert found is not None and found.md5 == hashlib.md5(b"{}").hexdigest()  # not sent


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
