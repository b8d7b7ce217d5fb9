"""CLI start-up and ``zarrchive checksum`` against ``zarrsum local``, whole processes.

Usage (from the repository root)::

    .venv/bin/python bench/startup_bench.py [--repeat 5] [--files 20000] [--before OTHER_CHECKOUT/.venv]

Rows, run alternately (``--repeat`` rounds, after one warm-up round), best and median wall
time and best CPU time (user + system) of each process:

- ``zarrchive --help`` of this checkout, and of ``--before`` (another checkout's venv, e.g.
  the main branch before this change), and ``python -c "import typer"`` (the floor: the
  CLI is typer);
- on a directory of ``--files`` files of 1-8 KiB (``bench/checksum_bench.py``'s layout),
  settled: ``zarrchive checksum --no-cache``, ``zarrchive checksum`` (digest cache filled
  by the warm-up) and ``zarrsum local`` (zarr-checksum's CLI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from checksum_bench import make_directory
from noop_bench import run

BIN = Path(sys.executable).parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--before", help="another venv whose zarrchive --help to time")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    with tempfile.TemporaryDirectory(prefix="zarrchive-startup-") as tmp:
        root = Path(tmp) / "bench.zarr"
        root.mkdir()
        make_directory(root, args.files)
        time.sleep(3.5)  # settled: the cache keeps only files not changed in the last 3 s
        cached_env = {**env, "ZARRCHIVE_CACHE_DIR": str(Path(tmp) / "cache")}
        rows: list[tuple[str, list[str], dict[str, str]]] = [
            ("`zarrchive --help`", [str(BIN / "zarrchive"), "--help"], env),
            (
                '`python -c "import typer"` (floor)',
                [str(BIN / "python"), "-c", "import typer; print()"],
                env,
            ),
        ]
        if args.before:
            before = str(Path(args.before) / "bin" / "zarrchive")
            rows.append(("`zarrchive --help`, before", [before, "--help"], env))
        checksum = [str(BIN / "zarrchive"), "checksum", str(root)]
        rows += [
            (
                f"`zarrchive checksum --no-cache` ({args.files:,} files)",
                [*checksum, "--no-cache"],
                env,
            ),
            (f"`zarrchive checksum`, cached ({args.files:,} files)", checksum, cached_env),
            (
                f"`zarrsum local` ({args.files:,} files)",
                [str(BIN / "zarrsum"), "local", str(root)],
                env,
            ),
        ]
        results: dict[str, list[tuple[float, float, str]]] = {name: [] for name, _, _ in rows}
        for _, argv, row_env in rows:
            run(argv, row_env)  # warm up (page cache, digest cache)
        for _ in range(args.repeat):
            for name, argv, row_env in rows:
                results[name].append(run(argv, row_env))
        print(f"### Start-up and checksum ({args.repeat} alternating runs)\n")
        print("| run | best s | median s | best CPU s |")
        print("|---|---:|---:|---:|")
        for name, measures in results.items():
            walls = [m[0] for m in measures]
            print(
                f"| {name} | {min(walls):.3f} | {statistics.median(walls):.3f} "
                f"| {min(m[1] for m in measures):.3f} |"
            )
        sums = {r[2] for name, rs in results.items() if "files)" in name for r in rs}
        print(f"\nchecksums agree: {sums}")


if __name__ == "__main__":
    main()
