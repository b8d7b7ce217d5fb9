"""The archive's ways to verify a big file's md5 while it goes into place, on SeaweedFS.

A staged object assembled from parts (its ETag is not an md5) must reach the Zarr's key with
its md5 checked on the way.  The ways measured, on one ``weed mini`` (wall time and CPU time
of this process and of SeaweedFS, per GiB):

- ``read``: one streamed GET of the staged version through md5 (what the check alone costs);
- ``copy``: ``UploadPartCopy`` of every part, 4 at a time (what the floor's copy costs);
- ``copy + read``: both at once (``prepare_verified_copy``, the archive's way);
- ``stream``: the GET's bytes through md5 into ``UploadPart`` of the final key's upload
  (one read and one write, no copy), part after part on one connection each way;
- ``put``: the same ``UploadPart`` requests with bytes from memory (the write alone).

    .venv/bin/python bench/verified_copy_bench.py --mib 1024 --rounds 2
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import resource
import subprocess
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from local_archive import local_archive

MIB = 1024**2
PART = 64 * MIB
BLOCK = 8 * MIB


def cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def connection(url: str) -> tuple[http.client.HTTPConnection, str]:
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=300), (
        f"{parts.path}?{parts.query}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of the staged object")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    size = args.mib * MIB
    count = -(-size // PART)

    with local_archive("verified-copy-bench-") as (archive, _url, work):
        store = archive.store_for(False)
        weed = int(
            subprocess.run(
                ["pgrep", "-f", f"weed mini -dir={work}"], capture_output=True, text=True
            ).stdout.split()[0]
        )
        key = "staging/big"
        upload = store.create_multipart_upload(key)
        whole = hashlib.md5()
        etags = []
        for n in range(1, count + 1):
            body = os.urandom(min(PART, size - (n - 1) * PART))
            whole.update(body)
            answer: Any = store.client.upload_part(
                Bucket=store.bucket, Key=key, UploadId=upload, PartNumber=n, Body=body
            )
            etags.append((n, str(answer["ETag"]).strip('"')))
        store.complete_multipart_upload(key, upload, etags)
        md5 = whole.hexdigest()
        latest = store.latest_version(key)
        assert latest is not None
        version = latest.version_id

        def read() -> None:
            digest = hashlib.md5()
            for chunk in store.iter_content(key, version):
                digest.update(chunk)
            assert digest.hexdigest() == md5

        def copy(dest: str = "final/copy") -> None:
            target = store.create_multipart_upload(dest)

            def one(n: int) -> tuple[int, str]:
                first = (n - 1) * PART
                last = min(size, first + PART) - 1
                return n, store.upload_part_copy(key, version, dest, target, n, first, last)

            with ThreadPoolExecutor(4) as pool:
                parts = list(pool.map(one, range(1, count + 1)))
            store.complete_multipart_upload(dest, target, parts)

        def copy_and_read() -> None:
            with ThreadPoolExecutor(2) as pool:
                copied, hashed = pool.submit(copy, "final/both"), pool.submit(read)
                copied.result()
                hashed.result()

        def put_parts(dest: str, source: Callable[[memoryview], int] | None) -> None:
            target = store.create_multipart_upload(dest)
            buffer = memoryview(bytearray(BLOCK))
            if source is None:
                buffer[:] = os.urandom(BLOCK)
            parts = []
            out: http.client.HTTPConnection | None = None
            for n in range(1, count + 1):
                length = min(PART, size - (n - 1) * PART)
                url = store.presign_upload_part(dest, target, n, 3600)
                if out is None:
                    out, _ = connection(url)
                out.putrequest("PUT", connection(url)[1], skip_accept_encoding=True)
                out.putheader("Content-Length", str(length))
                out.endheaders()
                left = length
                while left:
                    take = min(left, BLOCK)
                    got = take if source is None else source(buffer[:take])
                    assert got
                    out.send(buffer[:got])
                    left -= got
                response = out.getresponse()
                response.read()
                assert response.status == 200
                parts.append((n, str(response.getheader("ETag")).strip('"')))
            assert out is not None
            out.close()
            store.complete_multipart_upload(dest, target, parts)

        def stream() -> None:
            conn, path = connection(store.presign_get_version(key, version, 3600))
            conn.request("GET", path)
            response = conn.getresponse()
            assert response.status == 200
            digest = hashlib.md5()

            def source(into: memoryview) -> int:
                n = response.readinto(into)
                digest.update(into[:n])
                return n

            put_parts("final/stream", source)
            conn.close()
            assert digest.hexdigest() == md5

        def put() -> None:
            put_parts("final/put", None)

        gib = size / 1024**3
        print("| way | wall s/GiB | archive CPU s/GiB | SeaweedFS CPU s/GiB | load |")
        print("|---|---:|---:|---:|---:|")
        ways = [
            ("read", read),
            ("copy", copy),
            ("copy + read", copy_and_read),
            ("stream", stream),
            ("put", put),
        ]
        for _ in range(args.rounds):
            for name, way in ways:
                weed_before, before, started = cpu_of(weed), self_cpu(), time.perf_counter()
                way()
                wall = time.perf_counter() - started
                ours, theirs = self_cpu() - before, cpu_of(weed) - weed_before
                print(
                    f"| {name} | {wall / gib:.1f} | {ours / gib:.1f} | {theirs / gib:.1f} "
                    f"| {os.getloadavg()[0]:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
