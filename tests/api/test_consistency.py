"""The invariants under stress: concurrent writers, a crash mid-update."""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
import pytest

from tests.helpers.api_uploads import (
    FILES,
    assert_nodes_match,
    info,
    open_and_put,
    oracle,
    put_files,
    upload,
)
from tests.helpers.zarr_client import md5
from zarrchive.checksum import compute_checksum
from zarrchive.services.runtime import Archive
from zarrchive.services.zarr_engine import tree_updater, uploads
from zarrchive.services.zarr_engine.fsck import fsck


def s3_listing_checksum(archive: Archive, zarr_id: str) -> tuple[str, dict[str, bytes]]:
    prefix = f"zarr/{zarr_id}/"
    entries = [(o.key[len(prefix) :], o.size, o.etag) for o in archive.store.iter_objects(prefix)]
    files = {p: archive.store.get(prefix + p) or b"" for p, _, _ in entries}
    return compute_checksum(entries), files


def test_concurrent_writers_keep_the_invariant(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any
) -> None:
    upload(api, zarr_id, FILES)
    statuses: list[int] = []
    errors: list[str] = []
    paths = [f"d{i % 3}/f{i}" for i in range(12)]

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=str(api.base_url), headers=api.headers, timeout=60) as client:
            for _ in range(8):
                op = rng.choice(["upload", "upload", "cancel", "delete"])
                try:
                    if op == "delete":
                        chosen = rng.sample(paths, 2)
                        r = client.request(
                            "DELETE",
                            f"/api/zarr/{zarr_id}/files/",
                            json=[{"path": p} for p in chosen],
                        )
                        statuses.append(r.status_code)
                        continue
                    batch = {p: f"{seed}-{rng.random()}".encode() for p in rng.sample(paths, 3)}
                    r = client.post(
                        f"/api/zarr/{zarr_id}/upload/",
                        json=[{"path": p, "etag": md5(b)} for p, b in batch.items()],
                    )
                    statuses.append(r.status_code)
                    if r.status_code != 200:
                        continue
                    put_files(r.json(), batch)
                    if op == "cancel":
                        r = client.delete(f"/api/zarr/{zarr_id}/upload/")
                    else:
                        r = client.post(f"/api/zarr/{zarr_id}/upload/complete/")
                    statuses.append(r.status_code)
                except Exception as exc:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert set(statuses) <= {200, 204, 400, 404, 409}, statuses
    assert 200 in statuses
    if api.get(f"/api/zarr/{zarr_id}/upload/").status_code == 204:
        assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    checksum, files = s3_listing_checksum(archive, zarr_id)
    assert info(api, zarr_id)["checksum"] == checksum == oracle(files)
    assert_nodes_match(archive, zarr_id, files, s3)
    assert fsck(archive, zarr_id).ok


def test_crash_mid_update_is_finished_by_the_next_write(
    api: httpx.Client, zarr_id: str, archive: Archive, s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload(api, zarr_id, FILES)
    batch = {"arr/0": b"changed", "arr/sub/deep/z": b"new", "top": b"top"}
    real_apply = tree_updater.apply_changes

    def crash_half_way(store: Any, zid: str, changes: Any) -> Any:
        first = dict(list(changes.items())[:1])
        real_apply(store, zid, first)  # some nodes written...
        raise RuntimeError("simulated crash")  # ...then the server dies

    monkeypatch.setattr(uploads.apply, "apply_changes", crash_half_way)
    open_and_put(api, zarr_id, batch)
    with httpx.Client(base_url=str(api.base_url), headers=api.headers) as crashing:
        assert crashing.post(f"/api/zarr/{zarr_id}/upload/complete/").status_code == 500
    monkeypatch.setattr(uploads.apply, "apply_changes", real_apply)
    # the database still holds the old checksum; the tree is half updated
    assert info(api, zarr_id)["checksum"] == oracle(FILES)
    # the next write notices and finishes the verified batch first
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=[{"path": "later", "etag": md5(b"l")}])
    assert response.status_code == 200, response.text
    final = {**FILES, **batch}
    assert info(api, zarr_id)["checksum"] == oracle(final)
    assert api.delete(f"/api/zarr/{zarr_id}/upload/").status_code == 204
    assert_nodes_match(archive, zarr_id, final, s3)
