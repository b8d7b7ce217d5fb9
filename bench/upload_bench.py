"""Upload throughput: ``zarrchive upload`` vs a plain boto3 parallel PUT, and a no-op re-upload.

Starts its own SeaweedFS (``weed mini``) and API server (uvicorn in a thread of this
process, SQLite in a temporary directory).  For each file size, the same files are
uploaded

- raw: ``put_object`` (with ``ContentMD5``) from a thread pool of ``--jobs`` threads,
  each thread reading its file from disk;
- presigned PUT only: httpx PUTs to presigned URLs made before the clock starts;
- presigned PUT + CopyObject: the same, each file then copied server-side to its final key
  (the S3 work of the archive's verified path, without the archive), the copies sent by
  boto3 (the floor the issue defines);
- the same with the copies sent as the archive sends them
  (:class:`~zarrchive.storage.signed_copy.CopySender`, about 1 ms of CPU less a copy than
  boto3): the floor of the same S3 work at the archive's own cost per request;
- zarrchive: ``zarrchive upload DIR --dandiset ID --jobs N`` as a subprocess (so the
  client does not share this process's GIL with the server), wall time including the
  CLI's start-up, the local md5 pass, batches and their server-side verification, and
  the wait at the end until the server has applied every batch (copies and tree).

Then a Zarr of ``--noop-files`` small files is uploaded once and re-uploaded unchanged.

    .venv/bin/python bench/upload_bench.py [--files 5000] [--jobs 16] [--noop-files 20000]
        [--batch-files N] [--rounds N] [--trace]

With ``--rounds N`` the floors (presigned PUT + CopyObject, boto3's copies and the
archive's) and ``zarrchive upload`` are measured N times per size, alternating which goes
first; the table shows the last round.
Each round also prints the CPU seconds each side spent, split into SeaweedFS, this process
(the floor's PUTs and copies, or the archive's server) and the ``zarrchive`` client: equal CPU
at a lower rate means the cores idled (waits, not work, are what the path loses).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import uvicorn
from botocore.config import Config

from zarrchive.api import create_app
from zarrchive.config import Settings
from zarrchive.jobs import InProcessJobQueue
from zarrchive.services.identity.auth import create_user
from zarrchive.services.runtime import Archive, set_current_archive
from zarrchive.storage.presign import Credentials, Presigner
from zarrchive.storage.seaweedfs import SeaweedFS, free_port
from zarrchive.storage.signed_copy import CopySender

KEY, SECRET = "bench", "bench-secret"
ROOT = Path(__file__).resolve().parents[1]
ZARRCHIVE = str(ROOT / ".venv" / "bin" / "zarrchive")


class CpuMeter:
    """CPU seconds (user + system) spent by SeaweedFS, this process (the archive's server, or
    the floor's PUTs and copies) and the ``zarrchive`` subprocesses since :meth:`start`."""

    def __init__(self, s3_pid: int) -> None:
        self.s3_pid = s3_pid
        self.since = self._now()

    def _now(self) -> tuple[float, float, float]:
        fields = Path(f"/proc/{self.s3_pid}/stat").read_text().rsplit(")", 1)[1].split()
        s3 = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        own = os.times()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return s3, own.user + own.system, children.ru_utime + children.ru_stime

    def start(self) -> None:
        self.since = self._now()

    def spent(self) -> str:
        s3, here, client = (b - a for a, b in zip(self.since, self._now(), strict=True))
        return f"CPU s3 {s3:.1f} s, here {here:.1f} s, client {client:.1f} s ({s3 + here + client:.1f} s)"


def make_files(root: Path, count: int, size: int) -> list[Path]:
    paths = []
    for i in range(count):
        path = root / "arr" / "c" / str(i // 100) / str(i % 100)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
        paths.append(path)
    (root / "zarr.json").write_bytes(b'{"zarr_format":3,"node_type":"group"}')
    paths.append(root / "zarr.json")
    return paths


def raw_put(s3: Any, bucket: str, prefix: str, root: Path, paths: list[Path], jobs: int) -> float:
    def put(path: Path) -> None:
        body = path.read_bytes()
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        key = prefix + path.relative_to(root).as_posix()
        s3.put_object(Bucket=bucket, Key=key, Body=body, ContentMD5=md5)

    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(put, paths))
    return time.perf_counter() - start


def raw_presigned_put(
    s3: Any,
    bucket: str,
    prefix: str,
    root: Path,
    paths: list[Path],
    jobs: int,
    *,
    copy: bool = False,
    copier: CopySender | None = None,
) -> float:
    """httpx PUTs to presigned URLs (md5s and URLs made before the clock starts).

    With *copy*, the S3 work of the archive's path alone: each file is PUT to a staging key,
    then copied server-side (``CopyObject``) to its final key, as the apply does.  On an S3
    whose copies share the uploads' machine (one SeaweedFS here) this is the floor of any path
    that verifies a file before it becomes visible.  With *copier*, the copies are sent by it
    (as the archive sends them) instead of boto3."""
    import httpx

    work = []
    for path in paths:
        md5 = base64.b64encode(hashlib.md5(path.read_bytes()).digest()).decode()
        relative = path.relative_to(root).as_posix()
        key = f"{prefix}staging/{relative}" if copy else prefix + relative
        url = s3.generate_presigned_url(
            "put_object", Params={"Bucket": bucket, "Key": key, "ContentMD5": md5}, ExpiresIn=3600
        )
        work.append((path, url, md5, key, f"{prefix}final/{relative}"))
    http = httpx.Client(limits=httpx.Limits(max_connections=jobs), timeout=120)

    def put(item: tuple[Path, str, str, str, str]) -> None:
        path, url, md5, key, final = item
        http.put(url, content=path.read_bytes(), headers={"Content-MD5": md5}).raise_for_status()
        if copy and copier is not None:
            copier.copy(key, final)
        elif copy:
            s3.copy_object(
                Bucket=bucket,
                Key=final,
                CopySource={"Bucket": bucket, "Key": key},
                MetadataDirective="COPY",
            )

    start = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(put, work))
    elapsed = time.perf_counter() - start
    http.close()
    return elapsed


def zarrchive_upload(
    local: Path, dandiset: str, jobs: int, env: dict[str, str], *, trace: bool = False
) -> float:
    # with *trace*: the CLI through bench/upload_trace.py, which prints a timeline of its steps
    command = [sys.executable, str(ROOT / "bench" / "upload_trace.py")] if trace else [ZARRCHIVE]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "upload", str(local), "--dandiset", dandiset, "--jobs", str(jobs)],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"zarrchive upload failed: {done.stderr.strip()}")
    print("   ", done.stdout.strip(), file=sys.stderr)
    if trace:
        print(done.stderr, file=sys.stderr)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--sizes", default="65536,262144")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--noop-files", type=int, default=20000)
    parser.add_argument(
        "--batch-files", type=int, default=0, help="the server's max_batch_files (0: default)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="floor and zarrchive measured N times per size, alternating which goes first "
        "(a new Zarr each round); prints each round's ratio and their median",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print a timeline of the client's and the server's upload steps (upload_trace.py)",
    )
    args = parser.parse_args()
    if args.trace:
        sys.path.insert(0, str(ROOT / "bench"))
        from upload_trace import trace_server

        trace_server()

    work = Path(tempfile.mkdtemp(prefix="upload-bench-"))
    seaweed = SeaweedFS(work / "seaweedfs", KEY, SECRET, public_read_buckets=["bench*"])
    seaweed.start()
    server: uvicorn.Server | None = None
    copier: CopySender | None = None
    try:
        s3 = boto3.client(
            "s3",
            endpoint_url=seaweed.endpoint_url,
            aws_access_key_id=KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
            config=Config(max_pool_connections=args.jobs, retries={"max_attempts": 3}),
        )
        for bucket in ("bench", "bench-embargoed"):
            s3.create_bucket(Bucket=bucket)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        settings = Settings.from_env({}).with_overrides(
            data_dir=work / "data",
            database_url=f"sqlite:///{work / 'bench.sqlite3'}",
            s3_endpoint_url=seaweed.endpoint_url,
            s3_bucket="bench",
            s3_embargo_bucket="bench-embargoed",
            s3_access_key_id=KEY,
            s3_secret_access_key=SECRET,
        )
        if args.batch_files:
            settings = settings.with_overrides(max_batch_files=args.batch_files)
        (work / "data").mkdir()
        archive = Archive.from_settings(settings)
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        # batches are applied by the job queue, as `zarrchive serve` runs it (in-process)
        jobs = archive.jobs = InProcessJobQueue()
        set_current_archive(archive)
        app = create_app(archive)
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "ZARRCHIVE_URL": url, "ZARRCHIVE_TOKEN": token}
        env["ZARRCHIVE_STATE_DIR"] = str(work / "state")
        import httpx

        dandiset = httpx.post(
            f"{url}/api/dandisets/",
            json={"name": "bench"},
            headers={"Authorization": f"token {token}"},
        ).json()["identifier"]

        assert seaweed.process is not None
        meter = CpuMeter(seaweed.process.pid)
        copier = CopySender(
            Presigner(seaweed.endpoint_url, Credentials(KEY, SECRET), "us-east-1"),
            seaweed.endpoint_url,
            "bench",
            connections=args.jobs + 4,
            connect_timeout=3,
            read_timeout=300,
        )
        rows = []
        for size in (int(s) for s in args.sizes.split(",")):
            local = work / f"files-{size}.zarr"
            paths = make_files(local, args.files, size)
            n = len(paths)
            total = sum(p.stat().st_size for p in paths)
            raw = raw_put(s3, "bench", f"raw-{size}/", local, paths, args.jobs)
            bare = raw_presigned_put(s3, "bench", f"bare-{size}/", local, paths, args.jobs)
            ratios: list[float] = []
            signed_ratios: list[float] = []
            for r in range(args.rounds):
                if r:  # a new Zarr each round (the asset path is the directory's name)
                    moved = local.with_name(f"files-{size}-round{r}.zarr")
                    local.rename(moved)
                    paths = [moved / p.relative_to(local) for p in paths]
                    local = moved

                took: dict[str, float] = {}
                cpu: dict[str, str] = {}
                sides = ("floor", "signed", "ours")
                for side in sides[::-1] if r % 2 else sides:  # alternating
                    meter.start()
                    if side != "ours":
                        took[side] = raw_presigned_put(
                            s3,
                            "bench",
                            f"{side}-{size}-{r}/",
                            local,
                            paths,
                            args.jobs,
                            copy=True,
                            copier=copier if side == "signed" else None,
                        )
                        cpu[side] = meter.spent()
                        continue
                    took[side] = zarrchive_upload(local, dandiset, args.jobs, env, trace=args.trace)
                    cpu[side] = meter.spent()
                    # the server's work left after the upload (staging drops, the manifest)
                    # is done before anything else is measured
                    if not jobs.join(timeout=300):
                        raise SystemExit("the archive's jobs did not finish")
                floor, signed, ours = took["floor"], took["signed"], took["ours"]
                ratios.append(floor / ours)
                signed_ratios.append(signed / ours)
                if args.rounds > 1:
                    print(
                        f"{size // 1024} KiB round {r + 1} ({'ours' if r % 2 else 'floor'} "
                        f"first, load {os.getloadavg()[0]:.1f}): floor {n / floor:.0f} files/s, "
                        f"floor with the archive's copies {n / signed:.0f} files/s, "
                        f"zarrchive {n / ours:.0f} files/s, ratio {floor / ours:.2f} "
                        f"(to the second floor {signed / ours:.2f})",
                        file=sys.stderr,
                    )
                print(
                    f"    floor: {cpu['floor']}; floor with the archive's copies: "
                    f"{cpu['signed']}; zarrchive: {cpu['ours']}",
                    file=sys.stderr,
                )
            if args.rounds > 1:
                for name, values in (
                    ("PUT + copy", ratios),
                    ("PUT + copy sent as the archive sends it", signed_ratios),
                ):
                    print(
                        f"{size // 1024} KiB: ratio to {name}, median of {args.rounds} rounds: "
                        f"{statistics.median(values):.2f} (rounds: "
                        f"{', '.join(f'{x:.2f}' for x in values)})",
                        file=sys.stderr,
                    )
            rows.append((size, n, total, raw, bare, floor, signed, ours))
            print(
                f"{size // 1024} KiB x {n}: raw {n / raw:.0f} files/s "
                f"{total / raw / 2**20:.1f} MiB/s; presigned PUT only {n / bare:.0f} files/s; "
                f"PUT + copy {n / floor:.0f} files/s (copies sent as the archive sends them "
                f"{n / signed:.0f}); zarrchive {n / ours:.0f} files/s "
                f"{total / ours / 2**20:.1f} MiB/s; ratio {raw / ours:.2f} / {bare / ours:.2f} "
                f"/ {floor / ours:.2f} / {signed / ours:.2f}",
                file=sys.stderr,
            )
            shutil.rmtree(local)

        if args.noop_files:
            local = work / "noop.zarr"
            make_files(local, args.noop_files, 1024)
            first = zarrchive_upload(local, dandiset, args.jobs, env)
            noop = zarrchive_upload(local, dandiset, args.jobs, env)
        startup_start = time.perf_counter()  # the CLI's own start-up
        subprocess.run([ZARRCHIVE, "--help"], stdout=subprocess.DEVNULL, check=True)
        startup = time.perf_counter() - startup_start

        print(
            "\n| files | size | boto3 put_object | presigned PUT only (httpx) "
            "| presigned PUT + CopyObject | the same, the archive's copies | zarrchive upload "
            "| ratio to boto3 | ratio to PUT only | ratio to PUT + copy "
            "| ratio to PUT + the archive's copies |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for size, n, total, raw, bare, floor, signed, ours in rows:
            cells = [
                f"{n / t:.0f} files/s, {total / t / 2**20:.1f} MiB/s ({t:.1f} s)"
                for t in (raw, bare, floor, signed, ours)
            ]
            print(
                f"| {n} | {size // 1024} KiB | {' | '.join(cells)} | {raw / ours:.2f} "
                f"| {bare / ours:.2f} | {floor / ours:.2f} | {signed / ours:.2f} |"
            )
        if args.noop_files:
            print(
                f"\nno-op re-upload of {args.noop_files + 1} files: {noop:.2f} s "
                f"(first upload {first:.1f} s; CLI start-up alone {startup:.2f} s)"
            )
    finally:
        if server is not None:
            server.should_exit = True
        if copier is not None:
            copier.close()
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
