"""Manifest generation: time and peak RSS, streaming (ours) vs build-the-tree-then-dump.

Usage::

    .venv/bin/python bench/manifest_bench.py            # 10^5 and 10^6 entries, both approaches
    .venv/bin/python bench/manifest_bench.py --sizes 100000

Each measurement runs in its own subprocess (so peak RSS is that run's alone)
over a synthetic listing of ``arr/{a}/{b}/{c}`` chunk keys (100 per directory,
in S3 key order, generated lazily; the S3 listing itself is not measured).

- ``streaming``: :func:`zarrchive.manifest.generate_manifest` with a
  ``SpooledTemporaryFile`` body, then header + body copied into the output file.
- ``in-memory``: the proof of concept's approach, written from scratch here:
  collect the listing, build the whole nested dict, compute the statistics
  and the checksum (with ``zarr_checksum``, as the proof of concept does), then
  ``json.dump(..., indent=1)`` (arrays on several lines: the proof of concept
  uses a custom encoder for one-line arrays, which only makes it slower).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from zarrchive.manifest import ManifestEntry, format_timestamp, generate_manifest

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def listing(n: int) -> Iterator[ManifestEntry]:
    """*n* synthetic entries ``arr/{a}/{b}/{c}``, sorted by key as S3 lists them."""
    names = sorted(str(i) for i in range(100))
    tops = sorted(str(i) for i in range((n + 9999) // 10000))
    i = 0
    for a in tops:
        for b in names:
            for c in names:
                if i == n:
                    return
                yield ManifestEntry(
                    f"arr/{a}/{b}/{c}",
                    f"{i:032x}"[::-1],
                    T0 + timedelta(seconds=i),
                    1_000_000 + i % 4096,
                    f"{i:032x}",
                )
                i += 1


def run_streaming(n: int, out: Path) -> dict[str, Any]:
    with tempfile.SpooledTemporaryFile(max_size=8 << 20) as body:
        manifest = generate_manifest(listing(n), body)
        with out.open("wb") as f:
            manifest.write_to(f)
    return {"checksum": manifest.statistics.zarr_checksum}


def run_in_memory(n: int, out: Path) -> dict[str, Any]:
    from zarr_checksum import compute_zarr_checksum
    from zarr_checksum.generators import ZarrArchiveFile

    entries = list(listing(n))
    tree: dict[str, Any] = {}
    depth = 0
    for e in entries:
        *dirs, name = e.path.split("/")
        depth = max(depth, len(dirs))
        node = tree
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = [e.version_id, format_timestamp(e.last_modified), e.size, e.etag]
    checksum = compute_zarr_checksum(
        ZarrArchiveFile(path=Path(e.path), size=e.size, digest=e.etag) for e in entries
    ).digest
    newest = max((e.last_modified for e in entries), default=None)
    doc = {
        "schemaVersion": 2,
        "fields": ["versionId", "lastModified", "size", "ETag"],
        "statistics": {
            "entries": len(entries),
            "depth": depth,
            "totalSize": sum(e.size for e in entries),
            "lastModified": None if newest is None else format_timestamp(newest),
            "zarrChecksum": checksum,
            "zarrChecksumMismatch": None,
        },
        "entries": tree,
    }
    with out.open("w") as f:
        json.dump(doc, f, indent=1)
    return {"checksum": checksum}


def child(approach: str, n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "manifest.json"
        start = time.perf_counter()
        result = (run_streaming if approach == "streaming" else run_in_memory)(n, out)
        elapsed = time.perf_counter() - start
        size = out.stat().st_size
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps({**result, "seconds": elapsed, "peak_rss_mib": peak_kib / 1024, "bytes": size})
    )


#: What each S3 child measures: the manifest job (prefixes listed 1 or 8 at a time), or the
#: listing of current versions alone (one paginator, or prefixes listed P at a time).
S3_MODES = [
    "manifest/1",
    "manifest/8",
    "list/serial",
    "list/2",
    "list/4",
    "list/8",
    "list/16",
]


def s3_child(mode: str) -> None:
    """In its own process: one S3 measurement of the seeded Zarr (settings from the env)."""
    from zarrchive.config import Settings
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine import manifests

    archive = Archive.from_settings(Settings.from_env(), migrate=False)
    zarr_id = os.environ["BENCH_ZARR_ID"]
    kind, _, parallel = mode.partition("/")
    start = time.perf_counter()
    result: dict[str, Any] = {}
    if kind == "manifest":
        manifests.LIST_PARALLELISM = int(parallel)
        outcome = manifests.write_manifest(archive, zarr_id, force=True)
        result = {"status": outcome.status, "mismatch": outcome.mismatch}
    else:
        prefix = f"zarr/{zarr_id}/"
        if parallel == "serial":
            rows = (v for v in archive.store.iter_versions(prefix) if v.is_latest)
        else:
            rows = archive.store.iter_current_versions(prefix, parallel=int(parallel))
        result = {"status": "written", "mismatch": False, "entries": sum(1 for _ in rows)}
    elapsed = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({**result, "seconds": elapsed, "peak_rss_mib": peak_kib / 1024}))


def s3_run(n: int, modes: list[str]) -> None:
    """End to end on SeaweedFS: listing of current versions + generation + upload."""
    import hashlib
    import uuid

    from zarrchive.checksum import compute_checksum
    from zarrchive.config import Settings
    from zarrchive.db.models import Dandiset, Zarr
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.seaweedfs import SeaweedFS

    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3", "bench", "bench-secret")
        server.start()
        try:
            env = {
                **os.environ,
                "ZARRCHIVE_DATA_DIR": tmp,
                "ZARRCHIVE_DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
                "ZARRCHIVE_S3_ENDPOINT_URL": server.endpoint_url,
                "ZARRCHIVE_S3_ACCESS_KEY_ID": "bench",
                "ZARRCHIVE_S3_SECRET_ACCESS_KEY": "bench-secret",
            }
            archive = Archive.from_settings(Settings.from_env(env))
            zarr_id = str(uuid.uuid4())
            paths = [e.path for e in listing(n)]
            start = time.perf_counter()
            archive.store.map(lambda p: archive.store.put(f"zarr/{zarr_id}/{p}", p.encode()), paths)
            seeded = time.perf_counter() - start
            checksum = compute_checksum(
                (p, len(p.encode()), hashlib.md5(p.encode()).hexdigest()) for p in paths
            )
            with archive.db.session() as session:
                dandiset = Dandiset(name="bench")
                session.add(dandiset)
                session.flush()
                session.add(
                    Zarr(
                        id=zarr_id,
                        name="z",
                        dandiset_id=dandiset.id,
                        checksum=checksum,
                        file_count=n,
                        size=sum(len(p.encode()) for p in paths),
                    )
                )
            archive.close()
            print(f"seeded {n} objects in {seeded:.0f} s", flush=True)
            for mode in modes:
                proc = subprocess.run(
                    [sys.executable, __file__, "--s3-child", mode],
                    env={**env, "BENCH_ZARR_ID": zarr_id},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                assert r["status"] == "written" and not r["mismatch"], r
                assert r.get("entries", n) == n, r
                print(
                    f"{n:>9} {'S3 ' + mode:<14} {r['seconds']:>8.2f} {r['peak_rss_mib']:>13.1f} "
                    f"  ({n / r['seconds']:.0f} entries/s)",
                    flush=True,
                )
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--approaches", nargs="+", default=["streaming", "in-memory"])
    parser.add_argument("--child", nargs=2, metavar=("APPROACH", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--s3-child", metavar="MODE", help=argparse.SUPPRESS)
    parser.add_argument(
        "--s3-modes", nargs="+", default=S3_MODES, help=f"S3 measurements ({', '.join(S3_MODES)})"
    )
    parser.add_argument(
        "--s3",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="also measure end to end on SeaweedFS (seeded with N objects): listing + writing",
    )
    args = parser.parse_args()
    if args.s3_child:
        s3_child(args.s3_child)
        return
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print(f"{'entries':>9} {'approach':<10} {'seconds':>8} {'peak RSS MiB':>13} {'file MiB':>9}")
    checksums: dict[int, set[str]] = {}
    for n in args.sizes:
        for approach in args.approaches:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", approach, str(n)],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(proc.stdout)
            checksums.setdefault(n, set()).add(r["checksum"])
            print(
                f"{n:>9} {approach:<10} {r['seconds']:>8.2f} {r['peak_rss_mib']:>13.1f} "
                f"{r['bytes'] / 2**20:>9.1f}",
                flush=True,
            )
    for n, found in checksums.items():
        if len(found) != 1:
            raise SystemExit(f"the approaches disagree on the checksum of {n} entries: {found}")
    for n in args.s3:
        s3_run(n, args.s3_modes)


if __name__ == "__main__":
    main()
