"""Manifests from records (issue #23 item 1): the merge, and the end-to-end targets.

1. Merge, pure, at ``--entries`` (default 10^6): the previous manifest (a file on disk, read
   streamed), merged with a ``--changes``-file change set (half overwrites spread over the
   Zarr, 40% new files, 10% deletions), written as the new manifest; in its own process, for
   its wall time and peak RSS, both ways: :func:`~zarrchive.manifest.merge_manifest` (what
   the manifest job runs: the base's lines reused) and ``generate_manifest(merge_changes(
   read_manifest(...)))``.  Each output is checked byte for byte against the manifest
   generated directly from the new state.
2. End to end on SeaweedFS at ``--e2e`` entries (default 10^6; SQLite,
   ``ZARRCHIVE_PUBLISHED_ZARRS=snapshot``): a synthetic state of the Zarr is seeded as the
   archive holds it after applies (every ``.checksum`` node in S3, the checksum in the
   database, the manifest of that checksum with its row and records' rest mark; seeding
   10^6 real objects through SeaweedFS would take hours, and nothing measured lists
   them).  Then a ``--changes``-file batch (half overwrites spread over the Zarr, half new
   files) goes through the real upload path (open, PUTs to the presigned URLs, complete
   with wait: verified, copied into place, tree updated, changes recorded); once the Zarr
   is at rest, the manifest job (``write_manifest``) runs in its own process: the time
   until the manifest is ready.  Then another such batch, and a snapshot-mode publish in
   its own process (its manifest made from records, then the publication).  The manifest
   must be made from records and hash to the archive's checksum; the batches' real
   objects must appear in it as a listing of S3 shows them.
3. In one process that stays alive, as ``zarrchive serve`` does, at ``--in-process``
   entries (issue #23 item 5: the server's peak RSS while it makes a manifest): the same
   seeding (by the bench's own process), then a "server" child that applies the batches
   itself and, ``--rounds`` times, makes the manifest in the real in-process job queue
   (``InProcessJobQueue(threads=2)``, the job ``generate_manifest_job``), then a
   snapshot-mode publish in a thread of its own.  Around each: the resting RSS (after the
   batch, before the job), the peak (a thread sampling ``VmRSS`` every 5 ms, and ``VmHWM``
   reset through ``/proc/self/clear_refs``), the RSS right after and a few seconds later,
   and glibc's view (``mallinfo2``: bytes in use, bytes free but kept).  ``--tracemalloc``
   adds the Python heap's peak and its biggest allocation sites at that peak.  Run it with
   ``MALLOC_ARENA_MAX=2`` in the environment to test the allocator's arenas.

Commands (from the repository root):
``.venv/bin/python bench/manifest_records_bench.py --entries 1000000 --changes 500 --e2e 1000000``
``.venv/bin/python bench/manifest_records_bench.py --entries 0 --e2e 0 --in-process 1000000``
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zarrchive.manifest import (
    ManifestChange,
    ManifestEntry,
    generate_manifest,
    merge_changes,
    merge_manifest,
    read_manifest,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)
T1 = datetime(2026, 11, 26, tzinfo=UTC)


def listing(n: int) -> Iterator[ManifestEntry]:
    """*n* synthetic entries ``arr/{a}/{b}/{c}``, sorted by key as S3 lists them."""
    names = sorted(str(i) for i in range(100))
    tops = sorted(str(i) for i in range((n + 9999) // 10000))
    i = 0
    for a in tops:
        for b in names:
            for c in names:
                if i == n:
                    return
                yield ManifestEntry(
                    f"arr/{a}/{b}/{c}",
                    f"{i:032x}"[::-1],
                    T0 + timedelta(seconds=i),
                    1_000_000 + i % 4096,
                    f"{i:032x}",
                )
                i += 1


def change_set(n: int, changes: int) -> list[ManifestChange]:
    """Overwrites and deletions spread over the *n* entries, new files in a new directory."""
    step = max(1, n // changes)
    overwrite: list[str] = []
    delete: list[str] = []
    for i, entry in enumerate(listing(n)):  # streamed: the child's peak RSS is the merge's
        if i % step == 0 and len(overwrite) < changes // 2:
            overwrite.append(entry.path)
        elif i % step == step // 2 and len(delete) < changes // 10:
            delete.append(entry.path)
    new = [f"arr/new/{i}" for i in range(changes - len(overwrite) - len(delete))]
    result = [ManifestChange(p, None) for p in delete]
    for i, path in enumerate(overwrite + new):
        result.append(ManifestChange(path, ManifestEntry(path, f"new{i}", T1, 7, f"{i:032x}")))
    return sorted(result, key=lambda c: c.path)


def new_state(n: int, changes: list[ManifestChange]) -> Iterator[ManifestEntry]:
    by_path = {c.path: c.entry for c in changes}
    state = {e.path: e for e in listing(n) if e.path not in by_path}
    state.update({p: e for p, e in by_path.items() if e is not None})
    for path in sorted(state):
        yield state[path]


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM: unlike ru_maxrss, not inherited across exec from the
    forking parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def merge_child(base: str, n: int, changes: int, out: str, how: str) -> None:
    delta = change_set(n, changes)
    start = time.perf_counter()
    with open(base, "rb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
        if how == "fast":
            manifest = merge_manifest(f, delta, body)
        else:
            merged = merge_changes(read_manifest(f, verify=False).entries, delta)
            manifest = generate_manifest(merged, body)
        with open(out, "wb") as target:
            manifest.write_to(target)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib()
    print(json.dumps({"seconds": seconds, "peak_rss_mib": peak}))


def merge_run(n: int, changes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base, out, expected = (Path(tmp) / name for name in ("base", "out", "expected"))
        with base.open("wb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
            generate_manifest(listing(n), body).write_to(f)
        with expected.open("wb") as f, tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
            generate_manifest(new_state(n, change_set(n, changes)), body).write_to(f)
        for how in ("fast", "entries"):
            load = os.getloadavg()[0]
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--merge-child",
                    str(base),
                    str(n),
                    str(changes),
                    str(out),
                    how,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            same = _sha(out) == _sha(expected)
            assert same, "the merged manifest differs from the new state's"
            name = "merge_manifest (lines reused)" if how == "fast" else "merge_changes+generate"
            print(
                f"merge, {name}: {n} entries + {changes} changes: {r['seconds']:.1f} s, "
                f"peak RSS {r['peak_rss_mib']:.1f} MiB, {base.stat().st_size / 2**20:.1f} MiB "
                f"file, load {load:.1f}, byte-identical to the new state's manifest: {same}",
                flush=True,
            )


def _sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def e2e_child(mode: str) -> None:
    """In its own process: the manifest job (``manifest``) or a snapshot-mode publish
    (``publish``) of the bench Zarr; prints the figures as JSON."""
    from zarrchive.config import Settings
    from zarrchive.services.dandi.publish import publish
    from zarrchive.services.identity.auth import Caller
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine.manifests import write_manifest

    archive = Archive.from_settings(Settings.from_env(), migrate=False)
    zarr_id = os.environ["BENCH_ZARR_ID"]
    start = time.perf_counter()
    result: dict[str, object] = {}
    if mode == "manifest":
        outcome = write_manifest(archive, zarr_id)
        result = {"status": str(outcome.status), "source": str(outcome.source)}
        result["mismatch"] = outcome.mismatch
    else:
        import logging

        from zarrchive.services.zarr_engine import snapshots

        prepared: list[float] = []
        prepare = snapshots.prepare_manifest

        def timed(*args: Any) -> None:  # what publish runs first: the manifest
            began = time.perf_counter()
            prepare(*args)
            prepared.append(time.perf_counter() - began)

        logging.basicConfig(level=logging.WARNING)
        import zarrchive.services.dandi.publish as publishing

        publishing.prepare_manifest = timed  # type: ignore[assignment]
        caller = Caller(int(os.environ["BENCH_USER_ID"]), "bench", True)
        version = publish(archive, caller, os.environ["BENCH_DANDISET"])
        result = {"version": str(getattr(version, "version", version)), "manifest": prepared}
    result["seconds"] = time.perf_counter() - start
    result["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(result))


def _run_child(mode: str, env: dict[str, str]) -> dict[str, object]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--e2e-child", mode],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(f"the {mode} child failed:\n{proc.stderr[-4000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["wall"] = time.perf_counter() - started
    return result


def _seed(archive: Any, zarr_id: str, n: int) -> str:
    """A synthetic *n*-entry state of the Zarr as the archive would hold it after applies
    (its ``.checksum`` nodes in S3, its checksum in the database, the manifest of that
    checksum in S3 with its row and the rest mark the records chain from); the objects
    themselves are not in S3 (nothing here lists them)."""
    from zarrchive.checksum import iter_directory_digests
    from zarrchive.db.models import Zarr, ZarrChangeSet, ZarrManifest
    from zarrchive.manifest import manifest_key
    from zarrchive.storage.keys import checksum_node_key

    store = archive.store
    nodes: list[tuple[str, bytes]] = []
    root = ("", 0, 0)
    for d in iter_directory_digests(
        ((e.path, e.size, e.etag) for e in listing(n)), grouped=True, with_nodes=True
    ):
        assert d.node_json is not None
        nodes.append((checksum_node_key(zarr_id, d.path), d.node_json.encode("ascii")))
        if d.path == "":
            root = (d.digest, d.count, d.size)
    for start in range(0, len(nodes), 2000):
        store.map(
            lambda kv: store.put(kv[0], kv[1], "application/json"), nodes[start : start + 2000]
        )
    checksum, count, size = root
    with tempfile.SpooledTemporaryFile(max_size=16 << 20) as body:
        generated = generate_manifest(listing(n), body, database_checksum=checksum)
        store.upload_fileobj(manifest_key(zarr_id, checksum), generated.open(), "application/json")
    with archive.db.write_session() as session:
        zarr = session.get(Zarr, zarr_id)
        assert zarr is not None
        zarr.checksum, zarr.file_count, zarr.size = checksum, count, size
        session.add(
            ZarrManifest(zarr_id=zarr_id, checksum=checksum, listing_checksum=checksum, entries=n)
        )
        session.add(
            ZarrChangeSet(
                zarr_id=zarr_id,
                seq=None,
                checksum_before=checksum,
                checksum_after=checksum,
                embargoed=False,
                manifest_written=True,
            )
        )
    return str(checksum)


def _upload_batch(archive: Any, caller: Any, zarr_id: str, files: dict[str, bytes]) -> float:
    """One batch through the upload path (open, PUT to the presigned URLs, complete with
    wait: verified, copied into place, tree updated, changes recorded); the seconds of the
    complete (the Zarr is at rest when it returns)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from zarrchive.content_types import zarr_content_type
    from zarrchive.services.zarr_engine.uploads import complete_batch, start_batch

    urls = start_batch(
        archive, caller, zarr_id, [(p, hashlib.md5(b).hexdigest()) for p, b in files.items()]
    )
    with httpx.Client(timeout=120) as client, ThreadPoolExecutor(16) as pool:

        def put(url: Any) -> None:
            body = files[url.path]
            digest = hashlib.md5(body).digest()
            headers = {
                "Content-MD5": __import__("base64").b64encode(digest).decode(),
                "Content-Type": zarr_content_type(url.path),  # signed by the URL
            }
            client.put(url.upload_url, content=body, headers=headers).raise_for_status()

        list(pool.map(put, urls))
    start = time.perf_counter()
    complete_batch(archive, caller, zarr_id, wait=True)
    return time.perf_counter() - start


def _bench_env(tmp: str, endpoint_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "ZARRCHIVE_DATA_DIR": tmp,
        "ZARRCHIVE_DATABASE_URL": f"sqlite:///{tmp}/bench.sqlite3",
        "ZARRCHIVE_S3_ENDPOINT_URL": endpoint_url,
        "ZARRCHIVE_S3_ACCESS_KEY_ID": "bench",
        "ZARRCHIVE_S3_SECRET_ACCESS_KEY": "bench-secret",
        "ZARRCHIVE_PUBLISHED_ZARRS": "snapshot",
        "ZARRCHIVE_PUBLISH_REQUIRES_VALID": "false",
    }


def _bench_setup(archive: Any, env: dict[str, str], n: int) -> dict[str, str]:
    """A user, a dandiset and its Zarr seeded with *n* entries; the children's environment."""
    from zarrchive.db.models import User
    from zarrchive.services.dandi.assets import create_asset
    from zarrchive.services.dandi.dandisets import create_dandiset
    from zarrchive.services.identity.auth import Caller
    from zarrchive.services.zarr_engine.zarrs import create_zarr

    with archive.db.write_session() as session:
        user = User(username="bench", is_admin=True)
        session.add(user)
        session.flush()
        caller = Caller.of(user)
        identifier = create_dandiset(session, caller, "bench").identifier
        zarr_id = create_zarr(session, caller, "bench.zarr", identifier).id
        create_asset(session, caller, identifier, "draft", {"path": "bench.zarr"}, zarr_id=zarr_id)
    start = time.perf_counter()
    first = _seed(archive, zarr_id, n)
    print(
        f"seeded a synthetic {n}-entry state ({first}: .checksum nodes, manifest) in "
        f"{time.perf_counter() - start:.0f} s",
        flush=True,
    )
    return {
        **env,
        "BENCH_ZARR_ID": zarr_id,
        "BENCH_DANDISET": identifier,
        "BENCH_USER_ID": str(caller.id),
    }


def e2e_run(n: int, changes: int) -> None:
    from zarrchive.config import Settings
    from zarrchive.manifest import manifest_key, read_manifest
    from zarrchive.manifest.writer import chunk_stream
    from zarrchive.services.identity.auth import Caller
    from zarrchive.services.runtime import Archive
    from zarrchive.services.zarr_engine.manifests import current_entries
    from zarrchive.storage.seaweedfs import SeaweedFS

    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3", "bench", "bench-secret")
        server.start()
        try:
            env = _bench_env(tmp, server.endpoint_url)
            archive = Archive.from_settings(Settings.from_env(env))
            child_env = _bench_setup(archive, env, n)
            zarr_id = child_env["BENCH_ZARR_ID"]
            caller = Caller(int(child_env["BENCH_USER_ID"]), "bench", True)
            for round_, mode in enumerate(("manifest", "publish")):
                files = _batch(n, changes, round_)
                apply_seconds = _upload_batch(archive, caller, zarr_id, files)
                load = os.getloadavg()[0]
                r = _run_child(mode, child_env)
                what = (
                    "manifest job (write_manifest)"
                    if mode == "manifest"
                    else "snapshot-mode publish (manifest from records + publication)"
                )
                print(
                    f"{n} entries, {len(files)}-file batch applied in {apply_seconds:.1f} s; "
                    f"{what}: {r['seconds']:.1f} s in the child ({r['wall']:.1f} s with its "
                    f"start), peak RSS {r['peak_rss_mib']:.0f} MiB, load {load:.1f}; {r}",
                    flush=True,
                )
                if mode == "manifest":
                    assert r["status"] == "written" and r["source"] == "records", r
                    assert not r["mismatch"], r
            # the batches' real objects (the only ones in S3) are in the last manifest as
            # a listing shows them
            with archive.db.session() as session:
                from zarrchive.db.models import Zarr

                zarr = session.get(Zarr, zarr_id)
                assert zarr is not None
                checksum = zarr.checksum
            listed = {e.path: e for e in current_entries(archive.store, zarr_id)}
            chunks = archive.store.iter_content(manifest_key(zarr_id, checksum))
            found = {
                e.path: e
                for e in read_manifest(chunk_stream(chunks), verify=False).entries
                if e.path in listed
            }
            same = all(
                (f.version_id, f.size, f.etag, f.last_modified.replace(microsecond=0))
                == (e.version_id, e.size, e.etag, e.last_modified.replace(microsecond=0))
                for f, e in ((found.get(p), e) for p, e in listed.items())
                if f is not None
            )
            assert len(found) == len(listed) and same, "the manifest differs from S3"
            print(
                f"the {len(listed)} objects the batches wrote are in the published manifest "
                "as S3 lists them",
                flush=True,
            )
            archive.close()
        finally:
            server.stop()


# -- in one long-lived process (--in-process) -----------------------------------------------
def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _mallinfo() -> tuple[float, float]:
    """glibc's bytes in use and bytes free but kept by the allocator (MiB), every arena."""

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    libc = ctypes.CDLL(None)
    try:
        call = libc.mallinfo2
    except AttributeError:
        return (0.0, 0.0)
    call.restype = MallInfo2
    info = call()
    return ((info.uordblks + info.hblkhd) / 2**20, info.fordblks / 2**20)


class _Sampler:
    """A thread sampling this process's VmRSS every *interval* seconds: the peak since
    :meth:`reset` (with glibc's view at that peak)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak_kib = 0
        self.at_peak: tuple[float, float] = (0.0, 0.0)
        self.trace: Any = None  # a tracemalloc snapshot at the traced peak (--tracemalloc)
        self._traced_best = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        self.peak_kib = 0
        self.trace = None
        self._traced_best = 0
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS

    def _run(self) -> None:
        import tracemalloc

        last_trace = 0.0
        while not self._stop.wait(self.interval):
            rss = _status_kib("VmRSS")
            if rss > self.peak_kib:
                if rss > 1.02 * self.peak_kib:  # glibc's view, not at every KiB
                    self.at_peak = _mallinfo()
                self.peak_kib = rss
            if tracemalloc.is_tracing() and time.monotonic() - last_trace > 0.5:
                current, _peak = tracemalloc.get_traced_memory()
                if current > 1.1 * self._traced_best:
                    self._traced_best = current
                    self.trace = tracemalloc.take_snapshot()
                last_trace = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _batch(n: int, changes: int, index: int) -> dict[str, bytes]:
    delta = change_set(n, changes)
    overwrites = [c.path for c in delta if c.entry is not None][: changes // 2]
    files = {p: f"round {index} {p}".encode() for p in overwrites}
    files.update({f"arr/new{index}/{i}": f"new {i}".encode() for i in range(changes - len(files))})
    return files


def _in_thread(fn: Any) -> None:
    """Run *fn* in a thread of its own (as a request of the server); raise what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as error:  # raised below
            failed.append(error)

    thread = threading.Thread(target=run, name="request")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def in_process_child(n: int, changes: int, rounds: int, trace: bool) -> None:
    """The "server": applies the batches, makes the manifests in the in-process job queue
    and publishes, in this one process; prints one JSON line a phase."""
    import tracemalloc

    from sqlalchemy import select

    from zarrchive.config import Settings
    from zarrchive.db.models import Zarr, ZarrManifest
    from zarrchive.jobs import InProcessJobQueue
    from zarrchive.services.dandi.publish import publish
    from zarrchive.services.identity.auth import Caller
    from zarrchive.services.runtime import Archive, set_current_archive

    try:  # what `zarrchive serve` sets at its start (a tree from before it has none)
        from zarrchive.allocator import map_large_blocks
    except ImportError:
        allocator = "glibc's default"
    else:
        allocator = "large blocks mapped apart" if map_large_blocks() else "glibc's default"
    archive = Archive.from_settings(Settings.from_env(), migrate=False)
    set_current_archive(archive)
    jobs = InProcessJobQueue(threads=2)
    zarr_id = os.environ["BENCH_ZARR_ID"]
    caller = Caller(int(os.environ["BENCH_USER_ID"]), "bench", True)
    sampler = _Sampler()
    started = {"phase": "started", "rss_mib": _status_kib("VmRSS") / 1024, "allocator": allocator}
    print(json.dumps(started), flush=True)
    for round_ in range(rounds):
        for mode in ("manifest", "publish"):
            index = 2 * round_ + (mode == "publish")
            _upload_batch(archive, caller, zarr_id, _batch(n, changes, index))
            gc.collect()
            time.sleep(1)
            resting = _status_kib("VmRSS") / 1024
            if trace:
                tracemalloc.start(8)
            sampler.reset()
            start = time.perf_counter()
            if mode == "manifest":
                jobs.enqueue(
                    "zarrchive.services.zarr_engine.manifests:generate_manifest_job",
                    {"zarr_id": zarr_id},
                    key=f"manifest:{zarr_id}",
                )
                assert jobs.join(timeout=600), "the manifest job did not end"
                assert jobs.failed == 0, "the manifest job failed"
            else:  # in a request thread of the server
                _in_thread(lambda: publish(archive, caller, os.environ["BENCH_DANDISET"]))
            seconds = time.perf_counter() - start
            peak = max(sampler.peak_kib, _status_kib("VmHWM")) / 1024
            after = _status_kib("VmRSS") / 1024
            result: dict[str, Any] = {
                "phase": mode,
                "round": round_,
                "seconds": round(seconds, 1),
                "load": round(os.getloadavg()[0], 1),
                "resting_mib": round(resting, 1),
                "peak_mib": round(peak, 1),
                "after_mib": round(after, 1),
                "malloc_at_peak_used_free_mib": [round(x, 1) for x in sampler.at_peak],
            }
            if trace:
                _current, traced_peak = tracemalloc.get_traced_memory()
                result["traced_peak_mib"] = round(traced_peak / 2**20, 1)
                if sampler.trace is not None:
                    top = sampler.trace.statistics("traceback")[:6]
                    result["traced_top"] = [
                        f"{s.size / 2**20:.1f} MiB in {s.count}: "
                        + " <- ".join(
                            f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in s.traceback[:4]
                        )
                        for s in top
                    ]
                tracemalloc.stop()
            gc.collect()
            time.sleep(3)
            result["after_3s_mib"] = round(_status_kib("VmRSS") / 1024, 1)
            result["malloc_after_used_free_mib"] = [round(x, 1) for x in _mallinfo()]
            with archive.db.session() as session:
                zarr = session.get(Zarr, zarr_id)
                assert zarr is not None
                row = session.scalar(
                    select(ZarrManifest).where(
                        ZarrManifest.zarr_id == zarr_id, ZarrManifest.checksum == zarr.checksum
                    )
                )
                # from records: a listing of S3 (the batches' objects only) would not match
                assert row is not None and row.listing_checksum == zarr.checksum, mode
            print(json.dumps(result), flush=True)
    sampler.stop()
    jobs.close(wait=True, timeout=30)
    archive.close()


def in_process_run(n: int, changes: int, rounds: int, trace: bool) -> None:
    from zarrchive.config import Settings
    from zarrchive.storage.seaweedfs import SeaweedFS

    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3", "bench", "bench-secret")
        server.start()
        try:
            env = _bench_env(tmp, server.endpoint_url)
            from zarrchive.services.runtime import Archive

            archive = Archive.from_settings(Settings.from_env(env))
            child_env = _bench_setup(archive, env, n)
            archive.close()
            command = [sys.executable, __file__, "--in-process-child", str(n), str(changes)]
            command += [str(rounds), "trace" if trace else "-"]
            proc = subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            arena = os.environ.get("MALLOC_ARENA_MAX", "unset")
            for line in proc.stdout:
                r = json.loads(line)
                if r["phase"] == "started":
                    print(
                        f"in one process, {n} entries (MALLOC_ARENA_MAX {arena}, allocator: "
                        f"{r['allocator']}): {r['rss_mib']:.0f} MiB after its imports",
                        flush=True,
                    )
                    continue
                what = "manifest job" if r["phase"] == "manifest" else "snapshot publish"
                print(
                    f"  round {r['round']}, {what}: {r['seconds']} s (load {r['load']}), RSS "
                    f"resting {r['resting_mib']:.0f}, peak {r['peak_mib']:.0f} "
                    f"(+{r['peak_mib'] - r['resting_mib']:.0f}), after {r['after_mib']:.0f}, "
                    f"{r['after_3s_mib']:.0f} 3 s later MiB; malloc in use/free at the peak "
                    f"{r['malloc_at_peak_used_free_mib']}, after "
                    f"{r['malloc_after_used_free_mib']}",
                    flush=True,
                )
                if "traced_peak_mib" in r:
                    print(f"    Python heap (tracemalloc) peak {r['traced_peak_mib']} MiB")
                    for top in r.get("traced_top", []):
                        print(f"      {top}")
            if proc.wait():
                raise SystemExit(f"the in-process child failed ({proc.returncode})")
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument(
        "--e2e", type=int, default=1_000_000, help="entries of the SeaweedFS Zarr (0: skip)"
    )
    parser.add_argument(
        "--in-process", type=int, default=0, help="entries of the one-process run (0: skip)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="manifest+publish rounds in it")
    parser.add_argument(
        "--tracemalloc", action="store_true", help="the Python heap's peak in the one process"
    )
    parser.add_argument("--in-process-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--merge-child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--e2e-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_child:
        base, n, changes, out, how = args.merge_child
        merge_child(base, int(n), int(changes), out, how)
        return
    if args.e2e_child:
        e2e_child(args.e2e_child)
        return
    if args.in_process_child:
        n, changes, rounds, trace = args.in_process_child
        in_process_child(int(n), int(changes), int(rounds), trace == "trace")
        return
    if args.entries:
        merge_run(args.entries, args.changes)
    if args.e2e:
        e2e_run(args.e2e, args.changes)
    if args.in_process:
        in_process_run(args.in_process, args.changes, args.rounds, args.tracemalloc)


if __name__ == "__main__":
    main()
