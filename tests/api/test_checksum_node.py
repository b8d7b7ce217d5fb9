"""``GET /api/zarr/{id}/node/{path}``: a directory's ``.checksum`` node in one answer, exactly
the bytes the archive stores and hashes, however wide the directory."""

from __future__ import annotations

import hashlib

import httpx

from tests.helpers.api_uploads import FILES, oracle, upload
from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.seeded_zarr import chunk_files, seed_zarr
from zarrchive.checksum import EMPTY_CHECKSUM, ChecksumNode, iter_directory_digests
from zarrchive.checksum.tree import ZarrEntry
from zarrchive.services.runtime import Archive
from zarrchive.storage.keys import checksum_node_key

pytestmark = SQLITE_ONLY


def documents(files: dict[str, bytes]) -> dict[str, bytes]:
    """``directory -> its .checksum document`` for a Zarr holding *files* (the oracle's tree
    hash, with each node's exact bytes)."""
    entries = sorted(ZarrEntry(p, len(b), hashlib.md5(b).hexdigest()) for p, b in files.items())
    return {
        d.path: (d.node_json or "").encode("ascii")
        for d in iter_directory_digests(entries, grouped=True, with_nodes=True)
    }


def test_every_directory_s_node_is_answered_whole(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    upload(api, zarr_id, FILES)
    for directory, document in documents(FILES).items():
        response = api.get(f"/api/zarr/{zarr_id}/node/{directory}")
        assert response.status_code == 200, (directory, response.text)
        assert response.headers["content-type"] == "application/json"
        assert response.content == document
        assert response.content == archive.store.get(checksum_node_key(zarr_id, directory))
        listed = api.get(
            f"/api/zarr/{zarr_id}.zarr/" + (f"{directory}/" if directory else "")
        ).json()
        assert ChecksumNode.from_json(response.content).digest == listed["digest"]
    assert ChecksumNode.from_json(api.get(f"/api/zarr/{zarr_id}/node/").content).digest == (
        oracle(FILES)
    )
    # a trailing slash names the same directory
    assert api.get(f"/api/zarr/{zarr_id}/node/arr/sub/").content == documents(FILES)["arr/sub"]


def test_a_wide_directory_in_one_answer(
    api: httpx.Client, dandiset: str, zarr_id: str, archive: Archive
) -> None:
    """3,000 entries side by side (three pages of the listing routes): one answer."""
    files = {f"arr/{n}": f"chunk {n}".encode() for n in range(3000)}
    files.update(chunk_files("nested", 5))
    seed_zarr(archive, zarr_id, files)
    response = api.get(f"/api/zarr/{zarr_id}/node/arr")
    assert response.status_code == 200
    assert response.content == documents(files)["arr"]
    node = ChecksumNode.from_json(response.content)
    assert len(node.files) == 3000 and node.files["2999"].size == len(b"chunk 2999")


def test_missing_directories_and_the_empty_root(
    api: httpx.Client, zarr_id: str, archive: Archive
) -> None:
    empty = api.get(f"/api/zarr/{zarr_id}/node/")
    assert empty.status_code == 200
    assert ChecksumNode.from_json(empty.content).digest == EMPTY_CHECKSUM
    upload(api, zarr_id, FILES)
    for path in ("nowhere", "arr/0", "arr/nowhere/deeper"):  # arr/0 is a file
        response = api.get(f"/api/zarr/{zarr_id}/node/{path}")
        assert response.status_code == 404, path
        assert "has no directory" in response.json()["detail"]
    assert api.get(f"/api/zarr/{zarr_id}/node/arr/../x").status_code in (400, 404)
    assert api.get("/api/zarr/00000000-0000-0000-0000-000000000000/node/").status_code == 404


def test_an_embargoed_zarr_s_nodes_need_its_owner(
    api: httpx.Client, anon: httpx.Client, embargoed: tuple[str, str]
) -> None:
    _, zarr_id = embargoed
    upload(api, zarr_id, FILES)
    assert api.get(f"/api/zarr/{zarr_id}/node/arr").content == documents(FILES)["arr"]
    refused = anon.get(f"/api/zarr/{zarr_id}/node/arr")
    assert refused.status_code in (401, 404)
    assert b"digest" not in refused.content
