"""The scale run: a Zarr of N small files written through the real path, then every operation
on it, with wall time and peak RSS of the server and of the client.

The archive runs as ``zarrchive serve`` in a process of its own (jobs in-process) on a
SeaweedFS of the bench's own and SQLite (or ``--database-url``).  The Zarr has a nested chunk
layout, ``arr/{i}/{j}/{k}`` (100 chunks per leaf directory, 10 leaves per ``arr/{i}``) plus
``.zgroup`` and ``arr/.zarray``; every file is written locally too (the client commands need
it).  The write phase is what the client does, with a parallel PUT driver in place of the CLI:
open a batch of the server's ``max_batch_files`` (``POST /upload/``), PUT every file to its
presigned URL (``--jobs`` at once), ``POST /upload/complete/``.  Then, in order:

- ``complete`` p50/p99 per size decade of the Zarr;
- listings (``GET /api/zarr/{id}.zarr/{directory}``) at the root and a leaf, cold then warm;
- the manifest end to end: from the last ``complete`` until the manifest of the final checksum
  is listed, and ``ListObjectVersions`` of the Zarr alone (one paginator, then the parallel
  listing of ``ObjectStore.iter_current_versions``) for comparison;
- ``zarrchive admin fsck``; a no-op ``zarrchive upload``; ``zarrchive verify``;
  ``zarrchive download`` of a subtree (``arr/0`` removed locally first, the rest identical:
  the downloader skips identical subtrees); ``zarrchive publish``.

With ``--floor-every N`` (default: a tenth of the Zarr), the write stops every N files for a
floor sample: ``--floor-files`` files of the same size PUT to presigned URLs (with
``Content-MD5``, ``--jobs`` at once) and each copied into place (``CopyObject``): the S3 work
of any path that verifies a file before it becomes visible, measured on the same SeaweedFS,
as full as the Zarr is at that moment, between the write's segments (the sample's objects
are deleted after it).  Each segment ends when its files are applied (the write rate is that
of the verified path, copies included), and its rate is printed beside its floor sample.

The archive publishes in snapshot mode (``ZARRCHIVE_PUBLISHED_ZARRS=snapshot``), and after the
first manifest the run times what issue #23 asks of records-based manifests: a 500-file batch
(half overwrites, half new files) and the manifest of its checksum after the Zarr is at rest;
another such batch, then ``zarrchive publish`` (which makes that manifest first).  The no-op
commands run with the client's digest cache in the bench's work directory: ``--no-cache``
first, then the first run (empty cache), then cached.

Peak RSS: the server's ``VmHWM`` (reset before each phase through ``/proc/PID/clear_refs``);
each client command's own ``ru_maxrss`` (``os.wait4``); the write driver's (this process).

    .venv/bin/python bench/scale_bench.py --files 100000 [--file-size 1024] [--jobs 16]
        [--floor-every N] [--floor-files 2000] [--database-url URL] [--json FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from zarrchive.storage.objects import ObjectStore, md5_to_content_md5
from zarrchive.storage.seaweedfs import SeaweedFS, free_port

ACCESS_KEY, SECRET_KEY = "scale-bench", "scale-bench-secret"
BUCKET = "zarrchive-scale"
ZARR_NAME = "bench.zarr"
LEAF = "arr/0/0"


def zarrchive_command() -> list[str]:
    script = Path(sys.executable).with_name("zarrchive")
    return [str(script)] if script.exists() else [sys.executable, "-m", "zarrchive.cli"]


# -- the Zarr ---------------------------------------------------------------------------------
def zarr_paths(n: int) -> Iterator[str]:
    """*n* paths: group and array metadata, then ``arr/{i}/{j}/{k}`` chunks."""
    yield ".zgroup"
    if n > 1:
        yield "arr/.zarray"
    count, i = 2, 0
    while count < n:
        for j in range(10):
            for k in range(100):
                if count >= n:
                    return
                yield f"arr/{i}/{j}/{k}"
                count += 1
        i += 1


def content(path: str, size: int) -> bytes:
    seed = hashlib.sha256(path.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def write_local(root: Path, paths: list[str], size: int) -> None:
    made: set[Path] = set()
    for path in paths:
        target = root / path
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        target.write_bytes(content(path, size))


# -- measuring --------------------------------------------------------------------------------
def vm_hwm_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak(pid: int | str = "self") -> None:
    """Reset the process's peak RSS (Linux: ``echo 5 > /proc/PID/clear_refs``)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class Phase:
    name: str
    seconds: float
    server_peak_mib: float
    client_peak_mib: float | None = None
    detail: str = ""


@dataclass
class Results:
    files: int
    file_size: int
    batch_files: int
    database: str
    machine: str
    complete: list[dict[str, Any]] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    #: per write segment: files before it, its files/s, the floor sample's files/s after it
    segments: list[dict[str, Any]] = field(default_factory=list)


def run_client(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run a CLI command; (seconds, its peak RSS in MiB, output).  Fails loudly."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}:\n{output[-3000:]}")
    lines = [line for line in output.strip().splitlines() if "NOTE:" not in line]
    return seconds, usage.ru_maxrss / 1024, lines[-1] if lines else ""


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args = args
        self.work = work
        self.s3 = SeaweedFS(work / "s3", ACCESS_KEY, SECRET_KEY, public_read_buckets=[BUCKET])
        self.port = free_port()
        self.database_url = args.database_url or f"sqlite:///{work / 'scale.sqlite3'}"
        self.server: subprocess.Popen[bytes] | None = None
        self.token = ""

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        env.update(
            ZARRCHIVE_DATA_DIR=str(self.work / "data"),
            ZARRCHIVE_DATABASE_URL=self.database_url,
            ZARRCHIVE_S3_ENDPOINT_URL=self.s3.endpoint_url,
            ZARRCHIVE_S3_BUCKET=BUCKET,
            ZARRCHIVE_S3_ACCESS_KEY_ID=ACCESS_KEY,
            ZARRCHIVE_S3_SECRET_ACCESS_KEY=SECRET_KEY,
            # the bench publishes minimal metadata: it measures the Zarr, not the metadata
            ZARRCHIVE_PUBLISH_REQUIRES_VALID="false",
            ZARRCHIVE_PUBLISHED_ZARRS="snapshot",
            ZARRCHIVE_CACHE_DIR=str(self.work / "client-cache"),
            ZARRCHIVE_STATE_DIR=str(self.work / "client-state"),
            ZARRCHIVE_HOST="127.0.0.1",
            ZARRCHIVE_PORT=str(self.port),
            ZARRCHIVE_URL=f"http://127.0.0.1:{self.port}",
            ZARRCHIVE_TOKEN=self.token,
        )
        return env

    def start(self) -> None:
        self.s3.start()
        log = (self.work / "server.log").open("ab")
        self.server = subprocess.Popen(
            [*zarrchive_command(), "serve"], env=self.env(), stdout=log, stderr=log
        )
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/info/").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((self.work / "server.log").read_text()[-3000:])
            time.sleep(0.2)
        out = subprocess.run(
            [*zarrchive_command(), "admin", "create-user", "bench"],
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
        )
        self.token = out.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.s3.stop()

    @property
    def server_pid(self) -> int:
        assert self.server is not None
        return self.server.pid

    def phase(self, results: Results, name: str, fn: Any) -> Phase:
        reset_peak(self.server_pid)
        reset_peak()
        started = time.perf_counter()
        client_peak, detail = fn()
        seconds = time.perf_counter() - started
        if client_peak is None:
            client_peak = vm_hwm_mib()
        phase = Phase(name, seconds, vm_hwm_mib(self.server_pid), client_peak, detail)
        results.phases.append(phase)
        print(
            f"  {name:44} {seconds:9.2f} s  server {phase.server_peak_mib:7.1f} MiB  "
            f"client {client_peak:7.1f} MiB  {detail}",
            flush=True,
        )
        return phase

    def client_phase(self, results: Results, name: str, command: list[str]) -> Phase:
        def run() -> tuple[float, str]:
            _, peak, last = run_client(command, self.env())
            return peak, last

        return self.phase(results, name, run)


class FloorSample:
    """The S3 work alone of the verified path: presigned PUT (with ``Content-MD5``) to a
    staging key, then ``CopyObject`` into place, *jobs* files at once; the sample's objects
    are deleted afterwards (their versions too: the bucket is versioned)."""

    def __init__(self, bench: Bench, files: int, size: int, jobs: int) -> None:
        import boto3
        from botocore.config import Config

        self.s3 = boto3.client(
            "s3",
            endpoint_url=bench.s3.endpoint_url,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(max_pool_connections=2 * jobs, retries={"max_attempts": 3}),
        )
        self.files, self.size, self.jobs, self.rounds = files, size, jobs, 0

    def measure(self) -> float:
        """files/s of one sample."""
        self.rounds += 1
        prefix = f"floor-sample/{self.rounds}/"
        work = []
        for i in range(self.files):
            relative = f"{i // 100}/{i % 100}"
            body = content(prefix + relative, self.size)
            md5 = md5_to_content_md5(hashlib.md5(body).hexdigest())
            key = f"{prefix}staging/{relative}"
            url = self.s3.generate_presigned_url(
                "put_object",
                Params={"Bucket": BUCKET, "Key": key, "ContentMD5": md5},
                ExpiresIn=3600,
            )
            work.append((body, url, md5, key, f"{prefix}final/{relative}"))
        limits = httpx.Limits(max_connections=self.jobs, max_keepalive_connections=self.jobs)
        with (
            httpx.Client(timeout=120, limits=limits) as http,
            concurrent.futures.ThreadPoolExecutor(self.jobs) as pool,
        ):

            def put(item: tuple[bytes, str, str, str, str]) -> None:
                body, url, md5, key, final = item
                http.put(url, content=body, headers={"Content-MD5": md5}).raise_for_status()
                self.s3.copy_object(
                    Bucket=BUCKET, Key=final, CopySource={"Bucket": BUCKET, "Key": key}
                )

            started = time.perf_counter()
            list(pool.map(put, work))
            rate = self.files / (time.perf_counter() - started)
        self.drop(prefix)
        return rate

    def drop(self, prefix: str) -> None:
        paginator = self.s3.get_paginator("list_object_versions")
        for page in paginator.paginate(Bucket=BUCKET, Prefix=prefix):
            doomed: list[Any] = [
                {"Key": v["Key"], "VersionId": v["VersionId"]}
                for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
            ]
            for first in range(0, len(doomed), 1000):
                self.s3.delete_objects(
                    Bucket=BUCKET, Delete={"Objects": doomed[first : first + 1000], "Quiet": True}
                )


def put_batch(
    api: httpx.Client,
    s3: httpx.Client,
    pool: concurrent.futures.ThreadPoolExecutor,
    zarr_id: str,
    chunk: list[str],
    body_of: Any,
) -> float:
    """One batch of the write path (open, PUT every file, complete); complete's seconds."""

    def put(item: dict[str, str]) -> None:
        body = body_of(item["path"])
        digest = md5_to_content_md5(hashlib.md5(body).hexdigest())
        for attempt in range(5):
            try:
                headers = {"Content-MD5": digest}
                if item.get("content_type"):  # the type the URL signs
                    headers["Content-Type"] = item["content_type"]
                s3.put(item["upload_url"], content=body, headers=headers).raise_for_status()
                return
            except httpx.HTTPError:
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))

    files = [{"path": p, "etag": hashlib.md5(body_of(p)).hexdigest()} for p in chunk]
    while True:  # 409 while the previous batch is still being applied
        opened = api.post(f"/api/zarr/{zarr_id}/upload/", json=files)
        if opened.status_code not in (409, 503):
            break
        time.sleep(0.2)
    opened.raise_for_status()
    list(pool.map(put, opened.json()))
    t0 = time.perf_counter()
    api.post(f"/api/zarr/{zarr_id}/upload/complete/").raise_for_status()
    return time.perf_counter() - t0


def write_zarr(
    api: httpx.Client,
    zarr_id: str,
    paths: list[str],
    size: int,
    batch: int,
    jobs: int,
    floor: FloorSample | None = None,
    floor_every: int = 0,
    segments: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The write path; one record per batch: files before it, complete's seconds.  Every
    *floor_every* files (rounded to whole batches) the write pauses for a *floor* sample."""
    records = []
    limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs)
    with (
        httpx.Client(timeout=120, limits=limits) as s3,
        concurrent.futures.ThreadPoolExecutor(jobs) as pool,
    ):
        done = 0
        started = segment_started = time.perf_counter()
        segment_first = 0
        for first in range(0, len(paths), batch):
            chunk = paths[first : first + batch]
            seconds = put_batch(api, s3, pool, zarr_id, chunk, lambda p: content(p, size))
            records.append({"files_before": done, "batch": len(chunk), "seconds": seconds})
            done += len(chunk)
            if len(records) % 20 == 0:
                rate = done / (time.perf_counter() - started)
                print(
                    f"  ... {done} files written ({rate:.0f} files/s), last complete "
                    f"{seconds:.2f} s",
                    flush=True,
                )
            if floor is not None and (done - segment_first >= floor_every or done == len(paths)):
                # the segment ends when its files are applied (copied into place, in the tree):
                # the floor's work includes the copies, and its sample must not share S3 with
                # the apply's backlog
                wait_at_rest(api, zarr_id)
                wrote = (done - segment_first) / (time.perf_counter() - segment_started)
                sample = floor.measure()
                print(
                    f"  segment {segment_first}-{done}: {wrote:.0f} files/s written, "
                    f"floor sample {sample:.0f} files/s ({wrote / sample:.2f}x)",
                    flush=True,
                )
                if segments is not None:
                    segments.append(
                        {
                            "files_before": segment_first,
                            "files": done - segment_first,
                            "files_per_s": wrote,
                            "floor_files_per_s": sample,
                        }
                    )
                segment_first, segment_started = done, time.perf_counter()
    return records


def wait_at_rest(api: httpx.Client, zarr_id: str) -> dict[str, Any]:
    """The Zarr's info once every batch is applied."""
    while True:
        state: dict[str, Any] = api.get(f"/api/zarr/{zarr_id}/").raise_for_status().json()
        if state.get("upload_state", "at_rest") == "at_rest":
            return state
        time.sleep(0.1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def complete_summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """p50/p99 of complete per decade of the Zarr's size before the batch."""
    buckets: dict[int, list[float]] = {}
    for r in records:
        decade = 10 ** len(str(max(1, r["files_before"]))) if r["files_before"] else 1
        buckets.setdefault(decade, []).append(r["seconds"])
    rows = []
    for decade in sorted(buckets):
        times = buckets[decade]
        rows.append(
            {
                "zarr_files_below": decade,
                "batches": len(times),
                "p50": statistics.median(times),
                "p99": percentile(times, 0.99),
                "max": max(times),
            }
        )
    return rows


def wait_for_manifest(api: httpx.Client, zarr_id: str, checksum: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in api.get(f"/api/zarr/{zarr_id}/manifests/").raise_for_status().json():
            if row["checksum"] == checksum:
                return int(row["entries"])
        time.sleep(0.2)
    raise RuntimeError(f"no manifest of {checksum} within {timeout} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--file-size", type=int, default=1024)
    parser.add_argument("--jobs", type=int, default=16, help="parallel PUTs")
    parser.add_argument(
        "--floor-every", type=int, default=0, help="files between floor samples (0: files/10)"
    )
    parser.add_argument("--floor-files", type=int, default=2000, help="files per floor sample")
    parser.add_argument(
        "--skip-listing",
        action="store_true",
        help="skip the ListObjectVersions comparison (4 minutes per listing at 10^6 here)",
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--work-dir", type=Path, default=None, help="kept after the run")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    work_ctx = tempfile.TemporaryDirectory(prefix="scale-bench-") if args.work_dir is None else None
    work = Path(work_ctx.name) if work_ctx is not None else args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    bench = Bench(args, work)
    try:
        bench.start()
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{bench.port}",
            headers={"Authorization": f"token {bench.token}"},
            timeout=600,
        )
        batch = int(api.get("/api/info/").json()["max_batch_files"])
        results = Results(
            files=args.files,
            file_size=args.file_size,
            batch_files=batch,
            database=bench.database_url.split(":", 1)[0],
            machine=f"{os.cpu_count()} cores, Python {platform.python_version()}",
        )
        paths = list(zarr_paths(args.files))
        local = work / "local" / ZARR_NAME
        t0 = time.perf_counter()
        write_local(local, paths, args.file_size)
        print(f"local Zarr of {len(paths)} files in {time.perf_counter() - t0:.1f} s", flush=True)

        dandiset = api.post("/api/dandisets/", json={"name": "scale"}).json()["identifier"]
        zarr_id = api.post("/api/zarr/", json={"name": ZARR_NAME, "dandiset": dandiset}).json()[
            "zarr_id"
        ]
        print(f"Zarr {zarr_id}, {len(paths)} files of {args.file_size} B, batches of {batch}")

        records: list[dict[str, Any]] = []

        floor = FloorSample(bench, min(args.floor_files, args.files), args.file_size, args.jobs)
        floor_every = args.floor_every or max(batch, args.files // 10)

        def write() -> tuple[None, str]:
            records.extend(
                write_zarr(
                    api,
                    zarr_id,
                    paths,
                    args.file_size,
                    batch,
                    args.jobs,
                    floor,
                    floor_every,
                    results.segments,
                )
            )
            written = sum(s["files"] for s in results.segments)
            writing = sum(s["files"] / s["files_per_s"] for s in results.segments)
            floor_rate = statistics.mean(s["floor_files_per_s"] for s in results.segments)
            return None, (
                f"{written / writing:.0f} files/s written and applied (floor samples between "
                "segments excluded); "
                f"floor {floor_rate:.0f} files/s (mean of {len(results.segments)} samples)"
            )

        bench.phase(results, "write (open, PUT, complete)", write)
        finished_at = time.perf_counter()

        def at_rest() -> tuple[None, str]:
            # complete answers once the batch is verified; the batch is applied in the
            # background (in order): wait until the last one is
            return None, f"{wait_at_rest(api, zarr_id)['file_count']} files at rest"

        bench.phase(results, "applied (from the last complete until at rest)", at_rest)
        results.complete = complete_summary(records)
        info = api.get(f"/api/zarr/{zarr_id}/").raise_for_status().json()
        checksum = info["checksum"]
        assert info["file_count"] == len(paths), info

        bench.phase(
            results,
            "manifest (from the last complete until listed)",
            lambda: (
                None,
                f"{wait_for_manifest(api, zarr_id, checksum, 7200)} entries, "
                f"{time.perf_counter() - finished_at:.2f} s after the last complete",
            ),
        )

        if not args.skip_listing:
            store = ObjectStore(
                endpoint_url=bench.s3.endpoint_url,
                bucket=BUCKET,
                access_key_id=ACCESS_KEY,
                secret_access_key=SECRET_KEY,
            )

            def list_serial() -> tuple[None, str]:
                n = sum(1 for v in store.iter_versions(f"zarr/{zarr_id}/") if v.is_latest)
                return None, f"{n} versions"

            serial = bench.phase(results, "ListObjectVersions alone (one paginator)", list_serial)
            serial.detail += f", {len(paths) / serial.seconds:.0f} entries/s"
            print(f"    = {serial.detail}")
            if hasattr(store, "iter_current_versions"):

                def list_parallel() -> tuple[None, str]:
                    n = sum(1 for _ in store.iter_current_versions(f"zarr/{zarr_id}/"))
                    return None, f"{n} versions"

                par = bench.phase(
                    results, "ListObjectVersions, prefixes in parallel", list_parallel
                )
                par.detail += f", {len(paths) / par.seconds:.0f} entries/s"
                print(f"    = {par.detail}")
            store.close()

        for where, directory in (("root", ""), ("leaf", LEAF.strip("/") + "/")):
            for state in ("cold", "warm"):

                def listing(directory: str = directory) -> tuple[None, str]:
                    page = api.get(f"/api/zarr/{zarr_id}.zarr/{directory}")
                    body = page.raise_for_status().json()
                    return None, f"{len(body['files'])} files, {len(body['directories'])} dirs"

                bench.phase(results, f"listing at the {where} ({state})", listing)

        cli = zarrchive_command()
        bench.client_phase(results, "zarrchive admin fsck", [*cli, "admin", "fsck", zarr_id])
        # the no-op upload needs the draft's asset at the Zarr's path
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": ZARR_NAME}, "zarr_id": zarr_id},
        ).raise_for_status()
        upload = [*cli, "upload", str(local), "--dandiset", dandiset]
        verify = [*cli, "verify", zarr_id, str(local)]
        bench.client_phase(results, "zarrchive upload --no-cache (no-op)", [*upload, "--no-cache"])
        bench.client_phase(results, "zarrchive upload (no-op, first run: empty cache)", upload)
        bench.client_phase(results, "zarrchive upload (no-op, cached)", upload)
        bench.client_phase(results, "zarrchive verify --no-cache", [*verify, "--no-cache"])
        bench.client_phase(results, "zarrchive verify (cached)", verify)
        removed = sum(1 for p in paths if p.startswith("arr/0/"))
        shutil.rmtree(local / "arr" / "0", ignore_errors=True)
        bench.client_phase(
            results,
            f"zarrchive download (subtree arr/0: {removed} files)",
            [*cli, "download", zarr_id, str(local)],
        )

        # records-based manifests (issue #23 item 1): a 500-file batch, then its manifest
        def change_batch(round_: int) -> list[str]:
            step = max(1, len(paths) // 250)
            return [*paths[1::step][:250], *(f"new/{round_}/{i}" for i in range(250))]

        def body_of(round_: int) -> Any:
            return lambda p: content(f"v{round_}/{p}", args.file_size)

        limits = httpx.Limits(max_connections=args.jobs, max_keepalive_connections=args.jobs)
        with (
            httpx.Client(timeout=120, limits=limits) as s3,
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool,
        ):
            put_batch(api, s3, pool, zarr_id, change_batch(1), body_of(1))
            bench.phase(results, "500-file batch: applied", at_rest)
            checksum = api.get(f"/api/zarr/{zarr_id}/").raise_for_status().json()["checksum"]
            bench.phase(
                results,
                "500-file batch: its manifest after at rest",
                lambda: (None, f"{wait_for_manifest(api, zarr_id, checksum, 7200)} entries"),
            )
            put_batch(api, s3, pool, zarr_id, change_batch(2), body_of(2))
            bench.phase(results, "another 500-file batch: applied", at_rest)
        bench.client_phase(
            results,
            "zarrchive publish (snapshot mode, its manifest included)",
            [*cli, "publish", dandiset, "--yes"],
        )

        print("write segments beside the floor samples:")
        for row in results.segments:
            print(
                f"  {row['files_before']:>9} + {row['files']:>7}: "
                f"{row['files_per_s']:6.0f} files/s, floor {row['floor_files_per_s']:6.0f} "
                f"files/s, {row['files_per_s'] / row['floor_files_per_s']:.2f}x"
            )
        print("complete, by the Zarr's size before the batch:")
        for row in results.complete:
            print(
                f"  < {row['zarr_files_below']:>9} files: {row['batches']:>5} batches, "
                f"p50 {row['p50']:.3f} s, p99 {row['p99']:.3f} s, max {row['max']:.3f} s"
            )
        if args.json is not None:
            data = asdict(results)
            args.json.write_text(json.dumps(data, indent=1))
        print(
            f"peak RSS of this driver: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB"
        )
    finally:
        bench.stop()
        if work_ctx is not None:
            work_ctx.cleanup()


if __name__ == "__main__":
    main()
