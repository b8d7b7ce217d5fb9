"""Latency of ``POST /api/zarr/{id}/upload/complete/`` (and time until applied) into big Zarrs.

The Zarr's existing content is seeded directly: its ``.checksum`` nodes are
computed from synthetic entries and written to S3, and its root checksum to the
database (the objects themselves are not needed by ``complete``, which only
verifies the batch's objects, copies them into place and rewrites the affected
nodes).  Then each iteration opens a batch of new files (``--batch``, 500 by
default), PUTs them through the presigned URLs and times ``complete``: the
request (verification and queueing; the server applies in the background, with
its in-process job queue as ``zarrchive serve`` runs it) and the time until the
batch is applied (polling the Zarr until ``upload_state`` is ``at_rest``).

    .venv/bin/python bench/complete_bench.py [--sizes 10000,100000,1000000] [--flat 100000]
        [--iterations 10] [--batch 500,1000,2000,5000]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn
from sqlalchemy import select

from zarrchive.api import create_app
from zarrchive.checksum import iter_directory_digests
from zarrchive.config import Settings
from zarrchive.db.models import Zarr
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.keys import checksum_node_key
from zarrchive.storage.objects import md5_to_content_md5
from zarrchive.storage.seaweedfs import SeaweedFS, free_port


def nested_entries(n: int) -> Iterator[tuple[str, int, str]]:
    """``arr/{i}/{j}/{k}`` chunk keys, 100 per leaf directory, plus metadata files."""
    yield ".zgroup", 24, hashlib.md5(b".zgroup").hexdigest()
    yield "arr/.zarray", 400, hashlib.md5(b".zarray").hexdigest()
    count = 0
    i = 0
    while count < n - 2:
        for j in range(10):
            for k in range(100):
                if count >= n - 2:
                    return
                path = f"arr/{i}/{j}/{k}"
                yield path, 262144, hashlib.md5(path.encode()).hexdigest()
                count += 1
        i += 1


def flat_entries(n: int) -> Iterator[tuple[str, int, str]]:
    for k in range(n):
        path = f"c{k}"
        yield path, 4096, hashlib.md5(path.encode()).hexdigest()


def seed(archive: Archive, zarr_id: str, entries: Iterator[tuple[str, int, str]]) -> int:
    """Write the nodes of *entries* and the root checksum; returns the number of nodes."""
    store = archive.store
    pending: list[tuple[str, bytes]] = []
    root = None
    written = 0
    for directory in iter_directory_digests(sorted(entries), grouped=True, with_nodes=True):
        assert directory.node_json is not None
        pending.append((checksum_node_key(zarr_id, directory.path), directory.node_json.encode()))
        if directory.path == "":
            root = directory
        if len(pending) >= 256:
            store.map(lambda kv: store.put(kv[0], kv[1], "application/json"), pending)
            written += len(pending)
            pending = []
    store.map(lambda kv: store.put(kv[0], kv[1], "application/json"), pending)
    written += len(pending)
    assert root is not None
    with archive.db.session() as session:
        zarr = session.scalar(select(Zarr).where(Zarr.id == zarr_id))
        assert zarr is not None
        zarr.checksum, zarr.file_count, zarr.size = root.digest, root.count, root.size
    return written


def batch_paths(layout: str, iteration: int, batch: int) -> list[str]:
    if layout == "flat":
        return [f"new-{iteration}-{k}" for k in range(batch)]
    # leaf directories of an existing array region, 100 new chunks each
    return [f"arr/{iteration}/{j}/new{k}" for j in range(batch // 100) for k in range(100)]


def percentile(times: list[float], q: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(
    api: httpx.Client, zarr_id: str, layout: str, iterations: int, batch: int
) -> tuple[list[float], list[float]]:
    """Per iteration: the request time of ``complete`` and the time until applied."""
    requests, applied = [], []
    with httpx.Client(timeout=120) as s3, ThreadPoolExecutor(16) as pool:
        for it in range(iterations):
            bodies = {p: f"{p}-{it}".encode() for p in batch_paths(layout, it, batch)}
            md5s = {p: hashlib.md5(b).hexdigest() for p, b in bodies.items()}
            urls = api.post(
                f"/api/zarr/{zarr_id}/upload/",
                json=[{"path": p, "etag": m} for p, m in md5s.items()],
            )
            if urls.status_code != 200:
                raise SystemExit(f"opening a batch: {urls.status_code} {urls.text[:300]}")

            def put(
                item: dict[str, str], bodies: dict[str, bytes] = bodies, md5s: dict[str, str] = md5s
            ) -> None:
                p = item["path"]
                s3.put(
                    item["upload_url"],
                    content=bodies[p],
                    headers={
                        "Content-MD5": md5_to_content_md5(md5s[p]),
                        "Content-Type": item["content_type"],  # signed by the URL
                    },
                ).raise_for_status()

            list(pool.map(put, urls.json()))
            start = time.perf_counter()
            done = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
            requests.append(time.perf_counter() - start)
            done.raise_for_status()
            while api.get(f"/api/zarr/{zarr_id}/").json()["upload_state"] != "at_rest":
                time.sleep(0.01)
            applied.append(time.perf_counter() - start)
    return requests, applied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--flat", default="100000", help="sizes of the flat layout")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--batch", default="500", help="files per batch (comma-separated)")
    args = parser.parse_args()
    configs = [("nested", int(n)) for n in args.sizes.split(",") if n]
    configs += [("flat", int(n)) for n in args.flat.split(",") if n]

    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3", "bench", "bench-secret")
        server.start()
        try:
            settings = Settings.from_env({}).with_overrides(
                data_dir=Path(tmp),
                database_url=f"sqlite:///{tmp}/bench.sqlite3",
                s3_endpoint_url=server.endpoint_url,
                s3_access_key_id="bench",
                s3_secret_access_key="bench-secret",
                max_batch_files=max(int(b) for b in args.batch.split(",") if b),
            )
            archive = Archive.from_settings(settings)
            with archive.db.session() as session:
                _, token = create_user(session, "bench")
            port = free_port()
            archive.jobs = InProcessJobQueue()  # as `zarrchive serve` runs it
            set_current_archive(archive)
            app = create_app(archive)
            uv = uvicorn.Server(
                uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
            )
            threading.Thread(target=uv.run, daemon=True).start()
            while not uv.started:
                time.sleep(0.05)
            api = httpx.Client(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"token {token}"},
                timeout=300,
            )
            dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
            print(
                f"{'layout':8} {'entries':>9} {'nodes':>7} {'batch':>6} {'seed s':>7} "
                f"{'req p50':>8} {'req p99':>8} {'appl p50':>8} {'appl p99':>8}"
            )
            batches = [int(b) for b in args.batch.split(",") if b]
            for layout, n in configs:
                zarr_id = api.post(
                    "/api/zarr/", json={"name": f"{layout}-{n}", "dandiset": dandiset}
                ).json()["zarr_id"]
                t0 = time.perf_counter()
                entries = flat_entries(n) if layout == "flat" else nested_entries(n)
                nodes = seed(archive, zarr_id, entries)
                seeded = time.perf_counter() - t0
                for batch in batches:
                    requests, applied = run(api, zarr_id, layout, args.iterations, batch)
                    print(
                        f"{layout:8} {n:>9} {nodes:>7} {batch:>6} {seeded:>7.1f} "
                        f"{statistics.median(requests):>8.3f} {percentile(requests, 0.99):>8.3f} "
                        f"{statistics.median(applied):>8.3f} {percentile(applied, 0.99):>8.3f}"
                    )
                    sys.stdout.flush()
            uv.should_exit = True
            archive.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
