"""Whole no-op commands against an archive: ``zarrchive upload``, ``verify``, ``download``.

Usage (from the repository root)::

    .venv/bin/python bench/noop_upload_bench.py --tree DIR [--files 100000] [--repeat 2]

Makes (or reuses) ``--tree``, a directory of small files (``bench/checksum_bench.py``'s
layout), starts a throwaway archive (``bench/local_archive.py``) and seeds its Zarr from the
local files' md5s (its ``.checksum`` nodes and root checksum; no object is stored: a no-op
never reads one), and the draft's asset for it (so that no timed run creates it).  Then, as
whole CLI processes:

- ``--first-runs`` rounds (default 1) of the first runs, each with an empty digest cache
  (every file read, the cache filled), beside the same command with ``--no-cache`` (every
  file read, nothing cached: the commands before the cache), in alternating order:
  ``zarrchive upload`` (a no-op: the Zarr is the directory), ``zarrchive verify`` and
  ``zarrchive checksum`` (the ``--no-cache`` ones left out with ``--skip-no-cache``);
- then ``--repeat`` times each, interleaved, with the cache of the last first upload:
  ``zarrchive upload`` (nothing changed), ``zarrchive verify`` and ``zarrchive download``
  into the same directory (nothing to fetch); with the ``--no-cache`` download once.

Wall and CPU (user + system) seconds of each process; the load average before and after.
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
from local_archive import local_archive
from patch_bench import run, seed_archive, zarrchive_command


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tree", required=True, help="the files' directory (made if missing)")
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--first-runs", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--skip-no-cache", action="store_true")
    args = parser.parse_args()

    root = Path(args.tree).resolve()
    if not root.exists():
        root.mkdir(parents=True)
        make_directory(root, args.files)
        time.sleep(3.5)  # settled: the cache keeps only files not changed in the last 3 s
    print(f"load average at start: {os.getloadavg()}", flush=True)
    from zarrchive.services.identity.auth import create_user

    with local_archive("noop-upload-bench-") as (archive, url, work):
        with archive.db.session() as session:
            _, token = create_user(session, "bench")
        import httpx

        api = httpx.Client(base_url=url, headers={"Authorization": f"token {token}"}, timeout=300)
        dandiset = api.post("/api/dandisets/", json={"name": "noop bench"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": root.name, "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        t0 = time.perf_counter()
        nodes, checksum = seed_archive(archive, zarr_id, root)
        print(
            f"seeded {nodes} directories in {time.perf_counter() - t0:.1f} s; {checksum}",
            flush=True,
        )
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": root.name}, "zarr_id": zarr_id},
        ).raise_for_status()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        env.update(ZARRCHIVE_URL=url, ZARRCHIVE_TOKEN=token)
        jobs = ["--jobs", str(args.jobs)]
        cli = zarrchive_command()
        upload = [*cli, "upload", str(root), "--dandiset", dandiset, *jobs]
        verify = [*cli, "verify", zarr_id, str(root), *jobs]
        download = [*cli, "download", zarr_id, str(root), *jobs]
        checksum_command = [*cli, "checksum", str(root), *jobs]
        rows: dict[str, list[tuple[float, float]]] = {}

        def timed(name: str, command: list[str], cache: str) -> None:
            wall, cpu, last = run(command, {**env, "ZARRCHIVE_CACHE_DIR": cache})
            rows.setdefault(name, []).append((wall, cpu))
            print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU; {last}", flush=True)

        cache = upload_cache = tempfile.mkdtemp(prefix="noop-bench-cache-", dir=work)
        for round_ in range(args.first_runs):
            for command, what in (
                (upload, "upload"),
                (verify, "verify"),
                (checksum_command, "checksum"),
            ):
                cache = tempfile.mkdtemp(prefix="noop-bench-cache-", dir=work)
                first = (f"`zarrchive {what}`, first run (empty cache)", command, cache)
                nocache = (f"`zarrchive {what} --no-cache`", [*command, "--no-cache"], cache)
                pair = [first] if args.skip_no_cache else [first, nocache]
                for name, argv, where in pair if round_ % 2 == 0 else pair[::-1]:
                    timed(name, argv, where)
                if what == "upload":
                    upload_cache = cache
        for _ in range(args.repeat):
            timed("`zarrchive upload`, no-op, cached", upload, upload_cache)
            timed("`zarrchive verify`, cached", verify, upload_cache)
            timed("`zarrchive download`, no-op, cached", download, upload_cache)
        if not args.skip_no_cache:
            timed("`zarrchive download --no-cache`, no-op", [*download, "--no-cache"], cache)
        api.close()

    print(f"\nload average at the end: {os.getloadavg()}\n")
    print("| run | best s | median s | best CPU s |")
    print("|---|---:|---:|---:|")
    for name, measures in rows.items():
        walls = [w for w, _ in measures]
        print(
            f"| {name} | {min(walls):.2f} | {statistics.median(walls):.2f} "
            f"| {min(c for _, c in measures):.2f} |"
        )


if __name__ == "__main__":
    main()
