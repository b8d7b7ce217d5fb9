"""The archive's LINDI files (issue 22): opening an NWB asset with pynwb through its LINDI file
vs h5py over HTTP range reads of its blob, both against the same throwaway archive.

An NWB file of about 200 MB (a chunked 2-D ElectricalSeries of about 100 MB, an electrodes
table, and 300 TimeSeries of 320 kB each: a few hundred objects spread through the file,
as a lab's file of many series is) is uploaded to a
local archive (``bench/local_archive.py``) whose S3 is reached through a small reverse
proxy of this script, and converted by the archive's own job code in a child process
(``convert_blob``: its wall time and peak RSS).  Then, for each case, "open" is pynwb's
``NWBHDF5IO(...).read()`` of the whole file's structure followed by one slice of the
chunked dataset:

- LINDI: our reader (``zarrchive.lindi.File``) opens the asset's LINDI URL (the API's
  ``/api/assets/{id}/lindi.json``, a 302 to the JSON in the bucket), chunks from S3;
- h5py: ``h5py.File(remfile.File(blob URL))``, remfile's range reads of the blob.

HTTP requests are counted at the proxy (S3) and at the API; the "100 ms" runs delay every
request at both by 100 ms (the cloud case).  Run from the repository root:

    .venv/bin/python bench/lindi_archive_bench.py [--repeat 3] [--rows 1600000]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_archive import local_archive

COLS, CHUNK_ROWS = 64, 10_000
#: The slice read: 10,000 rows (one or two chunks) from the middle, every column.
SLICE_ROWS = 10_000


class Counter:
    """Requests seen and the delay added to each (shared by the proxy and the API wrapper)."""

    def __init__(self) -> None:
        self.s3 = 0
        self.api = 0
        self.delay = 0.0
        self.lock = threading.Lock()

    def reset(self, delay: float) -> None:
        with self.lock:
            self.s3 = self.api = 0
            self.delay = delay


COUNTER = Counter()


# -- the S3 proxy: forwards every request as is (Host included: signatures stay valid) -----
class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    _local = threading.local()

    def log_message(self, *args: Any) -> None:
        return None

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(*self.upstream, timeout=300)
        return conn

    def _forward(self) -> None:
        with COUNTER.lock:
            COUNTER.s3 += 1
            delay = COUNTER.delay
        if delay:
            time.sleep(delay)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
        for attempt in range(2):
            conn = self._conn()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
        self.send_response_only(response.status, response.reason)
        length = response.getheader("Content-Length")
        for key, value in response.getheaders():
            if key.lower() not in ("connection", "transfer-encoding"):
                self.send_header(key, value)
        if length is None and self.command != "HEAD":
            data = response.read()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.end_headers()
        try:  # streamed: a client that stops reading (a length probe) stops the copy
            while block := response.read(1 << 20):
                self.wfile.write(block)
        except OSError:
            conn.close()
            self._local.conn = None
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward  # noqa: N815


def start_proxy(upstream: str) -> tuple[ThreadingHTTPServer, str]:
    parts = urllib.parse.urlsplit(upstream)
    handler = type("Proxy", (_Proxy,), {"upstream": (parts.hostname, parts.port)})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def counting_app(app: Any) -> Any:
    """The API, counting (and delaying) every request."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            with COUNTER.lock:
                COUNTER.api += 1
                delay = COUNTER.delay
            if delay:
                await asyncio.sleep(delay)
        await app(scope, receive, send)

    return wrapped


# -- the NWB file -------------------------------------------------------------------------------
def make_nwb(path: Path, rows: int, n_series: int, samples: int) -> None:
    from hdmf.backends.hdf5.h5_utils import H5DataIO
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.ecephys import ElectricalSeries

    nwb = NWBFile(
        session_description="LINDI archive benchmark",
        identifier="bench",
        session_start_time=datetime(2024, 1, 1, tzinfo=UTC),
    )
    device = nwb.create_device(name="probe")
    group = nwb.create_electrode_group(name="shank", description="s", location="CA1", device=device)
    for i in range(COLS):
        nwb.add_electrode(
            x=float(i), y=0.0, z=0.0, imp=1.0, location="CA1", filtering="none", group=group
        )
    region = nwb.create_electrode_table_region(region=list(range(COLS)), description="all")
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(rows, COLS)) * 100).astype("<i2")
    nwb.add_acquisition(
        ElectricalSeries(
            name="ephys",
            data=H5DataIO(data, chunks=(CHUNK_ROWS, COLS)),
            electrodes=region,
            rate=30_000.0,
        )
    )
    for i in range(n_series):
        nwb.add_acquisition(
            TimeSeries(
                name=f"series{i:03d}",
                data=rng.normal(size=samples),
                unit="V",
                rate=10.0,
                description=f"series {i}",
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with NWBHDF5IO(str(path), "w") as io:
            io.write(nwb)


def upload(api: httpx.Client, dandiset: str, path: Path) -> str:
    """Upload *path* as a blob (our route, multipart as the server plans); its blob id."""
    import hashlib

    size = path.stat().st_size
    digest = hashlib.md5()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            digest.update(block)
    body = {"size": size, "md5": digest.hexdigest(), "dandiset": dandiset}
    plan = api.post("/api/uploads/initialize/", json=body).raise_for_status().json()
    if plan["blob_id"] is not None:
        return str(plan["blob_id"])
    etags = []
    with path.open("rb") as fh, httpx.Client(timeout=600) as s3:
        for part in plan["parts"]:
            chunk = fh.read(part["size"])
            headers = {}
            if not plan["multipart"]:
                import base64

                headers["Content-MD5"] = base64.b64encode(digest.digest()).decode()
                headers["Content-Type"] = "application/octet-stream"  # signed by the URL
            response = s3.put(part["upload_url"], content=chunk, headers=headers)
            response.raise_for_status()
            etags.append({"part_number": part["part_number"], "etag": response.headers["ETag"]})
    if plan["multipart"]:
        api.post(f"/api/uploads/{plan['upload_id']}/complete/", json={"parts": etags})
    answer = api.post(f"/api/uploads/{plan['upload_id']}/validate/")
    assert answer.status_code == 200, answer.text
    done = answer.json()
    return str(done["blob_id"])


#: The conversion in a child process: its peak RSS is the kernel's VmHWM (``ru_maxrss``
#: would carry the parent's high-water mark across ``exec``).
CONVERT = r"""
import json, os, sys, time

def hwm_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0

from zarrchive.config import Settings
from zarrchive.services.dandi import lindi_files
from zarrchive.services.runtime import Archive
archive = Archive.from_settings(Settings.from_env(), migrate=False)
base = hwm_kb()
start = time.perf_counter()
status = lindi_files.convert_blob(archive, sys.argv[1], force=True)
seconds = time.perf_counter() - start
print(json.dumps({"status": status.text, "seconds": seconds, "base_kb": base,
                  "peak_kb": hwm_kb()}))
"""


def env_of(settings: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        ZARRCHIVE_DATA_DIR=str(settings.data_dir),
        ZARRCHIVE_DATABASE_URL=settings.database_url,
        ZARRCHIVE_S3_ENDPOINT_URL=settings.s3_endpoint_url,
        ZARRCHIVE_S3_BUCKET=settings.s3_bucket,
        ZARRCHIVE_S3_EMBARGO_BUCKET=settings.s3_embargo_bucket,
        ZARRCHIVE_S3_ACCESS_KEY_ID=settings.s3_access_key_id,
        ZARRCHIVE_S3_SECRET_ACCESS_KEY=settings.s3_secret_access_key,
    )
    return env


# -- the two ways of opening ------------------------------------------------------------------
def _read(io_factory: Callable[[], Any]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        io = io_factory()
        nwb = io.read()
        data = nwb.acquisition["ephys"].data
        middle = data.shape[0] // 2 + 1234
        value = data[middle : middle + SLICE_ROWS, :]
        io.close()
    return float(np.asarray(value, dtype="f8").sum())


def via_lindi(lindi_url: str) -> float:
    from pynwb import NWBHDF5IO

    from zarrchive.lindi import File, RangeReader

    reader = RangeReader()  # a new one per open: empty caches
    try:
        with File(lindi_url, reader=reader) as f:
            return _read(lambda: NWBHDF5IO(file=f, mode="r"))
    finally:
        reader.close()


def via_h5py(blob_url: str) -> float:
    import h5py
    import remfile
    from pynwb import NWBHDF5IO

    remote = remfile.File(blob_url, verbose=False)
    try:
        with h5py.File(remote, "r") as f:
            return _read(lambda: NWBHDF5IO(file=f, mode="r"))
    finally:
        remote.close()


def measure(fn: Callable[[], float], delay: float, repeat: int) -> dict[str, Any]:
    times, counts, value = [], [], 0.0
    for _ in range(repeat):
        COUNTER.reset(delay)
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
        counts.append((COUNTER.s3, COUNTER.api))
    COUNTER.reset(0.0)
    return {
        "seconds": statistics.median(times),
        "s3_requests": counts[-1][0],
        "api_requests": counts[-1][1],
        "checksum": value,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=800_000, help="rows of the 64-column i2 array")
    parser.add_argument("--series", type=int, default=300, help="TimeSeries (2 objects each)")
    parser.add_argument(
        "--samples", type=int, default=40_000, help="float64 samples of each TimeSeries"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per loopback case (median)")
    parser.add_argument("--delay", type=float, default=0.1, help="the simulated round trip (s)")
    args = parser.parse_args()

    # S3 through the proxy: the archive is configured with the proxy as its endpoint
    import zarrchive.storage.seaweedfs as seaweedfs
    from zarrchive.services.identity.auth import create_user

    proxies: list[ThreadingHTTPServer] = []

    class ProxiedSeaweedFS(seaweedfs.SeaweedFS):
        proxy_url: str | None = None

        @property
        def endpoint_url(self) -> str:
            return self.proxy_url or super().endpoint_url

        def start(self) -> None:  # type: ignore[override]
            super().start()
            server, self.proxy_url = start_proxy(super().endpoint_url)
            proxies.append(server)

    seaweedfs.SeaweedFS = ProxiedSeaweedFS  # type: ignore[misc]
    with local_archive("lindi-archive-bench-", wrap=counting_app) as (archive, url, work):
        nwb = work / "bench.nwb"
        start = time.perf_counter()
        make_nwb(nwb, args.rows, args.series, args.samples)
        size = nwb.stat().st_size
        print(f"NWB: {size / 1e6:.0f} MB in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        with archive.db.session() as session:
            token = create_user(session, "bench")[1]
        with httpx.Client(
            base_url=url, headers={"Authorization": f"token {token}"}, timeout=600
        ) as api:
            dandiset = api.post("/api/dandisets/", json={"name": "bench"}).json()["identifier"]
            blob_id = upload(api, dandiset, nwb)
            asset = api.post(
                f"/api/dandisets/{dandiset}/versions/draft/assets/",
                json={"metadata": {"path": "bench.nwb"}, "blob_id": blob_id},
            ).json()
            COUNTER.reset(0.0)
            done = subprocess.run(
                [sys.executable, "-c", CONVERT, blob_id],
                env=env_of(archive.settings),
                capture_output=True,
                text=True,
                check=True,
            )
            conversion = json.loads(done.stdout.strip().splitlines()[-1])
            conversion["s3_requests"] = COUNTER.s3
            info = api.get(f"/api/assets/{asset['asset_id']}/info/").json()
            assert info["lindi_state"] == "ready", info
            blob_url = api.get(f"/api/assets/{asset['asset_id']}/download/").headers["location"]
        lindi_url = info["lindi_url"]
        objects = sum(
            1
            for k in httpx.get(httpx.get(lindi_url).headers["location"]).json()["refs"]
            if k.endswith((".zgroup", ".zarray"))
        )
        results: dict[str, Any] = {
            "nwb_bytes": size,
            "objects": objects,
            "conversion": conversion,
        }
        for label, delay, repeat in (("loopback", 0.0, args.repeat), ("rtt", args.delay, 1)):
            lindi = measure(lambda: via_lindi(lindi_url), delay, repeat)
            h5 = measure(lambda: via_h5py(blob_url), delay, repeat)
            assert lindi["checksum"] == h5["checksum"], (lindi, h5)
            results[label] = {"lindi": lindi, "h5py_remfile": h5}
        for proxy in proxies:
            proxy.shutdown()
    print(json.dumps(results, indent=1))
    gb = size / 1e9
    c = results["conversion"]
    print(
        f"conversion: {c['seconds']:.2f} s ({c['seconds'] / gb:.1f} s/GB), peak RSS "
        f"{c['peak_kb'] / 1024:.0f} MiB (after imports {c['base_kb'] / 1024:.0f} MiB; "
        f"{(c['peak_kb'] - c['base_kb']) / 1024 / gb:.0f} MiB/GB above it), "
        f"{c['s3_requests']} S3 requests"
    )
    for label in ("loopback", "rtt"):
        a, b = results[label]["lindi"], results[label]["h5py_remfile"]
        print(
            f"{label}: LINDI {a['seconds']:.2f} s, {a['s3_requests']}+{a['api_requests']} req; "
            f"h5py/remfile {b['seconds']:.2f} s, {b['s3_requests']}+{b['api_requests']} req; "
            f"{b['seconds'] / a['seconds']:.1f}x faster, "
            f"{(b['s3_requests'] + b['api_requests']) / (a['s3_requests'] + a['api_requests']):.1f}x fewer requests"
        )


if __name__ == "__main__":
    main()
