"""A timeline of an upload, for ``bench/upload_bench.py --trace``: wraps the client's and the
server's upload steps (no change to their code) and prints one line per step to stderr,
``TRACE <wall clock> <side> <step> <seconds>``, so that both processes' lines merge in time.

The client side runs as ``python bench/upload_trace.py ARGS...`` (the CLI's arguments); the
server side is :func:`trace_server`, called in the bench's own process.
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()


def _emit(side: str, step: str, started: float, seconds: float) -> None:
    with _lock:
        print(f"TRACE {started:.3f} {side} {step} {seconds:.3f}", file=sys.stderr, flush=True)


def _wrap(
    owner: Any, name: str, side: str, step: str | None = None, *, slower_than: float = 0.0
) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    def traced(*args: Any, **kwargs: Any) -> Any:
        wall, started = time.time(), time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            took = time.perf_counter() - started
            if took >= slower_than:
                _emit(side, step or name, wall, took)

    setattr(owner, name, traced)


def trace_client() -> None:
    api = importlib.import_module("zarrchive.client.api")
    uploader = importlib.import_module("zarrchive.client.upload.uploader")
    pipeline = importlib.import_module("zarrchive.client.upload.pipeline")

    for name in ("_open_batch", "_open_ahead", "_finish", "_complete"):
        _wrap(pipeline.BatchPipeline, name, "client")
    _wrap(uploader.Uploader, "_send", "client", "_upload_entries")
    for module in (uploader, pipeline):  # (each calls the function by its own name)
        _wrap(module, "wait_at_rest", "client", "_wait_at_rest")
    for name in ("complete_upload", "queue_upload", "open_upload", "get_zarr", "info"):
        _wrap(api.ApiClient, name, "client", f"http.{name}")


def trace_server() -> None:
    from zarrchive.services.zarr_engine.uploads import apply, batches

    for name in ("start_batch", "complete_batch"):
        _wrap(batches, name, "server")
    import zarrchive.services.zarr_engine.uploads as uploads

    for name in ("start_batch", "complete_batch"):
        if hasattr(uploads, name):
            setattr(uploads, name, getattr(batches, name))
    for name in (
        "refuse_file_directory_clashes",
        "_queued_clashes",
        "_verify_staged",
        "_urls",
        "check_staged",
    ):
        if hasattr(batches, name):
            _wrap(batches, name, "server")
    for name in ("_copy_into_place", "_apply_claimed", "_claim_next", "apply_pending"):
        _wrap(apply, name, "server")
    from zarrchive.storage.objects import ObjectStore

    # single requests: only the slow ones (a straggler holds its batch's copies back)
    for name in ("copy_within", "get", "put"):
        _wrap(ObjectStore, name, "server", f"slow.{name}", slower_than=0.15)
    _wrap(apply, "_renew", "server", "slow._renew", slower_than=0.05)
    _wrap(apply, "drop_staging", "server")


def main() -> None:
    trace_client()
    from zarrchive.cli import main as cli

    started = time.time()
    try:
        sys.argv = ["zarrchive", *sys.argv[1:]]
        cli()
    finally:
        _emit("client", "cli", started, time.time() - started)


if __name__ == "__main__":
    main()
