"""Benchmark of the Dandi Zarr checksum: zarrchive against zarr-checksum 0.4.7.

Usage (from the repository root)::

    .venv/bin/python bench/checksum_bench.py [--sizes 100000,1000000] [--files 20000] [--jobs N]

(a) The tree hash over synthetic ``(path, size, md5)`` entries: several arrays with
    ``arr{i}/{x}/{y}/{z}`` chunk keys and their ``.zarray``/``.zattrs``, generated
    lazily in S3-listing (sorted) order.  Every row runs in its own subprocess, so its
    peak RSS (``ru_maxrss``) is honest; the time covers generating and hashing.
(b) A local directory of about ``--files`` small files (1-8 KiB, a nested v2 layout):
    ours (walk + md5 + tree), ``zarrsum local`` and zarr-checksum's library, and the
    limit: plain parallel md5 of the same (pre-listed) files with a thread pool.  Each
    runs once to warm up (page cache), then ``--repeat`` times; best and median shown.

Prints Markdown tables.  The machine may be shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
ARRAYS = 4
ROOT_FILES = [(".zattrs", 2_000), (".zgroup", 24), (".zmetadata", 15_000)]


# -- (a) synthetic entries ---------------------------------------------------------------------
def _grid(total: int) -> tuple[int, int, int]:
    """Chunk grid (x, y, z) of one array: 50 x 50 chunks per x, about total / ARRAYS chunks."""
    per_array = max(1, total // ARRAYS)
    return max(1, per_array // 2500), 50, 50


def entries(total: int) -> Iterator[tuple[str, int, str]]:
    """About *total* entries ``(path, size, md5)`` in S3 key order (lexicographic)."""
    gx, gy, gz = _grid(total)
    xs, ys, zs = (sorted(map(str, range(n))) for n in (gx, gy, gz))
    i = 0
    for name, size in ROOT_FILES:
        i += 1
        yield name, size, format(i * 0x9E3779B97F4A7C15F39CC0605CEDC835 % (1 << 128), "032x")
    for a in range(ARRAYS):
        base = f"arr{a}/"
        for name in (".zarray", ".zattrs"):
            i += 1
            yield (
                base + name,
                400,
                format(i * 0x9E3779B97F4A7C15F39CC0605CEDC835 % (1 << 128), "032x"),
            )
        for x in xs:
            for y in ys:
                prefix = f"{base}{x}/{y}/"
                for z in zs:
                    i += 1
                    # Compressed chunks of a 64^3 block: sizes vary around 256 KiB.
                    yield (
                        prefix + z,
                        200_000 + (i * 7919) % 62_144,
                        format(i * 0x9E3779B97F4A7C15F39CC0605CEDC835 % (1 << 128), "032x"),
                    )


def count_entries(total: int) -> int:
    gx, gy, gz = _grid(total)
    return len(ROOT_FILES) + ARRAYS * (2 + gx * gy * gz)


def _child_tree(kind: str, total: int) -> dict[str, Any]:
    if kind == "ours-grouped":
        from zarrchive.checksum import compute_checksum

        start = time.perf_counter()
        digest = compute_checksum(entries(total), grouped=True)
    elif kind == "ours-shuffled":
        from zarrchive.checksum import compute_checksum

        shuffled = list(entries(total))
        random.Random(0).shuffle(shuffled)
        start = time.perf_counter()
        digest = compute_checksum(shuffled)
    elif kind == "shuffled-list-only":
        shuffled = list(entries(total))
        random.Random(0).shuffle(shuffled)
        start = time.perf_counter()
        digest = ""
    elif kind == "zarr-checksum":
        from zarr_checksum import compute_zarr_checksum
        from zarr_checksum.generators import ZarrArchiveFile

        start = time.perf_counter()
        files = (ZarrArchiveFile(Path(p), s, d) for p, s, d in entries(total))
        digest = str(compute_zarr_checksum(files).digest)
    elif kind == "generate-only":
        start = time.perf_counter()
        digest = str(sum(1 for _ in entries(total)))
    else:
        raise SystemExit(f"unknown child {kind}")
    return {"seconds": time.perf_counter() - start, "digest": digest}


# -- (b) a local directory ------------------------------------------------------------------------
def make_directory(root: Path, files: int) -> None:
    """About *files* files of 1-8 KiB: a group with ARRAYS arrays of nested v2 chunk keys."""
    rnd = random.Random(0)
    (root / ".zgroup").write_text('{"zarr_format":2}')
    (root / ".zattrs").write_text('{"title":"bench"}')
    per_array = max(1, (files - 2) // ARRAYS - 1)
    side = 32
    for a in range(ARRAYS):
        array = root / f"arr{a}"
        array.mkdir()
        (array / ".zarray").write_text('{"zarr_format":2,"dimension_separator":"/"}')
        for k in range(per_array):
            directory = array / str(k // (side * side)) / str(k // side % side)
            directory.mkdir(parents=True, exist_ok=True)
            (directory / str(k % side)).write_bytes(rnd.randbytes(rnd.randint(1024, 8192)))


def _walk_files(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _, names in os.walk(root) for f in names]


def _child_local(kind: str, root: str, jobs: int) -> dict[str, Any]:
    if kind == "ours":
        from zarrchive.client.local import local_checksum

        start = time.perf_counter()
        digest = local_checksum(root, jobs=jobs)
    elif kind == "zarr-checksum":
        import logging

        from zarr_checksum import compute_zarr_checksum
        from zarr_checksum.generators import yield_files_local

        logging.disable(logging.CRITICAL)
        os.environ["TQDM_DISABLE"] = "1"
        start = time.perf_counter()
        digest = str(compute_zarr_checksum(yield_files_local(root)).digest)
    elif kind in ("limit-batched", "limit-per-file"):
        from zarrchive.client.local import md5_file

        paths = _walk_files(root)  # listed before the clock starts: no walk, no tree
        start = time.perf_counter()
        with ThreadPoolExecutor(jobs) as pool:
            if kind == "limit-batched":  # the same reader as ours, 64 files per task

                def batch(chunk: list[str]) -> list[tuple[int, str]]:
                    return [md5_file(p) for p in chunk]

                chunks = [paths[i : i + 64] for i in range(0, len(paths), 64)]
                results = [r for rs in pool.map(batch, chunks) for r in rs]
            else:  # one task per file, hashlib.file_digest

                def one(path: str) -> tuple[int, str]:
                    with open(path, "rb") as f:
                        return os.fstat(f.fileno()).st_size, hashlib.file_digest(
                            f, "md5"
                        ).hexdigest()

                results = list(pool.map(one, paths))
        digest = f"{len(results)} files"
    else:
        raise SystemExit(f"unknown child {kind}")
    return {"seconds": time.perf_counter() - start, "digest": digest}


# -- running children ------------------------------------------------------------------------------
def run_child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_command(command: list[str]) -> tuple[float, int, str]:
    """Wall time, peak RSS (KiB, from ``wait4``) and last stdout word of a command."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise SystemExit(f"{command} failed with {process.returncode}")
        out.seek(0)
        return seconds, usage.ru_maxrss, out.read().decode().split()[-1]


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def bench_tree(sizes: list[int]) -> None:
    print("### (a) Tree hash of synthetic entries (each row a separate process)\n")
    print("| entries | implementation | seconds | peak RSS (MiB) | vs zarr-checksum |")
    print("|---:|---|---:|---:|---|")
    for total in sizes:
        n = count_entries(total)
        rows = {
            kind: run_child("tree", kind, str(total))
            for kind in (
                "generate-only",
                "ours-grouped",
                "ours-shuffled",
                "shuffled-list-only",
                "zarr-checksum",
            )
        }
        reference = rows["zarr-checksum"]
        assert rows["ours-grouped"]["digest"] == reference["digest"], rows
        assert rows["ours-shuffled"]["digest"] == reference["digest"], rows
        labels = {
            "generate-only": "(generating the entries only)",
            "ours-grouped": "zarrchive, `grouped=True` (streaming)",
            "ours-shuffled": "zarrchive, shuffled list (sorts first; time excludes building it)",
            "shuffled-list-only": "(the shuffled list only: its memory)",
            "zarr-checksum": "zarr-checksum 0.4.7 `compute_zarr_checksum`",
        }
        for kind, row in rows.items():
            versus = ""
            if kind.startswith("ours"):
                versus = (
                    f"{reference['seconds'] / row['seconds']:.1f}x faster, "
                    f"{row['maxrss_kb'] / reference['maxrss_kb']:.2f}x RSS"
                )
            print(
                f"| {n:,} | {labels[kind]} | {row['seconds']:.2f} | {mib(row['maxrss_kb'])} "
                f"| {versus} |"
            )
        print(f"\nchecksum at {n:,} entries: `{reference['digest']}`\n")


def bench_local(files: int, jobs: int, repeat: int) -> None:
    print(f"### (b) Local directory: {files:,} files of 1-8 KiB, jobs={jobs}\n")
    with tempfile.TemporaryDirectory(prefix="zarrchive-bench-") as tmp:
        root = Path(tmp) / "bench.zarr"
        root.mkdir()
        make_directory(root, files)
        count = len(_walk_files(str(root)))
        total = sum(os.path.getsize(p) for p in _walk_files(str(root)))
        print(f"{count:,} files, {total / 2**20:.1f} MiB\n")
        ours_cli = [str(BIN / "zarrchive"), "checksum", "--jobs", str(jobs), str(root)]
        zarrsum_cli = [str(BIN / "zarrsum"), "local", str(root)]

        def child(kind: str) -> Callable[[], tuple[float, float, str]]:
            def measure() -> tuple[float, float, str]:
                row = run_child("local", kind, str(root), str(jobs))
                return row["seconds"], row["maxrss_kb"], row["digest"]

            return measure

        def command(argv: list[str]) -> Callable[[], tuple[float, float, str]]:
            return lambda: run_command(argv)

        children: dict[str, Callable[[], tuple[float, float, str]]] = {
            "zarrchive `local_checksum` (walk + md5 + tree, in process)": child("ours"),
            "limit: parallel md5 of the pre-listed files, 64 per task, same reader": child(
                "limit-batched"
            ),
            "limit: `pool.map` one file per task, `hashlib.file_digest`": child("limit-per-file"),
            "zarr-checksum `yield_files_local` (in process)": child("zarr-checksum"),
            "`zarrchive checksum` CLI (whole process)": command(ours_cli),
            "`zarrsum local` CLI (whole process)": command(zarrsum_cli),
        }
        results: dict[str, list[tuple[float, float, str]]] = {name: [] for name in children}
        for measure in children.values():
            measure()  # warm up
        for _ in range(repeat):  # interleaved, so that load changes hit every row alike
            for name, measure in children.items():
                results[name].append(measure())
        digests = {r[2] for name, rs in results.items() for r in rs if "limit" not in name}
        assert len(digests) == 1, digests
        print("| implementation | best s | median s | peak RSS (MiB) |")
        print("|---|---:|---:|---:|")
        for name, rows in results.items():
            times = [r[0] for r in rows]
            print(
                f"| {name} | {min(times):.3f} | {statistics.median(times):.3f} "
                f"| {mib(max(r[1] for r in rows))} |"
            )
        ours = [r[0] for r in results["zarrchive `local_checksum` (walk + md5 + tree, in process)"]]
        limit = [
            r[0]
            for r in results[
                "limit: parallel md5 of the pre-listed files, 64 per task, same reader"
            ]
        ]
        print(
            f"\nours / limit (speed, higher is better): best {min(limit) / min(ours):.2f}x, "
            f"median {statistics.median(limit) / statistics.median(ours):.2f}x; "
            f"checksum `{digests.pop()}`\n"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        section, kind, *rest = sys.argv[2:]
        if section == "tree":
            result = _child_tree(kind, int(rest[0]))
        else:
            result = _child_local(kind, rest[0], int(rest[1]))
        result["maxrss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(result))
        return
    from zarrchive.client.local import default_jobs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="entries for (a); '' skips")
    parser.add_argument("--files", type=int, default=20000, help="files for (b); 0 skips")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="threads for (b)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs for (b)")
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    if args.sizes:
        bench_tree([int(s) for s in args.sizes.split(",")])
    if args.files:
        bench_local(args.files, args.jobs, args.repeat)


if __name__ == "__main__":
    main()
