"""Import from S3 (#39 item 1): ``zarrchive upload s3://BUCKET/PREFIX`` (the archive copies
server-side, each source object once, straight into place; the client sends names, sizes and
md5s only) against ``zarrchive upload DIR`` of the same files from local disk, in the same
run, on the same archive (its own SeaweedFS, SQLite, the API in a thread of this process;
each CLI a subprocess).

The source bucket holds the same files as the local directory (put before the clock
starts).  Each round uploads both into new Zarrs, alternating which goes first; with
``--streamed`` the client-streamed import (``--copy client``) is measured too.  Wall time
includes the CLI's start-up, the listing (or the local md5 pass), the batches and the wait
until the archive has applied every batch; every Zarr's checksum must be the local one's.
After each upload the archive's background work (manifests, staging drops) is let finish
before the next starts, so that no way pays for the one before it (that settling is not
counted).

    .venv/bin/python bench/import_bench.py [--files 3000] [--size 65536] [--jobs 16]
        [--rounds 2] [--streamed]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from local_archive import KEY, SECRET, local_archive

ROOT = Path(__file__).resolve().parents[1]
ZARRCHIVE = str(ROOT / ".venv" / "bin" / "zarrchive")
SOURCE = "import-source"


def make_files(root: Path, files: int, size: int) -> dict[str, bytes]:
    """A Zarr v3 of *files* chunks of *size* bytes (100 per directory) and its metadata."""
    data = {"zarr.json": b'{"zarr_format": 3, "node_type": "group"}'}
    for i in range(files - 1):
        data[f"a/c/{i // 100}/{i % 100}"] = os.urandom(size)
    for path, body in data.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(body)
    return data


def run(command: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[1:3])} failed: {done.stderr.strip()}")
    return elapsed, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--size", type=int, default=65536)
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--streamed", action="store_true")
    args = parser.parse_args()

    import httpx

    from zarrchive.jobs import InProcessJobQueue
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.runtime import set_current_archive

    with local_archive("import-bench-", import_buckets=(SOURCE,)) as (archive, url, work):
        endpoint = archive.settings.s3_endpoint_url
        assert endpoint is not None
        # batches are applied by the job queue, as `zarrchive serve` runs it (in-process)
        archive.jobs = InProcessJobQueue()
        set_current_archive(archive)
        local = work / "local.zarr"
        files = make_files(local, args.files, args.size)
        s3 = archive.store.client
        s3.create_bucket(Bucket=SOURCE)
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda item: s3.put_object(Bucket=SOURCE, Key=f"z/{item[0]}", Body=item[1]),
                    files.items(),
                )
            )
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        headers = {"Authorization": f"token {token}"}
        dandiset = httpx.post(f"{url}/api/dandisets/", json={"name": "b"}, headers=headers).json()[
            "identifier"
        ]
        env = {
            **os.environ,
            "ZARRCHIVE_URL": url,
            "ZARRCHIVE_TOKEN": token,
            "ZARRCHIVE_STATE_DIR": str(work / "state"),
            "ZARRCHIVE_CACHE_DIR": str(work / "cache"),
            "AWS_ACCESS_KEY_ID": KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
        base = [ZARRCHIVE, "upload"]
        common = ["--dandiset", dandiset, "--jobs", str(args.jobs)]
        s3_source = [f"s3://{SOURCE}/z", "--source-endpoint-url", endpoint]
        ways = {
            "local upload": lambda n: [*base, str(local), *common, "--path", f"local{n}.zarr"],
            "server-side import": lambda n: [
                *base,
                *s3_source,
                *common,
                "--path",
                f"server{n}.zarr",
                "--copy",
                "server",
            ],
        }
        if args.streamed:
            ways["streamed import"] = lambda n: [
                *base,
                *s3_source,
                *common,
                "--path",
                f"client{n}.zarr",
                "--copy",
                "client",
            ]
        times: dict[str, list[float]] = {way: [] for way in ways}
        for round_ in range(args.rounds):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for way in order:
                elapsed, said = run(ways[way](round_), env)
                times[way].append(elapsed)
                print(f"round {round_ + 1}, {way}: {elapsed:.1f} s: {said}", file=sys.stderr)
                settling = time.perf_counter()
                archive.jobs.join(timeout=300)  # the manifest, the drops of staging areas
                print(f"  then settled in {time.perf_counter() - settling:.1f} s", file=sys.stderr)
        load = os.getloadavg()
        print(
            f"\n{args.files} files of {args.size} bytes, --jobs {args.jobs}, {args.rounds} "
            f"rounds (alternating order); load average {load[0]:.1f} / {load[1]:.1f} / "
            f"{load[2]:.1f}\n"
        )
        print("| way | wall time per round (s) | best (s) | files/s (best) |")
        print("|---|---|---|---|")
        for way, seconds in times.items():
            listed = ", ".join(f"{s:.1f}" for s in seconds)
            best = min(seconds)
            print(f"| {way} | {listed} | {best:.1f} | {args.files / best:.0f} |")
        archive.jobs.close(wait=True, timeout=120)  # (manifest jobs, before S3 stops)


if __name__ == "__main__":
    main()
