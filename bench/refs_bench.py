"""fsspec reference files: generating one for a pinned state of 10^6 entries, and opening a
Zarr and reading one chunk through a reference file vs through the API's listing.

Usage::

    .venv/bin/python bench/refs_bench.py                       # both parts
    .venv/bin/python bench/refs_bench.py --generate 1000000 --open 0
    .venv/bin/python bench/refs_bench.py --generate 0 --open 10000

- **generate**: in a subprocess of its own (its peak RSS is the run's alone), a synthetic
  manifest of N entries (``arr/{a}/{b}/{c}``, ``bench/manifest_bench.py``'s listing, plus
  the array's ``.zarray``) is written to a temporary file, then turned into the reference file
  by :func:`zarrchive.services.zarr_engine.references.write_pinned_references`, the archive's own code
  path for a pinned state (the S3 transfers of the manifest and of the metadata documents
  are not in it: the manifest is read from local disk).
- **open**: starts SeaweedFS (``weed mini``) and the API (uvicorn in a thread, SQLite),
  uploads a Zarr of one array of N chunks with ``zarrchive.client.Uploader``, then each way,
  in a fresh subprocess, opens the Zarr and reads one chunk, ``--repeat`` times, alternating:
  ``refs``: stock fsspec's reference filesystem + zarr-python in ``.venv-s3fs`` (no
  zarrchive code) on ``GET /api/zarr/{id}/refs.json``; ``api``: ``zarrchive.open_store`` (the
  API's listing and metadata reads, chunks from the bucket).  Requests are counted at the
  API (a counting middleware); the reads straight from the bucket are not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# -- generate --------------------------------------------------------------------------------
def generate_child(n: int) -> None:
    from manifest_bench import T0, listing  # (bench/ is the script's first path)

    from zarrchive.manifest import ManifestEntry, generate_manifest
    from zarrchive.services.zarr_engine.references import write_pinned_references

    def entries() -> Iterator[ManifestEntry]:
        yield ManifestEntry("arr/.zarray", "v" * 32, T0, 300, "0" * 32)  # inlined
        yield from listing(n)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "manifest.json"
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as body:
            manifest = generate_manifest(entries(), body)
            with path.open("wb") as f:
                manifest.write_to(f)
        checksum = manifest.statistics.zarr_checksum
        start = time.perf_counter()
        out = Path(tmp) / "refs.json"
        with path.open("rb") as source, out.open("wb") as sink:
            count = write_pinned_references(
                source,
                sink,
                "https://bucket.s3.amazonaws.com/zarr/0b5e8c1c-5f5e-4a47-a1b2-000000000000/",
                checksum,
                lambda p, v: b'{"zarr_format": 2, "shape": [1]}',
            )
        elapsed = time.perf_counter() - start
        size = out.stat().st_size
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"files": count, "seconds": elapsed, "peak_rss_mib": peak, "bytes": size}))


def generate(n: int) -> None:
    out = subprocess.run(
        [sys.executable, __file__, "--generate-child", str(n)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    r = json.loads(out.strip().splitlines()[-1])
    print(
        f"generate: {r['files']:,} files in {r['seconds']:.2f} s, peak RSS "
        f"{r['peak_rss_mib']:.1f} MiB (target < 300), file {r['bytes'] / 2**20:.1f} MiB"
    )


# -- open and read one chunk -----------------------------------------------------------------
REFS_CHILD = """
import json, sys, time
import fsspec, zarr
url = sys.argv[1]
start = time.perf_counter()
fs = fsspec.filesystem("reference", fo=url, remote_protocol="http",
                       remote_options={"asynchronous": True}, asynchronous=True)
group = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True), mode="r", zarr_format=2)
value = group["arr"][0].tolist()
print(json.dumps({"seconds": time.perf_counter() - start, "value": value}))
"""


def api_child(address: str) -> None:
    import zarr

    from zarrchive.client.store import open_store

    start = time.perf_counter()
    store = open_store(address)
    try:
        value = zarr.open_group(store, mode="r", zarr_format=2)["arr"][0].tolist()
    finally:
        store.close()
    print(json.dumps({"seconds": time.perf_counter() - start, "value": value}))


class Counter:
    """ASGI middleware counting the API's requests."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.count += 1
        await self.app(scope, receive, send)


def run_child(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def open_and_read(n: int, repeat: int) -> None:
    import numpy as np
    import zarr
    from local_archive import local_archive  # (bench/ is the script's first path)

    from zarrchive.client import ApiClient, Uploader
    from zarrchive.client.upload import BatchRecords
    from zarrchive.services.identity.auth import create_user

    s3fs_python = os.environ.get("ZARRCHIVE_S3FS_PYTHON", str(ROOT / ".venv-s3fs/bin/python"))
    counter: Counter | None = None

    def counted(app: Any) -> Counter:
        nonlocal counter
        counter = Counter(app)
        return counter

    with local_archive("refs-bench-", wrap=counted) as (archive, url, work):
        assert counter is not None
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        env = {**os.environ, "ZARRCHIVE_URL": url, "ZARRCHIVE_STATE_DIR": str(work / "state")}
        env.pop("ZARRCHIVE_TOKEN", None)

        local = work / "bench.zarr"
        group = zarr.open_group(local, mode="w", zarr_format=2)
        array = group.create_array("arr", shape=(n, 4), chunks=(1, 4), dtype="int32")
        array[...] = np.arange(n * 4, dtype="int32").reshape(n, 4)
        with ApiClient(url, token=token) as client:
            dandiset = client.create_dandiset("bench")
            uploader = Uploader(client, jobs=16, records=BatchRecords(work / "state"))
            assert uploader.upload(local, dandiset=dandiset).ok
            found = client.find_zarr(dandiset, "bench.zarr")
            assert found is not None
            zarr_id = found.zarr_id
        files = sum(1 for p in local.rglob("*") if p.is_file())
        script = work / "refs_child.py"
        script.write_text(REFS_CHILD)
        ways = {
            "refs": [s3fs_python, str(script), f"{url}/api/zarr/{zarr_id}/refs.json"],
            "api": [sys.executable, __file__, "--api-child", zarr_id],
        }
        times: dict[str, list[float]] = {w: [] for w in ways}
        requests: dict[str, int] = {}
        for _ in range(repeat):
            for way, argv in ways.items():
                before = counter.count
                result = run_child(argv, env)
                assert result["value"] == [0, 1, 2, 3], result
                times[way].append(float(result["seconds"]))
                requests[way] = counter.count - before
        for way in ways:
            print(
                f"open+read one chunk of a {files:,}-file Zarr via {way}: median "
                f"{statistics.median(times[way]):.3f} s (min {min(times[way]):.3f}), "
                f"{requests[way]} API requests"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", type=int, default=1_000_000)
    parser.add_argument("--open", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--generate-child", type=int)
    parser.add_argument("--api-child")
    args = parser.parse_args()
    if args.generate_child is not None:
        generate_child(args.generate_child)
        return
    if args.api_child is not None:
        api_child(args.api_child)
        return
    if args.generate:
        generate(args.generate)
    if args.open:
        open_and_read(args.open, args.repeat)


if __name__ == "__main__":
    main()
