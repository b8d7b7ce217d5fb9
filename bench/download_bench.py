"""Downloads of a Zarr: ``zarrchive download`` beside the floor (a parallel boto3 GET of the
same objects from the same S3) and beside ``dandi download`` (dandi-cli 0.81), in one run;
and a no-op download of an unchanged copy.

    .venv/bin/python bench/download_bench.py [--small-files 3000] [--small-size 262144]
        [--big-files 3] [--big-size 1073741824] [--noop-files 100000] [--repeat 1] [--no-dandi]
        [--wan [--wan-rate 25] [--wan-delay 20]]

Starts ``zarrchive serve`` (embedded SeaweedFS, SQLite) in a temporary data directory on
free ports, uploads each Zarr with ``zarrchive upload`` (not timed), then, for each shape,
times whole processes writing into an empty directory (the copies are deleted between runs):

- the floor: a child process reading the objects anonymously through boto3 from the
  bucket's public endpoint, 16 threads, the files below 64 MiB in one ``GetObject`` each,
  the big ones through boto3's ``TransferManager`` (parallel ranged GETs of 16 MiB, 16
  threads); the object list is handed to it (its listing is not timed); no md5 checked;
  then, timed apart, the md5 of every copy (2 threads): the row "then md5" is what
  checking the copy, as ``zarrchive download`` does, adds to the floor when done after;
- ``zarrchive download ID DEST`` (CLI start-up, the archive's listing, the local
  comparison, every md5 checked, the checksum compared);
- ``dandi download URL`` of the same Zarr asset (``.venv-dandi``: dandi-cli 0.81.0, checked),
  unless ``--no-dandi``.

The no-op case: a Zarr of ``--noop-files`` files of 16 bytes, downloaded once by
``zarrchive download``, then downloaded again (nothing to do) at once, after the files'
timestamps settled (3 s: the digest cache keeps no file changed within the last 3 s), and
with ``--no-cache`` (every file read and hashed, the behaviour before the cache).

``--wan``: the same downloads through a WAN model (``bench/wan_proxy.py``: each TCP connection
capped at ``--wan-rate`` MiB/s each way, ``--wan-delay`` ms each way on every chunk, a round
trip for its handshake).  The bench then starts a SeaweedFS of its own (its bucket
world-readable, as the embedded default's) and ``zarrchive serve`` against it through one
proxy, so every object URL the archive hands out, the floor's endpoint and the archive's own
S3 calls go through the model; a second proxy (same model) stands before the API, which every
client (and ``zarrchive upload``, which seeds the Zarrs, not timed) reaches through it.  Its
default shapes are smaller (1,000 x 256 KiB and 3 x 256 MiB; no no-op case); the proxies' CPU
is shown apart (they share the machine's cores with the rest).

``--smoke`` is the small case ``tests/bench/test_download_bench.py`` runs for correctness.
Prints Markdown tables; the machine may be shared: figures are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from zarrchive.storage.seaweedfs import SeaweedFS, free_port

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DANDI = REPO / ".venv-dandi" / "bin"
DANDI_VERSION = "0.81.0"
BIG = 64 << 20

#: The floor, run as a child process: argv[1] is a JSON file
#: ``{"endpoint", "bucket", "objects": [[key, size, dest], ...]}``; prints the seconds of the
#: GETs, then those of the md5s of the copies after them (2 threads: what checking the copy
#: as we do would add to the floor; the page cache holds the copies) and their CPU seconds.
FLOOR = """
import hashlib, json, os, resource, sys, time
from concurrent.futures import ThreadPoolExecutor
import boto3
from botocore import UNSIGNED
from botocore.config import Config
from boto3.s3.transfer import TransferConfig, TransferManager

job = json.load(open(sys.argv[1]))
s3 = boto3.client("s3", endpoint_url=job["endpoint"], region_name="us-east-1",
                  config=Config(signature_version=UNSIGNED, max_pool_connections=32))
big_limit = job["big"]
small = [o for o in job["objects"] if o[1] < big_limit]
big = [o for o in job["objects"] if o[1] >= big_limit]
for _, _, dest in job["objects"]:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
started = time.perf_counter()

def get(obj):
    key, size, dest = obj
    body = s3.get_object(Bucket=job["bucket"], Key=key)["Body"]
    with open(dest, "wb") as out:
        for block in body.iter_chunks(1 << 20):
            out.write(block)

with ThreadPoolExecutor(16) as pool:
    list(pool.map(get, small))
if big:
    config = TransferConfig(multipart_threshold=big_limit, multipart_chunksize=16 << 20,
                            max_concurrency=16)
    with TransferManager(s3, config) as manager:
        futures = [manager.download(job["bucket"], key, dest) for key, _, dest in big]
        for future in futures:
            future.result()
gets = time.perf_counter() - started

def md5(obj):
    digest = hashlib.md5()
    with open(obj[2], "rb") as source:
        while block := source.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

started, cpu_before = time.perf_counter(), cpu()
with ThreadPoolExecutor(2) as pool:
    list(pool.map(md5, job["objects"]))
print(gets, time.perf_counter() - started, cpu() - cpu_before)
"""


#: ``zarrchive download``'s own work, in a child process: argv = API URL, Zarr id, dest;
#: prints the seconds of ``Downloader.download`` (the listing, the comparison, the GETs,
#: every check and the checksum; not the imports) and how many files were checked by S3's
#: CRC32 (big files whose HEAD ties it to the listed md5) rather than by their md5.
OURS = """
import sys, time
from zarrchive.client.api import ApiClient
from zarrchive.client.download import Downloader
with ApiClient(sys.argv[1]) as client, Downloader(client) as downloader:
    started = time.perf_counter()
    result = downloader.download(sys.argv[2], sys.argv[3])
    elapsed = time.perf_counter() - started
assert result.ok, result
print(elapsed, len(result.crc32))
"""


@dataclass(frozen=True)
class Shape:
    label: str
    files: int
    size: int


def make_zarr(root: Path, shape: Shape) -> None:
    """A Zarr v2 array of *files* chunks of *size* random bytes, keys ``data/i/j``."""
    side = max(1, int(shape.files**0.5))
    rows = -(-shape.files // side)
    root.mkdir(parents=True)
    (root / ".zgroup").write_text(json.dumps({"zarr_format": 2}))
    array = root / "data"
    array.mkdir()
    meta = {
        "zarr_format": 2,
        "shape": [rows * shape.size, side],
        "chunks": [shape.size, 1],
        "dtype": "|u1",
        "compressor": None,
        "fill_value": 0,
        "filters": None,
        "order": "C",
        "dimension_separator": "/",
    }
    (array / ".zarray").write_text(json.dumps(meta))
    made = 0
    for i in range(rows):
        (array / str(i)).mkdir()
        for j in range(side):
            if made == shape.files:
                return
            with open(array / str(i) / str(j), "wb") as out:
                left = shape.size
                while left:
                    block = min(left, 64 << 20)
                    out.write(os.urandom(block))
                    left -= block
            made += 1


#: CPU seconds (user + system) of the last process :func:`timed` ran.
last_cpu = [0.0]
#: ``--wan``: the proxies' processes, and their CPU seconds during the last :func:`timed`.
proxies: list[subprocess.Popen[str]] = []
last_proxy_cpu = [0.0]
#: CPU seconds of the floor's md5s (after its GETs), of the last floor run.
md5_cpu_of = [0.0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _proxies_cpu() -> float:
    """The CPU seconds of the running proxies (``/proc/PID/stat``: utime + stime)."""
    ticks = 0
    for proxy in proxies:
        fields = Path(f"/proc/{proxy.pid}/stat").read_text().rpartition(")")[2].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def timed(args: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    cpu, proxy_cpu = _children_cpu(), _proxies_cpu()
    started = time.perf_counter()
    done = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - started
    last_cpu[0] = _children_cpu() - cpu
    last_proxy_cpu[0] = _proxies_cpu() - proxy_cpu
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} {args[1]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return elapsed, done.stdout


def cpu_cell(extra: float = 0.0) -> str:
    """The last process's CPU (+ *extra*), and under ``--wan`` the proxies' beside it."""
    proxy = f" (+ {last_proxy_cpu[0]:.1f} s)" if proxies else ""
    return f"{last_cpu[0] + extra:.1f} s{proxy}"


def tree_bytes(root: Path) -> dict[str, int]:
    return {
        p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()
    }


def same_files(a: Path, b: Path) -> bool:
    """Both trees hold the same files with the same bytes."""
    sizes = tree_bytes(a)
    if sizes != tree_bytes(b):
        return False
    for name in sizes:
        with open(a / name, "rb") as x, open(b / name, "rb") as y:
            while True:
                block = x.read(1 << 20)
                if block != y.read(1 << 20):
                    return False
                if not block:
                    break
    return True


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass(frozen=True)
class Wan:
    """The WAN model: MiB/s per connection and way, one-way delay in ms."""

    rate: float
    delay: float


def start_proxy(target: str, wan: Wan) -> int:
    """A ``bench/wan_proxy.py`` forwarding to *target* (``host:port``): its port."""
    proxy = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "bench" / "wan_proxy.py"),
            target,
            f"--rate={wan.rate}",
            f"--delay={wan.delay}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    proxies.append(proxy)
    assert proxy.stdout is not None
    return int(proxy.stdout.readline())


def stop_proxies() -> None:
    while proxies:
        proxy = proxies.pop()
        proxy.terminate()
        proxy.wait(10)


@contextlib.contextmanager
def serve(work: Path, wan: Wan | None = None) -> Iterator[tuple[str, str, dict[str, str]]]:
    """``zarrchive serve`` in *work*: ``(url, token, client environment)``; with *wan*, the
    URL and the S3 endpoint are those of WAN proxies."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(ZARRCHIVE_DATA_DIR=str(work / "data"), ZARRCHIVE_PORT=str(port))
    seaweed: SeaweedFS | None = None
    if wan is None:
        env.update(ZARRCHIVE_EMBEDDED_S3_PORT=str(free_port([port])))
        url = f"http://127.0.0.1:{port}"
    else:
        key, secret = "bench", "bench-secret"
        seaweed = SeaweedFS(work / "s3", key, secret, public_read_buckets=["zarrchive"])
        seaweed.start()
        seaweed.keep_multipart_listings_private("zarrchive")
        s3_proxy = start_proxy(f"127.0.0.1:{seaweed.s3_port}", wan)
        env.update(
            ZARRCHIVE_S3_ENDPOINT_URL=f"http://127.0.0.1:{s3_proxy}",
            ZARRCHIVE_S3_BUCKET="zarrchive",
            ZARRCHIVE_S3_ACCESS_KEY_ID=key,
            ZARRCHIVE_S3_SECRET_ACCESS_KEY=secret,
        )
        url = f"http://127.0.0.1:{start_proxy(f'127.0.0.1:{port}', wan)}"
    direct = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(BIN / "zarrchive"), "serve"],
        env=env,
        stdout=open(work / "server.log", "wb"),  # noqa: SIM115 - lives as long as the server
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its embedded SeaweedFS too is stopped with its group
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{direct}/server-info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"zarrchive serve did not start: see {work / 'server.log'}")
            time.sleep(0.2)
        token = subprocess.run(
            [str(BIN / "zarrchive"), "admin", "create-user", "bench"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[-1]
        client_env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        client_env.update(
            HOME=str(work / "home"),
            ZARRCHIVE_CACHE_DIR=str(work / "cache"),
            PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
            DANDI_NO_ET="1",
            DANDI_CACHE="ignore",
            ZARRCHIVE_URL=url,
            ZARRCHIVE_TOKEN=token,
            **{f"{urlsplit(url).netloc}_API_KEY": token},
        )
        yield url, token, client_env
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C: stops the API and its SeaweedFS
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)  # whatever is left of the group
        stop_proxies()
        if seaweed is not None:
            seaweed.stop()


class Bench:
    def __init__(self, work: Path, url: str, token: str, env: dict[str, str]) -> None:
        self.work, self.url, self.env = work, url, env
        self.api = httpx.Client(
            base_url=url, headers={"Authorization": f"token {token}"}, timeout=60
        )

    def upload(self, name: str, shape: Shape) -> tuple[str, str, Path]:
        """A dandiset holding the Zarr *name* of *shape*: ``(dandiset, zarr id, source)``."""
        response = self.api.post("/api/dandisets/", json={"name": name, "metadata": {}})
        response.raise_for_status()
        dandiset = str(response.json()["identifier"])
        source = self.work / "sources" / name
        make_zarr(source, shape)
        upload = [str(BIN / "zarrchive"), "upload", str(source), "--dandiset", dandiset]
        timed([*upload, "--path", name], self.env)
        asset = self.api.get(
            f"/api/dandisets/{dandiset}/versions/draft/assets/", params={"path": name}
        ).json()["results"][0]
        return dandiset, str(asset["zarr"]), source

    def floor(self, zarr_id: str, dest: Path) -> tuple[float, float, float]:
        """The boto3 floor: ``(seconds of the GETs, seconds of the md5s after them, seconds
        of the process)``."""
        info = self.api.get(f"/api/zarr/{zarr_id}/").json()
        parts = urlsplit(str(info["s3_url"]))
        endpoint = f"{parts.scheme}://{parts.netloc}"
        bucket, _, prefix = parts.path.lstrip("/").partition("/")
        import boto3
        from botocore import UNSIGNED
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            config=Config(signature_version=UNSIGNED),
        )
        objects = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                objects.append([o["Key"], o["Size"], str(dest / o["Key"][len(prefix) :])])
        job = self.work / "floor.json"
        job.write_text(
            json.dumps({"endpoint": endpoint, "bucket": bucket, "big": BIG, "objects": objects})
        )
        elapsed, out = timed([sys.executable, "-c", FLOOR, str(job)], self.env)
        gets, md5s, md5_cpu = (float(x) for x in out.split())
        last_cpu[0] -= md5_cpu  # the floor's CPU: the GETs' process, not the md5s after
        md5_cpu_of[0] = md5_cpu
        return gets, md5s, elapsed - md5s  # (the process without the md5s after)

    def ours(self, zarr_id: str, dest: Path, *extra: str) -> tuple[float, str]:
        return timed([str(BIN / "zarrchive"), "download", zarr_id, str(dest), *extra], self.env)

    def ours_inside(self, zarr_id: str, dest: Path) -> tuple[float, int]:
        """``(seconds, files checked by CRC32)``."""
        _, out = timed([sys.executable, "-c", OURS, self.url, zarr_id, str(dest)], self.env)
        elapsed, by_crc32 = out.split()
        return float(elapsed), int(by_crc32)

    def dandi(self, dandiset: str, name: str, dest: Path) -> float:
        dest.mkdir(parents=True)
        url = f"{self.url}/api/dandisets/{dandiset}/versions/draft/assets/?path={name}"
        elapsed, _ = timed([str(DANDI / "dandi"), "download", url], self.env, cwd=dest)
        return elapsed


def rate(files: int, nbytes: int, seconds: float) -> str:
    return f"{files / seconds:,.0f} files/s, {nbytes / seconds / 2**20:,.0f} MiB/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small-files", type=int, help="3000 (--wan: 1000)")
    parser.add_argument("--small-size", type=int, default=256 << 10)
    parser.add_argument("--big-files", type=int, default=3)
    parser.add_argument("--big-size", type=int, help="1073741824 (--wan: 268435456)")
    parser.add_argument("--noop-files", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-dandi", action="store_true", help="skip dandi download")
    parser.add_argument("--shapes", help="which of small,big,noop to run (--wan: small,big)")
    parser.add_argument("--smoke", action="store_true", help="a small case, checked")
    parser.add_argument("--wan", action="store_true", help="through a WAN model (see above)")
    parser.add_argument("--wan-rate", type=float, default=25.0, help="MiB/s per connection")
    parser.add_argument("--wan-delay", type=float, default=20.0, help="one-way delay, ms")
    options = parser.parse_args()
    wan = Wan(options.wan_rate, options.wan_delay) if options.wan else None
    if options.small_files is None:
        options.small_files = 1000 if wan else 3000
    if options.big_size is None:
        options.big_size = 256 << 20 if wan else 1 << 30
    if options.shapes is None:
        options.shapes = "small,big" if wan else "small,big,noop"
    if options.smoke:
        options.small_files, options.small_size = 40, 3000
        options.big_files, options.big_size = 1, BIG + 123_457
        options.noop_files, options.no_dandi = 200, True
    use_dandi = not options.no_dandi
    if use_dandi:
        version = subprocess.run(
            [str(DANDI / "dandi"), "--version"], capture_output=True, text=True
        ).stdout.strip()
        if version != DANDI_VERSION:
            sys.exit(f".venv-dandi has dandi {version!r}, not {DANDI_VERSION}: make .venv-dandi")
    shapes = [
        shape
        for shape in (
            Shape("small", options.small_files, options.small_size),
            Shape("big", options.big_files, options.big_size),
        )
        if shape.label in options.shapes.split(",")
    ]
    work = Path(tempfile.mkdtemp(prefix="download-bench-"))
    failures: list[str] = []
    try:
        with serve(work, wan) as (url, token, env):
            bench = Bench(work, url, token, env)
            if wan:
                print(
                    f"WAN model (bench/wan_proxy.py, before S3 and the API): {wan.rate:g} MiB/s "
                    f"per connection and way, {wan.delay:g} ms one-way delay "
                    f"({2 * wan.delay:g} ms round trip); CPU: the client's (+ the proxies')\n",
                    flush=True,
                )
            lines = [
                "| Zarr | run | time | CPU | rate | ratio to the floor | load |",
                "|---|---|---:|---:|---:|---:|---|",
            ]
            for shape in shapes:
                name = f"{shape.label}.zarr"
                dandiset, zarr_id, source = bench.upload(name, shape)
                what = f"{shape.files:,} x {shape.size:,} B"
                nbytes = shape.files * shape.size
                for _ in range(options.repeat):
                    dest = work / "copies" / "floor"
                    gets, md5s, process = bench.floor(zarr_id, dest)
                    ok = same_files(source, dest)
                    shutil.rmtree(dest)
                    lines.append(
                        f"| {what} | boto3 floor (GETs only; process {process:.1f} s) | "
                        f"{gets:.1f} s | {cpu_cell()} | {rate(shape.files, nbytes, gets)} | 1.00 | {load()} |"
                    )
                    checked = gets + md5s
                    lines.append(
                        f"| {what} | boto3 floor, then md5 of the copies (2 threads) | "
                        f"{checked:.1f} s | {cpu_cell(md5_cpu_of[0])} | "
                        f"{rate(shape.files, nbytes, checked)} | "
                        f"{gets / checked:.2f} | {load()} |"
                    )
                    dest = work / "copies" / "inside"
                    inside, by_crc32 = bench.ours_inside(zarr_id, dest)
                    ok = ok and same_files(source, dest)
                    shutil.rmtree(dest)
                    big_files = shape.files if shape.size >= BIG else 0
                    checks = (
                        f"; big files checked by CRC32: {by_crc32} of {big_files}, by md5: "
                        f"{big_files - by_crc32}"
                        if big_files
                        else ""
                    )
                    lines.append(
                        f"| {what} | zarrchive Downloader.download (no start-up{checks}) | {inside:.1f} s "
                        f"| {cpu_cell()} | {rate(shape.files, nbytes, inside)} | {gets / inside:.2f} "
                        f"({checked / inside:.2f} of the floor then md5) | {load()} |"
                    )
                    dest = work / "copies" / "ours"
                    ours, _ = bench.ours(zarr_id, dest)
                    ok = ok and same_files(source, dest)
                    shutil.rmtree(dest)
                    lines.append(
                        f"| {what} | zarrchive download (process) | {ours:.1f} s | "
                        f"{cpu_cell()} | {rate(shape.files, nbytes, ours)} | {gets / ours:.2f} "
                        f"({process / ours:.2f} of the floor's process) | {load()} |"
                    )
                    if use_dandi:
                        dest = work / "copies" / "dandi"
                        theirs = bench.dandi(dandiset, name, dest)
                        ok = ok and same_files(source, dest / name)
                        shutil.rmtree(dest)
                        lines.append(
                            f"| {what} | dandi download 0.81.0 (process) | {theirs:.1f} s | "
                            f"{cpu_cell()} | {rate(shape.files, nbytes, theirs)} | {gets / theirs:.2f} "
                            f"(ours {theirs / ours:.1f}x faster) | {load()} |"
                        )
                    if not ok:
                        failures.append(f"{shape.label}: a copy differs from the source")
                shutil.rmtree(source)
            print("\n".join(lines), flush=True)
            if "noop" in options.shapes.split(","):
                # The no-op case.
                shape = Shape("noop", options.noop_files, 16)
                _, zarr_id, source = bench.upload("noop.zarr", shape)
                shutil.rmtree(source)
                dest = work / "copies" / "noop"
                first, _ = bench.ours(zarr_id, dest)
                rows = [
                    "| no-op download | time | load |",
                    "|---|---:|---|",
                    f"| first download of {shape.files:,} files | {first:.1f} s | {load()} |",
                ]
                elapsed, out = bench.ours(zarr_id, dest)
                if "downloaded 0 files" not in out:
                    failures.append(f"no-op: {out.strip()}")
                rows.append(
                    f"| again at once (files not settled yet) | {elapsed:.1f} s | {load()} |"
                )
                time.sleep(3.5)
                for label in ("again, settled (stat only)", "again, settled, second time"):
                    elapsed, out = bench.ours(zarr_id, dest)
                    if "downloaded 0 files" not in out:
                        failures.append(f"no-op: {out.strip()}")
                    rows.append(f"| {label} | {elapsed:.1f} s | {load()} |")
                elapsed, out = bench.ours(zarr_id, dest, "--no-cache")
                rows.append(
                    f"| again with --no-cache (every file hashed) | {elapsed:.1f} s | {load()} |"
                )
                print()
                print("\n".join(rows))
    finally:
        stop_proxies()
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))


if __name__ == "__main__":
    main()
