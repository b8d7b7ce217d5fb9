"""Benchmark of the Dandi Zarr checksum: zarrchive against zarr-checksum 0.4.7.

Usage (from the repository root)::

    .venv/bin/python bench/checksum_bench.py [--sizes 100000,1000000] [--files 20000] [--jobs N]

(a) The tree hash over synthetic ``(path, size, md5)`` entries: several arrays with
    ``arr{i}/{x}/{y}/{z}`` chunk keys and their ``.zarray``/``.zattrs``, generated
    lazily in S3-listing (sorted) order.  Every row runs in its own subprocess, so its
    peak RSS (``VmHWM``) is its own; the time covers generating and hashing.
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

        start, cpu = time.perf_counter(), time.process_time()
        digest = compute_checksum(entries(total), grouped=True)
    elif kind == "ours-shuffled":
        from zarrchive.checksum import compute_checksum

        shuffled = list(entries(total))
        random.Random(0).shuffle(shuffled)
        start, cpu = time.perf_counter(), time.process_time()
        digest = compute_checksum(shuffled)
    elif kind == "shuffled-list-only":
        shuffled = list(entries(total))
        random.Random(0).shuffle(shuffled)
        start, cpu = time.perf_counter(), time.process_time()
        digest = ""
    elif kind == "zarr-checksum":
        from zarr_checksum import compute_zarr_checksum
        from zarr_checksum.generators import ZarrArchiveFile

        start, cpu = time.perf_counter(), time.process_time()
        files = (ZarrArchiveFile(Path(p), s, d) for p, s, d in entries(total))
        digest = str(compute_zarr_checksum(files).digest)
    elif kind == "generate-only":
        start, cpu = time.perf_counter(), time.process_time()
        digest = str(sum(1 for _ in entries(total)))
    else:
        raise SystemExit(f"unknown child {kind}")
    return {
        "seconds": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "digest": digest,
    }


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

        start, cpu = time.perf_counter(), time.process_time()
        digest = local_checksum(root, jobs=jobs)
    elif kind == "zarr-checksum":
        import logging

        from zarr_checksum import compute_zarr_checksum
        from zarr_checksum.generators import yield_files_local

        logging.disable(logging.CRITICAL)
        os.environ["TQDM_DISABLE"] = "1"
        start, cpu = time.perf_counter(), time.process_time()
        digest = str(compute_zarr_checksum(yield_files_local(root)).digest)
    elif kind in ("limit-strict", "limit-md5-file", "limit-per-file"):
        from zarrchive.client.local.hashing import _hash_batch, md5_file

        # Listed before the clock starts: no walk, no tree.
        listing = [(d, sorted(names)) for d, _, names in os.walk(root) if names]
        paths = [os.path.join(d, name) for d, names in listing for name in names]
        # The same files as runs (prefix, os prefix, names) of at most 64 files.
        runs = [
            (d + "/", d + "/", names[i : i + 64])
            for d, names in listing
            for i in range(0, len(names), 64)
        ]
        start, cpu = time.perf_counter(), time.process_time()
        with ThreadPoolExecutor(jobs) as pool:
            if kind == "limit-strict":  # our own batch hasher, 64 files per task
                hashed = pool.map(_hash_batch, [[run] for run in runs])
                count = sum(len(rows) for batch in hashed for _, rows in batch)
            elif kind == "limit-md5-file":  # the public md5_file, 64 files per task

                def batch(chunk: list[str]) -> list[tuple[int, str]]:
                    return [md5_file(p) for p in chunk]

                chunks = [paths[i : i + 64] for i in range(0, len(paths), 64)]
                count = len([r for rs in pool.map(batch, chunks) for r in rs])
            else:  # one task per file, hashlib.file_digest

                def one(path: str) -> tuple[int, str]:
                    with open(path, "rb") as f:
                        return os.fstat(f.fileno()).st_size, hashlib.file_digest(
                            f, "md5"
                        ).hexdigest()

                count = len(list(pool.map(one, paths)))
        digest = f"{count} files"
    else:
        raise SystemExit(f"unknown child {kind}")
    return {
        "seconds": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "digest": digest,
    }


# -- running children ------------------------------------------------------------------------------
def run_child(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_command(command: list[str]) -> tuple[float, float, int, str]:
    """Wall time, CPU time, peak RSS (KiB) and last stdout word of a command.

    Through GNU ``time``: the ``ru_maxrss`` a parent gets from ``wait4`` counts
    what the child inherited at ``fork``/``vfork`` (here, this process).
    """
    done = subprocess.run(
        ["/usr/bin/time", "-f", "%e %U %S %M", *command],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, user, system, maxrss = done.stderr.strip().splitlines()[-1].split()
    return float(seconds), float(user) + float(system), int(maxrss), done.stdout.split()[-1]


def peak_rss_kib() -> int:
    """This process's peak RSS since its ``exec`` (``VmHWM``)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # pragma: no cover


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


def bench_tree(sizes: list[int], repeat: int) -> None:
    print("### (a) Tree hash of synthetic entries (each row a separate process)\n")
    print(f"Best of {repeat} runs; time includes generating the entries, except where said.\n")
    print("| entries | implementation | seconds | CPU s | peak RSS (MiB) | vs zarr-checksum |")
    print("|---:|---|---:|---:|---:|---|")
    labels = {
        "generate-only": "(generating the entries only)",
        "ours-grouped": "zarrchive `compute_checksum(grouped=True)`, streaming",
        "ours-shuffled": "zarrchive `compute_checksum`, shuffled list (time: the hash only)",
        "shuffled-list-only": "(the shuffled list alone: its memory)",
        "zarr-checksum": "zarr-checksum 0.4.7 `compute_zarr_checksum`",
    }
    for total in sizes:
        n = count_entries(total)
        rows: dict[str, dict[str, Any]] = {}
        for _ in range(repeat):
            for kind in labels:
                row = run_child("tree", kind, str(total))
                if kind not in rows or row["seconds"] < rows[kind]["seconds"]:
                    rows[kind] = row
        reference = rows["zarr-checksum"]
        assert rows["ours-grouped"]["digest"] == reference["digest"], rows
        assert rows["ours-shuffled"]["digest"] == reference["digest"], rows
        for kind, row in rows.items():
            versus = ""
            if kind.startswith("ours"):
                versus = (
                    f"{reference['seconds'] / row['seconds']:.1f}x faster, "
                    f"{row['maxrss_kb'] / reference['maxrss_kb']:.2f}x the RSS"
                )
            print(
                f"| {n:,} | {labels[kind]} | {row['seconds']:.2f} | {row['cpu']:.2f} "
                f"| {mib(row['maxrss_kb'])} | {versus} |"
            )
        print(f"\nchecksum of the {n:,} entries: `{reference['digest']}`\n")


#: (seconds, CPU seconds, peak RSS KiB, checksum)
Measure = tuple[float, float, float, str]
OURS = "zarrchive `local_checksum` (walk + md5 + tree, in process)"
LIMIT = "limit: our batch hasher on the pre-listed files, 64 per task (no walk, no tree)"


def bench_local(files: int, jobs: int, repeat: int) -> None:
    print(f"### (b) Local directory: {files:,} files of 1-8 KiB, jobs={jobs}\n")
    with tempfile.TemporaryDirectory(prefix="zarrchive-bench-") as tmp:
        root = Path(tmp) / "bench.zarr"
        root.mkdir()
        make_directory(root, files)
        count = len(_walk_files(str(root)))
        total = sum(os.path.getsize(p) for p in _walk_files(str(root)))
        ours_cli = [str(BIN / "zarrchive"), "checksum", "--jobs", str(jobs), str(root)]
        zarrsum_cli = [str(BIN / "zarrsum"), "local", str(root)]

        def child(kind: str) -> Callable[[], Measure]:
            def measure() -> Measure:
                row = run_child("local", kind, str(root), str(jobs))
                return row["seconds"], row["cpu"], row["maxrss_kb"], row["digest"]

            return measure

        def command(argv: list[str]) -> Callable[[], Measure]:
            return lambda: run_command(argv)

        children: dict[str, Callable[[], Measure]] = {
            OURS: child("ours"),
            LIMIT: child("limit-strict"),
            "limit: `md5_file` per file, 64 files per task": child("limit-md5-file"),
            "limit: `pool.map` one file per task, `hashlib.file_digest`": child("limit-per-file"),
            "zarr-checksum `yield_files_local` (in process)": child("zarr-checksum"),
            "`zarrchive checksum` CLI (whole process)": command(ours_cli),
            "`zarrsum local` CLI (whole process)": command(zarrsum_cli),
        }
        results: dict[str, list[Measure]] = {name: [] for name in children}
        for measure in children.values():
            measure()  # warm up
        for _ in range(repeat):  # interleaved, so that load changes hit every row alike
            for name, measure in children.items():
                results[name].append(measure())
        digests = {r[3] for name, rs in results.items() for r in rs if "limit" not in name}
        assert len(digests) == 1, digests
        print(f"{count:,} files, {total / 2**20:.1f} MiB; {repeat} runs each after a warm-up.\n")
        print("| implementation | best s | median s | best CPU s | peak RSS (MiB) |")
        print("|---|---:|---:|---:|---:|")
        for name, rows in results.items():
            times = [r[0] for r in rows]
            print(
                f"| {name} | {min(times):.3f} | {statistics.median(times):.3f} "
                f"| {min(r[1] for r in rows):.3f} | {mib(max(r[2] for r in rows))} |"
            )
        ours = [r[0] for r in results[OURS]]
        limit = [r[0] for r in results[LIMIT]]
        print(
            f"\nours / limit (speed, higher is better): best {min(limit) / min(ours):.2f}x, "
            f"median {statistics.median(limit) / statistics.median(ours):.2f}x, "
            f"CPU {min(r[1] for r in results[LIMIT]) / min(r[1] for r in results[OURS]):.2f}x; "
            f"checksum `{digests.pop()}`\n"
        )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        section, kind, *rest = sys.argv[2:]
        if section == "tree":
            result = _child_tree(kind, int(rest[0]))
        else:
            result = _child_local(kind, rest[0], int(rest[1]))
        result["maxrss_kb"] = peak_rss_kib()
        print(json.dumps(result))
        return
    from zarrchive.client.local import default_jobs

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="entries for (a); '' skips")
    parser.add_argument("--files", type=int, default=20000, help="files for (b); 0 skips")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="threads for (b)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs for (b)")
    parser.add_argument("--tree-repeat", type=int, default=2, help="runs for (a), best kept")
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
    )
    if args.sizes:
        bench_tree([int(s) for s in args.sizes.split(",")], args.tree_repeat)
    if args.files:
        bench_local(args.files, args.jobs, args.repeat)


if __name__ == "__main__":
    main()
