"""Big files in a Zarr: `zarrchive upload` beside the S3 work alone of the same path.

A local Zarr of N big files plus M small ones goes up twice on one SeaweedFS, in the same run:

1. the floor: boto3 alone, no archive: each big file a multipart upload (``upload_file``,
   parts of the archive's part size, ``--jobs`` in parallel) to a staging key, then copied
   into place by a multipart ``UploadPartCopy`` (boto3's managed ``copy``); each small file
   ``put_object`` then ``copy_object``;
2. ``zarrchive upload`` (a subprocess) to the archive served in this process, with the
   in-process job queue applying the batches (as ``zarrchive serve`` does): the big files in
   parts, their md5 verified by the archive while it copies them into place.

Each side runs on a SeaweedFS of its own, deleted before the next starts (the disk holds
the local files and one side's objects at a time: about 3x the Zarr's size at the peak).

Peak RSS: the client's (the subprocess's ``ru_maxrss``) and the server's (this process's
RSS sampled every 0.1 s while the upload runs, minus nothing: the floor runs after it).
CPU time (user + system) of each process: the client, the archive (this process, while the
upload runs), SeaweedFS; for the floor, boto3 (this process) and SeaweedFS.  On a machine
whose cores are busy, the times follow the CPU each side needs, not its wall-clock design.

    .venv/bin/python bench/multipart_bench.py --big-files 3 --big-mib 1024 --small-files 1000
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from local_archive import KEY, SECRET, local_archive

ROOT = Path(__file__).resolve().parent.parent
ZARRCHIVE = str(ROOT / ".venv" / "bin" / "zarrchive")
MIB = 1024**2


def make_files(root: Path, big: int, big_size: int, small: int, small_size: int) -> int:
    (root / "big").mkdir(parents=True)
    (root / "small").mkdir()
    (root / ".zgroup").write_text('{"zarr_format": 2}')
    block = 8 * MIB
    for i in range(big):
        with open(root / "big" / str(i), "wb") as f:
            left = big_size
            while left:
                n = min(block, left)
                f.write(os.urandom(n))
                left -= n
    for i in range(small):
        (root / "small" / str(i)).write_bytes(os.urandom(small_size))
    return big * big_size + small * small_size + len('{"zarr_format": 2}')


def evict(root: Path) -> None:
    """Drop the local files' pages from the page cache (written back first), so that each side
    reads them from disk: without this, the side measured first reads files just written,
    partly from memory, and the order decides the ratio."""
    os.sync()
    for path in root.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of process *pid* so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def weed_pid(work: Path) -> int:
    """The SeaweedFS of the archive whose work directory is *work*."""
    found = subprocess.run(
        ["pgrep", "-f", f"weed mini -dir={work}"], capture_output=True, text=True, check=True
    )
    return int(found.stdout.split()[0])


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_now())

    def __enter__(self) -> RssSampler:
        self.peak = rss_now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def floor(s3: Any, local: Path, prefix: str, part_size: int, threshold: int, jobs: int) -> float:
    """boto3: multipart PUT of big files to staging + multipart copy into place; small files
    put_object + copy_object; every file of the Zarr, *jobs* in parallel."""
    from boto3.s3.transfer import TransferConfig

    big = TransferConfig(
        multipart_threshold=threshold + 1,
        multipart_chunksize=part_size,
        max_concurrency=jobs,
        use_threads=True,
    )
    files = sorted(p for p in local.rglob("*") if p.is_file())
    large = [p for p in files if p.stat().st_size > threshold]
    small = [p for p in files if p.stat().st_size <= threshold]

    def key(path: Path, where: str) -> str:
        return f"{prefix}{where}/{path.relative_to(local).as_posix()}"

    def put_small(path: Path) -> None:
        s3.put_object(Bucket="bench", Key=key(path, "staging"), Body=path.read_bytes())
        s3.copy_object(
            Bucket="bench",
            Key=key(path, "final"),
            CopySource={"Bucket": "bench", "Key": key(path, "staging")},
        )

    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(put_small, small))
    print(f"    floor: small files in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    for path in large:  # each big file's parts in parallel (as zarrchive sends them)
        started = time.perf_counter()
        s3.upload_file(str(path), "bench", key(path, "staging"), Config=big)
        sent = time.perf_counter()
        s3.copy(
            {"Bucket": "bench", "Key": key(path, "staging")},
            "bench",
            key(path, "final"),
            Config=big,
        )
        print(
            f"    floor: {path.name} PUT in {sent - started:.1f} s, "
            f"copied in {time.perf_counter() - sent:.1f} s",
            file=sys.stderr,
        )
    return time.perf_counter() - start


def zarrchive_upload(
    local: Path, dandiset: str, jobs: int, env: dict[str, str]
) -> tuple[float, int, float]:
    """``(seconds, client peak RSS, client CPU seconds)``: the subprocess's own figures
    (``wait4``), not those of every child reaped so far (a SeaweedFS already stopped)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            [ZARRCHIVE, "upload", str(local), "--dandiset", dandiset, "--jobs", str(jobs)],
            env=env,
            stdout=out,
            stderr=err,
            text=True,
        )
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"zarrchive upload failed: {err.read().strip()[-2000:]}")
        print("   ", out.read().strip()[-500:], file=sys.stderr)
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-files", type=int, default=3)
    parser.add_argument("--big-mib", type=int, default=6 * 1024, help="size of each big file")
    parser.add_argument("--small-files", type=int, default=1000)
    parser.add_argument("--small-kib", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument(
        "--threshold-mib",
        type=int,
        default=0,
        help="the archive's multipart threshold (0: default)",
    )
    parser.add_argument(
        "--floor-first",
        action="store_true",
        help="measure the floor first (by default `zarrchive upload` goes first)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure both sides this many times, alternating which goes first; the local "
        "files are evicted from the page cache before each side",
    )
    args = parser.parse_args()
    import logging

    logging.basicConfig(format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("zarrchive.services.zarr_engine.uploads").setLevel(logging.INFO)

    import boto3
    import httpx
    from botocore.config import Config

    from zarrchive.config import Settings
    from zarrchive.jobs import InProcessJobQueue
    from zarrchive.services.identity.auth import create_user
    from zarrchive.services.runtime import set_current_archive
    from zarrchive.services.zarr_engine.uploads.parts import part_size_for

    threshold = args.threshold_mib * MIB or Settings.from_env({}).multipart_threshold
    big_size = args.big_mib * MIB
    part_size = part_size_for(big_size, threshold)
    files = Path(tempfile.mkdtemp(prefix="multipart-bench-files-"))
    try:
        local = files / "big.zarr"
        total = make_files(local, args.big_files, big_size, args.small_files, args.small_kib * 1024)
        count = args.big_files + args.small_files + 1
        print(
            f"{count} files, {total / MIB:.0f} MiB; part size {part_size // MIB} MiB; "
            f"load {os.getloadavg()}",
            file=sys.stderr,
        )

        def run_ours() -> tuple[float, int, int, tuple[float, float, float]]:
            with local_archive("multipart-bench-", multipart_threshold=threshold) as (
                archive,
                url,
                work,
            ):
                archive.jobs = jobs = InProcessJobQueue()
                set_current_archive(archive)
                with archive.db.session() as session:
                    token = create_user(session, "bench")[1]
                env = {
                    **os.environ,
                    "ZARRCHIVE_URL": url,
                    "ZARRCHIVE_TOKEN": token,
                    "ZARRCHIVE_STATE_DIR": str(work / "state"),
                    "ZARRCHIVE_CACHE_DIR": str(work / "cache"),
                }
                dandiset = httpx.post(
                    f"{url}/api/dandisets/",
                    json={"name": "bench"},
                    headers={"Authorization": f"token {token}"},
                    timeout=120,
                ).json()["identifier"]
                weed = weed_pid(work)
                weed_before, server_before = cpu_of(weed), self_cpu()
                with RssSampler() as server_rss:
                    ours, client_rss, client_cpu = zarrchive_upload(local, dandiset, args.jobs, env)
                cpu = (client_cpu, self_cpu() - server_before, cpu_of(weed) - weed_before)
                print(
                    f"    zarrchive upload: {ours:.1f} s; load {os.getloadavg()}", file=sys.stderr
                )
                jobs.join(timeout=600)  # the manifest job, before its S3 goes away
            # the archive's SeaweedFS and its data are gone
            return ours, client_rss, server_rss.peak, cpu

        def run_floor() -> tuple[float, tuple[float, float]]:
            with local_archive("multipart-bench-floor-") as (archive, _url, work):
                s3 = boto3.client(
                    "s3",
                    endpoint_url=archive.settings.s3_endpoint_url,
                    aws_access_key_id=KEY,
                    aws_secret_access_key=SECRET,
                    region_name="us-east-1",
                    config=Config(max_pool_connections=2 * args.jobs, retries={"max_attempts": 3}),
                )
                weed = weed_pid(work)
                weed_before, boto_before = cpu_of(weed), self_cpu()
                base = floor(s3, local, "floor/", part_size, threshold, args.jobs)
                cpu = (self_cpu() - boto_before, cpu_of(weed) - weed_before)
                print(f"    floor: {base:.1f} s; load {os.getloadavg()}", file=sys.stderr)
            return base, cpu

        rounds = []
        for round_ in range(args.rounds):
            floor_first = args.floor_first != (round_ % 2 == 1)
            if floor_first:
                evict(local)
                base, floor_cpu = run_floor()
            evict(local)
            ours, client_rss, server_peak, ours_cpu = run_ours()
            if not floor_first:
                evict(local)
                base, floor_cpu = run_floor()
            rounds.append((floor_first, base, ours, client_rss, server_peak, ours_cpu, floor_cpu))
    finally:
        shutil.rmtree(files, ignore_errors=True)
    print(
        "\n| first | files | big files | MiB | boto3 multipart PUT + copy into place | "
        "`zarrchive upload` | ratio | client peak RSS | server peak RSS |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for floor_first, base, ours, client_rss, server_peak, _, _ in rounds:
        print(
            f"| {'floor' if floor_first else 'ours'} | {count} "
            f"| {args.big_files} x {args.big_mib} MiB | {total / MIB:.0f} "
            f"| {total / base / MIB:.0f} MiB/s ({base:.1f} s) "
            f"| {total / ours / MIB:.0f} MiB/s ({ours:.1f} s) | **{base / ours:.2f}** "
            f"| {client_rss / MIB:.0f} MiB | {server_peak / MIB:.0f} MiB |"
        )
    gib = total / 1024**3
    print("\nCPU seconds per GiB (user + system):\n")
    print("| first | side | client | archive | SeaweedFS | total |")
    print("|---|---|---:|---:|---:|---:|")
    for floor_first, _, _, _, _, ours_cpu, floor_cpu in rounds:
        first = "floor" if floor_first else "ours"
        print(
            f"| {first} | `zarrchive upload` | {ours_cpu[0] / gib:.2f} "
            f"| {ours_cpu[1] / gib:.2f} | {ours_cpu[2] / gib:.2f} | {sum(ours_cpu) / gib:.2f} |"
        )
        print(
            f"| {first} | floor (boto3) | {floor_cpu[0] / gib:.2f} | - "
            f"| {floor_cpu[1] / gib:.2f} | {sum(floor_cpu) / gib:.2f} |"
        )


if __name__ == "__main__":
    main()
