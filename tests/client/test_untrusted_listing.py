"""The client never writes outside its destination, whatever the archive lists."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.helpers.fake_archive import serving_json
from zarrchive.client import ApiClient
from zarrchive.client.remote import os_path, walk_remote
from zarrchive.errors import InvalidPath, TransferError

MD5 = "0" * 32


def listing(path: str) -> dict[str, object]:
    return {
        "type": "directory",
        "path": "",
        "digest": f"{MD5}-1--1",
        "file_count": 1,
        "size": 1,
        "directories": [],
        "files": [{"name": path.rpartition("/")[2], "path": path, "digest": MD5, "size": 1}],
        "next": None,
    }


@pytest.mark.parametrize(
    "path", ["../evil", "/etc/evil", "a\\..\\..\\evil", "x/../../evil", "elsewhere/evil", ""]
)
def test_paths_listed_by_a_lying_archive_are_refused(path: str) -> None:
    with (
        serving_json(listing(path)) as url,
        ApiClient(url) as client,
        pytest.raises(TransferError, match="refusing to use it"),
    ):
        walk_remote(client, str(uuid.uuid4()), {})


def test_os_path_never_leaves_the_root(tmp_path: Path) -> None:
    assert os_path(tmp_path, "a/b") == str(tmp_path / "a" / "b")
    for bad in ("../x", "/x", "a/../../x"):
        with pytest.raises(InvalidPath):
            os_path(tmp_path, bad)
