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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--approaches", nargs="+", default=["streaming", "in-memory"])
    parser.add_argument("--child", nargs=2, metavar=("APPROACH", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
