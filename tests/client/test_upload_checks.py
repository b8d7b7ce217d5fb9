"""What an upload refuses before anything is sent (:mod:`zarrchive.client.upload.checks`),
one rule for a local directory, an S3 source and the command line.  Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from zarrchive.client.upload.checks import (
    MAX_FILE_BYTES,
    refuse_sizes,
    require_patch_for_filter,
    require_zarr_root,
)
from zarrchive.errors import InvalidInput


def test_a_filter_needs_patch_wherever_the_files_come_from() -> None:
    require_patch_for_filter(False, False)  # no filter: a whole upload
    require_patch_for_filter(True, True)  # a filtered patch
    with pytest.raises(InvalidInput) as here:
        require_patch_for_filter(True, False)
    assert here.value.message.startswith("--include/--exclude need --patch: without it,")
    assert "equal to this directory and deletes every file that is not here" in here.value.message
    with pytest.raises(InvalidInput) as there:
        require_patch_for_filter(True, False, source=True)
    assert "equal to the source and deletes every file that is not there" in there.value.message
    assert there.value.message.endswith(
        "(it sends the new and changed files the filter selects and deletes nothing)"
    )


def test_files_s3_cannot_hold_and_directories_that_are_no_zarr(tmp_path: Path) -> None:
    refuse_sizes([])
    with pytest.raises(InvalidInput, match=r"1 file\(s\) larger than 5 TiB.*: big \("):
        refuse_sizes([("big", MAX_FILE_BYTES + 1)])
    with pytest.raises(InvalidInput, match="is empty"):
        require_zarr_root(str(tmp_path), 0)
    (tmp_path / "data").write_bytes(b"x")
    with pytest.raises(InvalidInput, match="is not a Zarr"):
        require_zarr_root(str(tmp_path), 1)
    (tmp_path / "zarr.json").write_bytes(b"{}")
    require_zarr_root(str(tmp_path), 2)
