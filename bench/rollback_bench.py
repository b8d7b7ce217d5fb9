"""Rolling a large Zarr back by ``--changed`` files (issue #38 item 1), against re-uploading
those files: the time until the Zarr is at rest at the earlier checksum, and the S3
requests each way.

A throwaway archive (:mod:`local_archive`: its own SeaweedFS, SQLite, the API in a thread,
no job queue: the request applies every batch before it answers).  The Zarr holds ``--files``
files ``d/{i // 1000}/{i % 1000}`` plus ``.zgroup``, a real Zarr in S3: seeded by a child
process (not measured) that PUTs every file as an object of its own (presigned by the
archive's signer, :data:`SEED_CONNECTIONS` in flight on pooled urllib3 connections: 200
to 700 PUTs/s on the shared 2-core machine, 48 min for 10^6 at load 12-36) and then writes the tree's ``.checksum`` nodes in
one update; then manifest A is listed from S3 (every object's version).  Then, in the same
run:

1. ``--changed`` files (every ``files // changed``-th) uploaded with new content through the
   real upload path (batches of 500, presigned PUTs): state B, its manifest from records;
2. **restore** ``POST /api/zarr/{id}/restore/`` to A (measured);
3. restore to B again (measured: the same work forward);
4. **re-upload** the ``--changed`` files of A through the upload path (measured): what a
   user does without a restore, knowing which files to send.

S3 requests are counted as they are sent: the archive's botocore clients (``before-send``),
its own signed copies (:class:`~zarrchive.storage.signed_copy.CopySender`), and the
uploader's presigned PUTs (one per file).  Each way ends with the checksum of A checked.

``--simulate`` seeds less: only ``.zgroup`` and the ``--changed`` files are PUT; the tree
(``.checksum`` nodes) and manifest A (a real listing with made-up entries, version ids
``sim-N``, merged in for the files left unwritten) hold every file all the same.  Nothing
measured touches an unchanged file's object (a restore copies only the differences, the
re-upload only its files), so the measured steps are the real ones either way.

Command (from the repository root):
``.venv/bin/python bench/rollback_bench.py --files 1000000 --changed 1000 [--simulate]``
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_archive import local_archive

BATCH = 500
PUT_THREADS = 16
#: PUTs in flight while seeding (setup, not measured)
SEED_CONNECTIONS = 128


def path_of(n: int) -> str:
    return f"d/{n // 1000}/{n % 1000}"


def body_of(n: int) -> bytes:
    return f"chunk {n}".encode()


def simulated_listing(listed: Iterator[Any], files: int) -> Iterator[Any]:
    """``--simulate``: the listing of the Zarr as if every file were written: the objects
    listed (``.zgroup`` and the files that will change), and for each file left unwritten an
    entry of its path, size and md5, a version id ``sim-{n}`` and the last-modified time of
    the objects listed, all in key order."""
    from zarrchive.manifest import ManifestEntry

    present = {entry.path: entry for entry in listed}
    stamp = max(entry.last_modified for entry in present.values())
    paths = sorted([(".zgroup", -1), *((path_of(n), n) for n in range(files))])
    for path, n in paths:
        if path in present:
            yield present.pop(path)
        else:
            body = body_of(n)
            yield ManifestEntry(path, f"sim-{n}", stamp, len(body), hashlib.md5(body).hexdigest())
    assert not present, present


def _seed(settings: Any, zarr_id: str, files: int, only: list[int] | None = None) -> None:
    """The Zarr's files PUT :data:`SEED_CONNECTIONS` at once, the tree at once (in a child
    process, so the PUTs do not share a GIL with the API).

    Setup, not measured: each file is one PUT (presigned by the archive's own signer, sent on
    a pooled urllib3 connection), every one a real object version in the archive's bucket;
    then the tree's ``.checksum`` nodes computed from the files' md5s in one update.

    *only* (``--simulate``): only these files (and ``.zgroup``) are PUT; the tree still holds
    every file."""
    import urllib3

    from zarrchive.content_types import zarr_content_type
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine.tree_updater import FileChange, apply_changes
    from zarrchive.services.zarr_engine.zarrs import get_zarr
    from zarrchive.storage.keys import zarr_object_key

    archive = Archive.from_settings(settings, migrate=False)
    store = archive.store
    http = urllib3.PoolManager(
        maxsize=SEED_CONNECTIONS, retries=urllib3.Retry(total=5, backoff_factor=0.5)
    )
    changes: dict[str, FileChange] = {}

    def put(item: tuple[str, bytes]) -> None:
        path, body = item
        key = zarr_object_key(zarr_id, path)
        md5 = hashlib.md5(body)
        kind = zarr_content_type(key)
        response = http.request(
            "PUT",
            store.presign_put(key, md5.hexdigest(), 3600, kind),
            body=body,
            headers={"Content-MD5": base64.b64encode(md5.digest()).decode(), "Content-Type": kind},
        )
        assert response.status == 200, (key, response.status, response.data)
        changes[path] = (md5.hexdigest(), len(body))

    def bodies() -> Iterator[tuple[str, bytes]]:
        yield ".zgroup", b'{"zarr_format": 2}'
        for n in range(files) if only is None else only:
            yield path_of(n), body_of(n)

    started = time.perf_counter()
    items = bodies()
    with ThreadPoolExecutor(SEED_CONNECTIONS) as pool:
        while chunk := list(itertools.islice(items, 20_000)):
            list(pool.map(put, chunk))
            rate = len(changes) / (time.perf_counter() - started)
            print(f"  seed: {len(changes)} objects PUT ({rate:.0f}/s)", flush=True)
    if only is not None:  # the files left unwritten are in the tree all the same
        for n in range(files):
            body = body_of(n)
            changes.setdefault(path_of(n), (hashlib.md5(body).hexdigest(), len(body)))
    with archive.db.write_session() as session:
        zarr = get_zarr(session, None, zarr_id, lock=True, check_read=False)
        state = apply_changes(store, zarr_id, changes)
        zarr.checksum, zarr.file_count, zarr.size = state.checksum, state.file_count, state.size
    print(f"  seed: tree written, {time.perf_counter() - started:.0f} s", flush=True)
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


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message} (load {os.getloadavg()[0]:.1f})", flush=True)


def peak_rss_mib() -> float:
    """This process's peak RSS (the archive, the API and the driver; not the seeding child)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def measured(counter: S3Requests, action: Callable[[], int]) -> dict[str, Any]:
    """Time and S3 requests of *action* (which returns the requests sent besides the
    archive's, e.g. the uploader's PUTs)."""
    before = counter.count
    started = time.perf_counter()
    extra = action()
    seconds = time.perf_counter() - started
    return {"seconds": round(seconds, 2), "s3_requests": counter.count - before + extra}


def run(files: int, changed: int, simulate: bool) -> dict[str, Any]:
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.zarr_engine import manifests
    from zarrchive.services.zarr_engine.manifests import write_manifest

    with local_archive("rollback-bench-") as (archive, url, _work):
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=3600)
        dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": "r.zarr", "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        step = max(1, files // changed)
        chosen = [n * step for n in range(changed)]
        started = time.monotonic()
        child = multiprocessing.get_context("spawn").Process(
            target=_seed, args=(archive.settings, zarr_id, files, chosen if simulate else None)
        )
        child.start()
        child.join()
        assert child.exitcode == 0
        seed_seconds = time.monotonic() - started
        log(f"seeded {files + 1} files: {seed_seconds:.0f} s")
        a = api.get(f"/api/zarr/{zarr_id}/").json()["checksum"]
        started = time.monotonic()
        listing = manifests.current_entries
        if simulate:
            manifests.current_entries = lambda store, zid, **kw: simulated_listing(
                listing(store, zid, **kw), files
            )
        try:
            listed = write_manifest(archive, zarr_id)
        finally:
            manifests.current_entries = listing
        manifest_seconds = time.monotonic() - started
        assert listed.listing_checksum == a, listed
        log(f"manifest A listed ({listed.entries} entries): {manifest_seconds:.0f} s")

        original = {path_of(n): body_of(n) for n in chosen}
        rewritten = {path_of(n): f"chunk {n}, changed".encode() for n in chosen}
        b, _puts = upload(api, zarr_id, rewritten)
        write_manifest(archive, zarr_id)
        log("state B uploaded, its manifest written")
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
        log(f"restore B -> A: {back}")
        forward = measured(counter, restore(b))
        log(f"restore A -> B: {forward}")
        uploaded = measured(counter, reupload)
        log(f"re-upload B -> A: {uploaded}")
        return {
            "files": files + 1,
            "simulated": simulate,
            "changed": changed,
            "restore_to_a": back,
            "restore_to_b": forward,
            "reupload_to_a": uploaded,
            "seed_s": round(seed_seconds, 1),
            "manifest_listed_s": round(manifest_seconds, 1),
            "load_average": os.getloadavg(),
            "peak_rss_mib": peak_rss_mib(),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=1000)
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="PUT only the files that change (and .zgroup); the tree and manifest A hold "
        "every file all the same (the others' entries made up: version ids sim-N)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = run(args.files, args.changed, args.simulate)
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
