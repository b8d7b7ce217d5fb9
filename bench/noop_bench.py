"""Benchmark of a no-op over a local Zarr: without, then with the digest cache.

Usage (from the repository root)::

    .venv/bin/python bench/noop_bench.py [--files 100000] [--repeat 3] [--jobs N] [--zarrsum]

Makes a directory of about ``--files`` small files (1-8 KiB, nested v2 chunk keys, the
layout of ``bench/checksum_bench.py``), waits until their timestamps are settled (the
cache does not keep files changed in the last 3 s), then times whole processes:

- ``zarrchive checksum --no-cache`` (today's behaviour, every file read);
- ``zarrchive checksum`` with an empty cache (the first run, filling the cache);
- ``zarrchive checksum`` again (the cached run);
- the local part of ``zarrchive verify``: before (``hash_local`` of every file, then the
  directory digests from the entries) and now (``scan_tree``: the cached directory digests,
  :mod:`zarrchive.client.local.tree`), cached;
- the local part of a no-op ``zarrchive upload``: as ``client/upload.py`` did it before the
  cache (``scan_local``, ``hash_local``, the directory digests) and as it does now (the
  survey, ``survey_tree``, finished into the tree), cached;
- with ``--zarrsum``, ``zarrsum local`` (zarr-checksum's CLI) for reference.

Each row runs once to warm up (page cache; for the cached rows, the cache), then
``--repeat`` times; best and median wall time and best CPU time (user + system of the
process) are shown.  The machine may be shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from checksum_bench import make_directory

BIN = Path(sys.executable).parent

VERIFY_LOCAL = """
import sys
from zarrchive.client.local import hash_local
from zarrchive.client.remote import local_digests
entries = hash_local(sys.argv[1], jobs=int(sys.argv[2]))
print(local_digests(entries)[""])
"""

CHECKSUM_BEFORE = """
import sys
from zarrchive.checksum import TreeHasher
from zarrchive.client.local.digest_cache import default_cache
from zarrchive.client.local.hashing import hash_tree
print(hash_tree(sys.argv[1], int(sys.argv[2]), None, TreeHasher(), default_cache()).digest)
"""

VERIFY_TREE = """
import sys
from zarrchive.client.local.digest_cache import default_cache
from zarrchive.client.local.tree import scan_tree
print(scan_tree(sys.argv[1], cache=default_cache(), jobs=int(sys.argv[2])).checksum)
"""

UPLOAD_TREE = """
import sys
from zarrchive.client.local.digest_cache import default_cache
from zarrchive.client.local.tree import survey_tree
from zarrchive.client.upload import MAX_FILE_BYTES
survey = survey_tree(sys.argv[1], cache=default_cache(), jobs=int(sys.argv[2]), limit=MAX_FILE_BYTES)
print(survey.tree().checksum)
"""

UPLOAD_LOCAL = """
import sys
from zarrchive.client.local import hash_local
from zarrchive.client.remote import local_digests
from zarrchive.client.upload import scan_local
scan_local(sys.argv[1])
entries = hash_local(sys.argv[1], jobs=int(sys.argv[2]))
print(local_digests(entries)[""])
"""


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one process, and the last line it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, (done.stdout.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=min(32, (os.cpu_count() or 1) + 2))
    parser.add_argument("--zarrsum", action="store_true", help="add `zarrsum local`")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="warm up with the first row only (the cached rows follow the first run's)",
    )
    parser.add_argument(
        "--skip-before", action="store_true", help="leave out the rows of the code before"
    )
    parser.add_argument("--dir", help="where to make the temporary directory")
    parser.add_argument(
        "--tree", help="the files' directory: made if missing, else reused (not removed)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="zarrchive-noop-", dir=args.dir) as tmp:
        root = Path(args.tree) if args.tree else Path(tmp) / "bench.zarr"
        if not root.exists():
            root.mkdir(parents=True)
            started = time.perf_counter()
            make_directory(root, args.files)
            print(f"made the files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            time.sleep(3.5)  # settled: the cache keeps only files not changed in the last 3 s
        count = sum(len(names) for _, _, names in os.walk(root))
        jobs = str(args.jobs)
        python = str(BIN / "python")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        cached_env = {**env, "ZARRCHIVE_CACHE_DIR": str(Path(tmp) / "cache")}
        no_cache_env = {**env, "ZARRCHIVE_NO_CACHE": "1"}
        before_env = {**env, "ZARRCHIVE_CACHE_DIR": str(Path(tmp) / "cache-before")}
        checksum = [str(BIN / "zarrchive"), "checksum", "--jobs", jobs, str(root)]
        rows: list[tuple[str, list[str], dict[str, str], bool]] = [
            ("`zarrchive checksum --no-cache`", checksum, no_cache_env, False),
            ("`zarrchive checksum`, first run (empty cache)", checksum, cached_env, True),
            ("`zarrchive checksum`, cached", checksum, cached_env, False),
            (
                "checksum, first run, before (file-level cache only, in process)",
                [python, "-c", CHECKSUM_BEFORE, str(root), jobs],
                before_env,
                True,
            ),
            (
                "verify local part, before (`hash_local` + tree of entries), cached",
                [python, "-c", VERIFY_LOCAL, str(root), jobs],
                cached_env,
                False,
            ),
            (
                "verify local part, now (`scan_tree`), cached",
                [python, "-c", VERIFY_TREE, str(root), jobs],
                cached_env,
                False,
            ),
            (
                "upload no-op local part, before (`scan_local` + `hash_local`), cached",
                [python, "-c", UPLOAD_LOCAL, str(root), jobs],
                cached_env,
                False,
            ),
            (
                "upload no-op local part now (`survey_tree`), cached",
                [python, "-c", UPLOAD_TREE, str(root), jobs],
                cached_env,
                False,
            ),
        ]
        if args.skip_before:
            rows = [row for row in rows if "before" not in row[0] and "today" not in row[0]]
        if args.zarrsum:
            rows.append(("`zarrsum local`", [str(BIN / "zarrsum"), "local", str(root)], env, False))
        cache_file = Path(tmp) / "cache" / "digests.sqlite3"
        results: dict[str, list[tuple[float, float, str]]] = {name: [] for name, *_ in rows}
        for _name, argv, row_env, empty_cache in rows[: 1 if args.quick else len(rows)]:
            if not empty_cache:
                run(argv, row_env)  # warm up
        for _ in range(args.repeat):  # interleaved, so that load changes hit every row alike
            for name, argv, row_env, empty_cache in rows:
                if empty_cache:
                    emptied = Path(row_env["ZARRCHIVE_CACHE_DIR"]) / "digests.sqlite3"
                    for suffix in ("", "-wal", "-shm"):
                        Path(str(emptied) + suffix).unlink(missing_ok=True)
                results[name].append(run(argv, row_env))
        digests = {r[2] for rs in results.values() for r in rs}
        assert len(digests) == 1, digests
        size = cache_file.stat().st_size if cache_file.exists() else 0
        print(
            f"### No-op over {count:,} local files of 1-8 KiB (jobs={jobs}, {args.repeat} runs)\n"
        )
        print("| run | best s | median s | best CPU s |")
        print("|---|---:|---:|---:|")
        for name, measures in results.items():
            walls = [m[0] for m in measures]
            print(
                f"| {name} | {min(walls):.2f} | {statistics.median(walls):.2f} "
                f"| {min(m[1] for m in measures):.2f} |"
            )
        print(f"\ncache file: {size / 2**20:.1f} MiB; checksum `{digests.pop()}`")


if __name__ == "__main__":
    main()
