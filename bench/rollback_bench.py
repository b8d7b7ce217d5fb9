"""Rolling a large Zarr back by ``--changed`` files (issue #38 item 1), against re-uploading
those files: the time until the Zarr is at rest at the earlier checksum, and the S3
requests each way.

A throwaway archive (:mod:`local_archive`: its own SeaweedFS, SQLite, the API in a thread,
no job queue: the request applies every batch before it answers).  The Zarr holds ``--files``
files ``d/{i // 1000}/{i % 1000}`` (written straight into S3 and the tree by a child
process, then its manifest A listed).  Then, in the same run:

1. ``--changed`` files (every ``files // changed``-th) uploaded with new content through the
   real upload path (batches of 500, presigned PUTs): state B, its manifest from records;
2. **restore** ``POST /api/zarr/{id}/restore/`` to A (measured);
3. restore to B again (measured: the same work forward);
4. **re-upload** the ``--changed`` files of A through the upload path (measured): what a
   user does without a restore, knowing which files to send.

S3 requests are counted as they are sent: the archive's botocore clients (``before-send``),
its own signed copies (:class:`~zarrchive.storage.signed_copy.CopySender`), and the
uploader's presigned PUTs (one per file).  Each way ends with the checksum of A checked.

Command (from the repository root):
``.venv/bin/python bench/rollback_bench.py --files 100000 --changed 1000``
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_archive import local_archive

BATCH = 500
PUT_THREADS = 16


def path_of(n: int) -> str:
    return f"d/{n // 1000}/{n % 1000}"


def _seed(settings: Any, zarr_id: str, files: int) -> None:
    """The Zarr's files PUT in parallel, the tree at once (in a child process)."""
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine.tree_updater import FileChange, apply_changes
    from zarrchive.services.zarr_engine.zarrs import get_zarr
    from zarrchive.storage.keys import zarr_object_key

    archive = Archive.from_settings(settings, migrate=False)
    store = archive.store
    bodies = {path_of(n): f"chunk {n}".encode() for n in range(files)}
    bodies[".zgroup"] = b'{"zarr_format": 2}'
    store.map(lambda item: store.put(zarr_object_key(zarr_id, item[0]), item[1]), bodies.items())
    changes: dict[str, FileChange] = {
        p: (hashlib.md5(b).hexdigest(), len(b)) for p, b in bodies.items()
    }
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
    archive.close()


class S3Requests:
    """The archive's S3 requests: its botocore clients' and its signed copies'."""

    def __init__(self, store: Any) -> None:
        self.count = 0
        for client in {
            id(store.client): store.client,
            id(store.copy_client): store.copy_client,
        }.values():
            client.meta.events.register("before-send.s3", self._sent)
        copier = store._copier
        if copier is not None:
            send: Callable[..., Any] = copier._send

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.count += 1
                return send(*args, **kwargs)

            copier._send = counted

    def _sent(self, **_kwargs: Any) -> None:
        self.count += 1


def _put_all(urls: list[dict[str, Any]], files: dict[str, bytes]) -> set[int]:
    statuses = set()
    with httpx.Client(timeout=120) as s3:
        for url in urls:
            body = files[url["path"]]
            headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()}
            if url.get("content_type"):
                headers["Content-Type"] = url["content_type"]
            statuses.add(s3.put(url["upload_url"], content=body, headers=headers).status_code)
    return statuses


def upload(api: httpx.Client, zarr_id: str, files: dict[str, bytes]) -> tuple[str, int]:
    """Upload *files* in batches (applied before each answer): the checksum, the PUTs."""
    items = list(files.items())
    puts = 0
    checksum = ""
    with ThreadPoolExecutor(PUT_THREADS) as pool:
        for start in range(0, len(items), BATCH):
            batch = dict(items[start : start + BATCH])
            body = [{"path": p, "etag": hashlib.md5(b).hexdigest()} for p, b in batch.items()]
            opened = api.post(f"/api/zarr/{zarr_id}/upload/", json=body)
            assert opened.status_code == 200, opened.text
            urls = opened.json()
            shares = [urls[i::PUT_THREADS] for i in range(PUT_THREADS)]
            sent = pool.map(lambda share, chosen=batch: _put_all(share, chosen), shares)
            assert set().union(*sent) == {200}
            puts += len(urls)
            done = api.post(f"/api/zarr/{zarr_id}/upload/complete/", params={"wait": "true"})
            assert done.status_code == 200, done.text
            checksum = done.json()["checksum"]
    return checksum, puts


def measured(counter: S3Requests, action: Callable[[], int]) -> dict[str, Any]:
    """Time and S3 requests of *action* (which returns the requests sent besides the
    archive's, e.g. the uploader's PUTs)."""
    before = counter.count
    started = time.perf_counter()
    extra = action()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "s3_requests": counter.count - before + extra}


def run(files: int, changed: int) -> dict[str, Any]:
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.zarr_engine.manifests import write_manifest

    with local_archive("rollback-bench-") as (archive, url, _work):
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=3600)
        dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": "r.zarr", "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        started = time.monotonic()
        child = multiprocessing.get_context("spawn").Process(
            target=_seed, args=(archive.settings, zarr_id, files)
        )
        child.start()
        child.join()
        assert child.exitcode == 0
        seed_seconds = time.monotonic() - started
        a = api.get(f"/api/zarr/{zarr_id}/").json()["checksum"]
        started = time.monotonic()
        write_manifest(archive, zarr_id)
        manifest_seconds = time.monotonic() - started

        step = max(1, files // changed)
        chosen = [n * step for n in range(changed)]
        original = {path_of(n): f"chunk {n}".encode() for n in chosen}
        rewritten = {path_of(n): f"chunk {n}, changed".encode() for n in chosen}
        b, _puts = upload(api, zarr_id, rewritten)
        write_manifest(archive, zarr_id)
        counter = S3Requests(archive.store)

        def restore(checksum: str) -> Callable[[], int]:
            def call() -> int:
                response = api.post(f"/api/zarr/{zarr_id}/restore/", json={"checksum": checksum})
                assert response.status_code == 200, response.text
                answer = response.json()
                assert answer["applied"] and answer["copied"] == changed, answer
                assert api.get(f"/api/zarr/{zarr_id}/").json()["checksum"] == checksum
                return 0

            return call

        def reupload() -> int:
            checksum, puts = upload(api, zarr_id, original)
            assert checksum == a, (checksum, a)
            return puts

        back = measured(counter, restore(a))
        forward = measured(counter, restore(b))
        uploaded = measured(counter, reupload)
        return {
            "files": files + 1,
            "changed": changed,
            "restore_to_a": back,
            "restore_to_b": forward,
            "reupload_to_a": uploaded,
            "seed_s": round(seed_seconds, 1),
            "manifest_listed_s": round(manifest_seconds, 1),
            "load_average": os.getloadavg(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.files, args.changed)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
