"""A Zarr of N entries by simulation (issue #39 item 4): seeded directly, then every
operation of a Zarr's life measured on it, for time, peak RSS and S3 requests.

The archive runs in this process (:mod:`local_archive`: its own SeaweedFS, SQLite, the API
served by uvicorn in a thread, the job queue in-process).  Seeding writes what a long run of
uploads would leave, without batches: N empty objects ``arr/{a}/{b}/{c}`` (100 per leaf
directory; all share one md5) PUT in parallel to presigned URLs, every ``.checksum`` node
(computed in one streamed pass, :func:`~zarrchive.checksum.iter_directory_digests`), the
checksum, count and size in the Zarr's row, then the first manifest from a listing (which
leaves the rest mark the change records chain from).  Then, in order, each a phase:

1. a 500-file batch (250 overwrites spread over the Zarr, 250 new files): ``complete``
   (``POST .../upload/complete/``, the PUTs before it not counted), then its apply (until the
   Zarr is at rest), then its manifest (from records: until listed);
2. ``GET /api/zarr/{id}/refs.json`` of that state (streamed, bytes counted);
3. a page of DANDI's flat listing (``GET /api/zarr/{id}/files/``, from the manifest and the
   records) and a directory listing at a leaf (``GET /api/zarr/{id}.zarr/arr/0/0/``);
4. a snapshot-mode publish (``POST .../versions/draft/publish/``);
5. ``fsck`` (one listing of the Zarr, the tree recomputed, the manifest audited);
6. the diff between the seeded state and the batch's (the two manifests, streamed):
   ``manifest.diff_manifests``;
7. where the archive has it (``/api/zarr/{id}/history/``), the rollback to the seeded state
   (``POST /api/zarr/{id}/restore/``, until at rest).

Peak RSS is this process's ``VmHWM``, reset before each phase (the archive, its jobs and the
driver are one process).  S3 requests are counted on the archive's botocore clients
(``before-send``) and on its own signed copies; the driver's presigned PUTs are not counted.

    .venv/bin/python bench/scale_sim.py --files 1000000 [--jobs 32] [--json FILE]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import hashlib
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_archive import local_archive
from scale_bench import reset_peak, vm_hwm_mib

EMPTY_MD5 = hashlib.md5(b"").hexdigest()
BATCH = 500
NAMES = sorted(str(i) for i in range(100))


def entry_paths(n: int) -> Iterator[str]:
    """*n* paths ``arr/{a}/{b}/{c}`` in key order (100 per leaf, 10^4 per ``arr/{a}``)."""
    tops = sorted(str(i) for i in range((n + 9999) // 10000))
    return itertools.islice((f"arr/{a}/{b}/{c}" for a in tops for b in NAMES for c in NAMES), n)


def entry_path(n: int, i: int) -> str:
    """The *i*-th of :func:`entry_paths` (*n*), computed."""
    tops = sorted(str(t) for t in range((n + 9999) // 10000))
    return f"arr/{tops[i // 10000]}/{NAMES[(i // 100) % 100]}/{NAMES[i % 100]}"


def change_paths(n: int) -> list[str]:
    """The batch: 250 overwrites spread over the Zarr, 250 new files."""
    overwrite = list(itertools.islice(entry_paths(n), 0, None, max(1, n // 250)))[:250]
    return [*overwrite, *(f"new/{i // 100}/{i % 100}" for i in range(BATCH - len(overwrite)))]


@dataclass
class Phase:
    name: str
    seconds: float
    #: CPU seconds of this process (archive, API, jobs and driver; not SeaweedFS's)
    cpu_seconds: float
    peak_rss_mib: float
    s3_requests: int
    detail: str = ""


@dataclass
class Results:
    files: int
    seed: str
    machine: str
    load_before: float
    seed_seconds: dict[str, float] = field(default_factory=dict)
    phases: list[Phase] = field(default_factory=list)


class RequestCounter:
    """S3 requests the archive sent: its botocore clients' ``before-send`` events and its
    own signed copies."""

    def __init__(self, store: Any) -> None:
        self.count = 0
        for client in {id(c): c for c in (store.client, store.copy_client)}.values():
            client.meta.events.register("before-send.s3", self._sent)
        copier = getattr(store, "_copier", None)
        if copier is not None:
            copy = copier.copy

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.count += 1
                return copy(*args, **kwargs)

            copier.copy = counted

    def _sent(self, **_kwargs: Any) -> None:
        self.count += 1


class Sim:
    def __init__(self, archive: Any, url: str, n: int, jobs: int, mode: str) -> None:
        from zarrchive.services.identity.auth import create_user

        self.archive, self.n, self.jobs, self.mode = archive, n, jobs, mode
        with archive.db.session() as session:
            token = create_user(session, "bench", admin=True)[1]
        self.api = httpx.Client(
            base_url=url, headers={"Authorization": f"token {token}"}, timeout=7200
        )
        self.anon = httpx.Client(base_url=url, timeout=7200)
        self.counter = RequestCounter(archive.store)
        self.results = Results(
            n,
            mode,
            f"{os.cpu_count()} cores, Python {platform.python_version()}",
            os.getloadavg()[0],
        )
        self.dandiset = self.api.post("/api/dandisets/", json={"name": "scale"}).json()[
            "identifier"
        ]
        self.zarr_id = (
            self.api.post("/api/zarr/", json={"name": "sim.zarr", "dandiset": self.dandiset})
            .raise_for_status()
            .json()["zarr_id"]
        )
        self.api.post(
            f"/api/dandisets/{self.dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "sim.zarr"}, "zarr_id": self.zarr_id},
        ).raise_for_status()

    def phase(self, name: str, fn: Callable[[], str]) -> Phase:
        reset_peak()
        before = self.counter.count
        started, cpu = time.perf_counter(), _cpu()
        detail = fn()
        seconds, cpu = time.perf_counter() - started, _cpu() - cpu
        phase = Phase(name, seconds, cpu, vm_hwm_mib(), self.counter.count - before, detail)
        self.results.phases.append(phase)
        print(
            f"  {name:46} {phase.seconds:9.2f} s {cpu:8.2f} s CPU {phase.peak_rss_mib:6.0f} MiB "
            f"{phase.s3_requests:>9} S3 req  {detail}",
            flush=True,
        )
        return phase

    # -- seeding ----------------------------------------------------------------------------
    def _put_all(self, items: Iterator[tuple[str, bytes, str]], what: str) -> int:
        """PUT every ``(key, body, md5)`` to its presigned URL, :attr:`jobs` at once."""
        from zarrchive.content_types import zarr_content_type

        store = self.archive.store
        limits = httpx.Limits(max_connections=self.jobs, max_keepalive_connections=self.jobs)
        started = time.perf_counter()
        with (
            httpx.Client(timeout=600, limits=limits) as s3,
            concurrent.futures.ThreadPoolExecutor(self.jobs) as pool,
        ):

            def put(key_body: tuple[str, bytes, str]) -> None:
                key, body, md5 = key_body
                kind = "application/json" if key.endswith("/.checksum") else None
                kind = kind or zarr_content_type(key)
                url = store.presign_put(key, md5, 3600, kind)
                for attempt in range(5):
                    try:
                        headers = {"Content-MD5": _b64(md5), "Content-Type": kind}
                        s3.put(url, content=body, headers=headers).raise_for_status()
                        return
                    except httpx.HTTPError:
                        if attempt == 4:
                            raise
                        time.sleep(0.5 * (attempt + 1))

            done = 0
            while chunk := list(itertools.islice(items, 20000)):
                list(pool.map(put, chunk))
                done += len(chunk)
                if done % 200000 == 0:
                    rate = done / (time.perf_counter() - started)
                    print(f"    {done} {what} PUT ({rate:.0f}/s)", flush=True)
        return done

    def _put_nodes(self) -> tuple[str, int, int]:
        """Every ``.checksum`` node (computed in one streamed pass); the root's digest, count
        and size."""
        from zarrchive.checksum import iter_directory_digests
        from zarrchive.storage.keys import checksum_node_key

        root: tuple[str, int, int] = ("", 0, 0)

        def nodes() -> Iterator[tuple[str, bytes, str]]:
            nonlocal root
            digests = iter_directory_digests(
                ((p, 0, EMPTY_MD5) for p in entry_paths(self.n)), grouped=True, with_nodes=True
            )
            for d in digests:
                assert d.node_json is not None
                body = d.node_json.encode("ascii")
                if d.path == "":
                    root = (d.digest, d.count, d.size)
                yield checksum_node_key(self.zarr_id, d.path), body, _md5(body)

        started = time.perf_counter()
        count = self._put_all(nodes(), "nodes")
        self.results.seed_seconds["nodes"] = time.perf_counter() - started
        print(f"  seeded {count} .checksum nodes in {time.perf_counter() - started:.0f} s")
        return root

    def _set_root(self, root: tuple[str, int, int]) -> None:
        from zarrchive.db.models import Zarr

        with self.archive.db.write_session() as session:
            zarr = session.get(Zarr, self.zarr_id)
            assert zarr is not None
            zarr.checksum, zarr.file_count, zarr.size = root

    def seed(self) -> str:
        return self.seed_direct() if self.mode == "direct" else self.seed_put()

    def seed_put(self) -> str:
        """N empty objects PUT one by one (about 200/s here), the nodes, the first manifest
        from a listing."""
        from zarrchive.services.zarr_engine.manifests import write_manifest
        from zarrchive.storage.keys import zarr_object_key

        started = time.perf_counter()
        objects = ((zarr_object_key(self.zarr_id, p), b"", EMPTY_MD5) for p in entry_paths(self.n))
        self._put_all(objects, "objects")
        times = self.results.seed_seconds
        times["objects"] = time.perf_counter() - started
        print(f"  seeded {self.n} objects in {times['objects']:.0f} s", flush=True)
        root = self._put_nodes()
        self._set_root(root)
        first = self.phase(
            "seed: first manifest (a listing of S3)",
            lambda: str(write_manifest(self.archive, self.zarr_id).source),
        )
        times["first manifest"] = first.seconds
        return root[0]

    def seed_direct(self) -> str:
        """What a long run of batches leaves, written directly: the records of one applied
        batch of N files (``zarr_changed_objects`` rows, inserted in bulk), every node, the
        first manifest from those records (the manifest job's path), then the records
        pruned as the next manifest would.  No chunk object is PUT, bar the 250 the
        measured batch overwrites (real versions, so that the rollback can copy them
        back): every other object of the manifest is absent from S3, its version id made
        up."""
        from sqlalchemy import delete, insert

        from zarrchive.checksum import EMPTY_CHECKSUM
        from zarrchive.db.models import ZarrChangedObject, ZarrChangeSet
        from zarrchive.services.zarr_engine.manifests import ManifestSource, write_manifest
        from zarrchive.storage.keys import zarr_object_key

        store, times = self.archive.store, self.results.seed_seconds
        started = time.perf_counter()
        overwritten = set(change_paths(self.n)[: min(250, self.n)])
        real: dict[str, tuple[str, Any]] = {}

        def put_real(path: str) -> None:
            key = zarr_object_key(self.zarr_id, path)
            store.put(key, b"")
            info = store.head(key)
            assert info is not None and info.version_id is not None
            real[path] = (info.version_id, info.last_modified)

        store.map(put_real, sorted(overwritten))
        times["objects (the batch's 250 overwrites only)"] = time.perf_counter() - started
        root = self._put_nodes()

        started = time.perf_counter()
        seeded_at = datetime.now(UTC).replace(microsecond=0)
        with self.archive.db.write_session() as session:
            change_set = ZarrChangeSet(
                zarr_id=self.zarr_id,
                seq=1,
                checksum_before=EMPTY_CHECKSUM,
                checksum_after=root[0],
                embargoed=False,
                manifest_written=False,
            )
            session.add(change_set)
            session.flush()
            set_id = change_set.id
        paths = entry_paths(self.n)
        done = 0
        while block := list(itertools.islice(paths, 500_000)):
            with self.archive.db.write_session() as session:
                for start in range(0, len(block), 50_000):
                    rows = []
                    for path in block[start : start + 50_000]:
                        version, modified = real.get(path) or (f"sim-{done}", seeded_at)
                        rows.append(
                            {
                                "change_set_id": set_id,
                                "path": path,
                                "version_id": version,
                                "last_modified": modified,
                                "size": 0,
                                "etag": EMPTY_MD5,
                            }
                        )
                        done += 1
                    session.execute(insert(ZarrChangedObject), rows)
            if done % 2_000_000 == 0:
                print(f"    {done} records inserted", flush=True)
        times["records (bulk inserts)"] = time.perf_counter() - started
        print(f"  seeded {done} records in {times['records (bulk inserts)']:.0f} s", flush=True)
        self._set_root(root)

        def first_manifest() -> str:
            outcome = write_manifest(self.archive, self.zarr_id)
            assert outcome.source is ManifestSource.RECORDS, outcome
            return f"{outcome.entries} entries, from {outcome.source}"

        first = self.phase("seed: first manifest (from the records)", first_manifest)
        times["first manifest"] = first.seconds
        started = time.perf_counter()
        with self.archive.db.write_session() as session:
            session.execute(
                delete(ZarrChangedObject).where(ZarrChangedObject.change_set_id == set_id)
            )
        times["records pruned"] = time.perf_counter() - started
        return root[0]

    # -- the measured operations -------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        return dict(self.api.get(f"/api/zarr/{self.zarr_id}/").raise_for_status().json())

    def wait_at_rest(self) -> dict[str, Any]:
        while True:
            state = self.info()
            if state.get("upload_state", "at_rest") == "at_rest":
                return state
            time.sleep(0.05)

    def wait_manifest(self, checksum: str) -> str:
        while True:
            rows = self.api.get(f"/api/zarr/{self.zarr_id}/manifests/").raise_for_status().json()
            for row in rows:
                if row["checksum"] == checksum:
                    return f"{row['entries']} entries"
            time.sleep(0.05)

    def batch(self) -> str:
        paths = change_paths(self.n)
        bodies = {p: f"v1/{p}".encode() for p in paths}
        files = [{"path": p, "etag": _md5(b)} for p, b in bodies.items()]
        opened = self.api.post(f"/api/zarr/{self.zarr_id}/upload/", json=files)
        opened.raise_for_status()
        with (
            httpx.Client(timeout=120) as s3,
            concurrent.futures.ThreadPoolExecutor(16) as pool,
        ):

            def put(item: dict[str, str]) -> None:
                body = bodies[item["path"]]
                headers = {"Content-MD5": _b64(_md5(body))}
                if item.get("content_type"):
                    headers["Content-Type"] = item["content_type"]
                s3.put(item["upload_url"], content=body, headers=headers).raise_for_status()

            list(pool.map(put, opened.json()))

        def complete() -> str:
            self.api.post(f"/api/zarr/{self.zarr_id}/upload/complete/").raise_for_status()
            return f"{len(paths)} files (250 overwrites, 250 new)"

        self.phase("500-file batch: complete", complete)
        self.phase(
            "500-file batch: apply (until at rest)",
            lambda: f"{self.wait_at_rest()['file_count']} files",
        )
        checksum = str(self.info()["checksum"])
        self.phase("500-file batch: its manifest (records)", lambda: self.wait_manifest(checksum))
        return checksum

    def refs(self) -> str:
        size = 0
        with self.anon.stream("GET", f"/api/zarr/{self.zarr_id}/refs.json") as answer:
            answer.raise_for_status()
            for chunk in answer.iter_bytes(1 << 20):
                size += len(chunk)
        return f"{size / 1e6:.1f} MB"

    def files_page(self, after: str) -> str:
        answer = self.anon.get(f"/api/zarr/{self.zarr_id}/files/", params={"after": after})
        rows = answer.raise_for_status().json()["results"]
        return f"{len(rows)} rows after {after}"

    def directory(self) -> str:
        answer = self.anon.get(f"/api/zarr/{self.zarr_id}.zarr/arr/0/0/")
        body = answer.raise_for_status().json()
        return f"{len(body['files'])} files, {len(body['directories'])} directories"

    def publish(self) -> str:
        answer = self.api.post(f"/api/dandisets/{self.dandiset}/versions/draft/publish/")
        return f"version {answer.raise_for_status().json()['version']}"

    def fsck(self) -> str:
        from zarrchive.services.zarr_engine.fsck import fsck

        report = fsck(self.archive, self.zarr_id)
        if self.mode == "direct":  # the chunk objects are absent: fsck says so
            return (
                f"{report.file_count} files listed, {len(report.problems)} problems (objects "
                f"absent), manifest {report.manifest}"
            )
        assert report.ok, report.problems[:10]
        return f"{report.file_count} files, ok, manifest {report.manifest}"

    def diff(self, before: str, after: str) -> str:
        from zarrchive.manifest import manifest_key, read_manifest
        from zarrchive.manifest.merge import diff_manifests
        from zarrchive.manifest.writer import chunk_stream
        from zarrchive.services.zarr_engine.manifests import READ_CHUNK

        store = self.archive.store

        def entries(checksum: str) -> Any:
            chunks = store.iter_content(manifest_key(self.zarr_id, checksum), chunk_size=READ_CHUNK)
            return read_manifest(chunk_stream(chunks), verify=False).entries

        kinds: dict[str, int] = {}
        for difference in diff_manifests(entries(before), entries(after)):
            kinds[str(difference.kind)] = kinds.get(str(difference.kind), 0) + 1
        return ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))

    def restore(self, checksum: str) -> str:
        answer = self.api.post(f"/api/zarr/{self.zarr_id}/restore/", json={"checksum": checksum})
        body = answer.raise_for_status().json()
        state = self.wait_at_rest()
        assert state["checksum"] == checksum, (state, checksum)
        return f"{body.get('copied')} copied, {body.get('deleted')} deleted"

    def run(self, *, batch_only: bool = False) -> Results:
        started = time.perf_counter()
        first = self.seed()
        print(f"  seeded in {time.perf_counter() - started:.0f} s ({first})", flush=True)
        second = self.batch()
        if batch_only:
            return self.results
        # the slowest linear steps (diff, refs.json) last: a run stopped early still has
        # the bounded ones
        middle = entry_path(self.n, self.n // 2)
        self.phase(
            "flat listing: first page (files/?after=the middle)",
            functools.partial(self.files_page, middle),
        )
        for where, fraction in (("the start", 0.0), ("the middle", 0.5), ("the end", 0.999)):
            after = entry_path(self.n, min(self.n - 1, int(self.n * fraction)))
            self.phase(
                f"flat listing: a page after {where}", functools.partial(self.files_page, after)
            )
        self.phase("directory listing (arr/0/0/)", self.directory)
        self.phase("snapshot publish", self.publish)
        if self.mode == "put":
            self.phase("fsck", self.fsck)
        if self.api.get(f"/api/zarr/{self.zarr_id}/history/").status_code == 200:
            self.phase("rollback to the seeded state (restore)", lambda: self.restore(first))
        self.phase("diff of two states (two manifests)", lambda: self.diff(first, second))
        if self.mode == "direct":
            # after the steps that read the manifests: with the objects absent it finds S3
            # hashing to another checksum and raises the alarm (the current manifest
            # listed again)
            self.phase("fsck", self.fsck)
        self.phase("refs.json of the current state", self.refs)
        return self.results


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def _md5(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()


def _b64(md5_hex: str) -> str:
    from zarrchive.storage.objects import md5_to_content_md5

    return md5_to_content_md5(md5_hex)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--jobs", type=int, default=32, help="parallel PUTs while seeding")
    parser.add_argument(
        "--seed",
        choices=("direct", "put"),
        default="direct",
        help="direct: records, nodes and the manifest written directly, chunk objects absent "
        "(any N); put: every object PUT (about 200/s: small N only)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument(
        "--batch-only",
        action="store_true",
        help="after seeding, measure only the 500-file batch (complete, apply, its manifest)",
    )
    args = parser.parse_args()
    print(
        f"scale_sim --files {args.files} --seed {args.seed}: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
        f"load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    with local_archive("scale-sim-", published_zarrs="snapshot", publish_requires_valid=False) as (
        archive,
        url,
        _work,
    ):
        from zarrchive.allocator import map_large_blocks
        from zarrchive.jobs import job_queue_from_settings
        from zarrchive.services.runtime import set_current_archive

        map_large_blocks()  # as zarrchive serve does
        archive.jobs = job_queue_from_settings(archive.settings)  # jobs in-process, as serve
        set_current_archive(archive)
        sim = Sim(archive, url, args.files, args.jobs, args.seed)
        results = sim.run(batch_only=args.batch_only)
        archive.jobs.close(wait=True)  # the last manifest job, before S3 stops
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(results), indent=1))


if __name__ == "__main__":
    main()
