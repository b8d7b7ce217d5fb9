"""A throwaway archive for benchmarks: its own SeaweedFS (``weed mini``), SQLite in a
temporary directory, and the API served by uvicorn in a thread of the bench's process.

    with local_archive("refs-bench-", published_zarrs=...) as (archive, url, work):
        ...

Import it from a bench script run as ``.venv/bin/python bench/NAME.py`` (``bench/`` is then
the script's first import path).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

KEY, SECRET = "bench", "bench-secret"


@contextlib.contextmanager
def local_archive(
    prefix: str, *, wrap: Callable[[Any], Any] = lambda app: app, **settings: Any
) -> Iterator[tuple[Any, str, Path]]:
    """``(archive, API URL, work directory)``; *settings* override the archive's settings,
    *wrap* wraps the ASGI app (e.g. a request counter)."""
    import uvicorn

    from zarrchive.api import create_app
    from zarrchive.config import Settings
    from zarrchive.services.runtime import Archive
    from zarrchive.storage.seaweedfs import SeaweedFS, free_port

    work = Path(tempfile.mkdtemp(prefix=prefix))
    seaweed = SeaweedFS(work / "seaweedfs", KEY, SECRET, public_read_buckets=["bench*"])
    seaweed.start()
    server: uvicorn.Server | None = None
    try:
        resolved = Settings.from_env({}).with_overrides(
            data_dir=work / "data",
            database_url=f"sqlite:///{work / 'bench.sqlite3'}",
            s3_endpoint_url=seaweed.endpoint_url,
            s3_bucket="bench",
            s3_embargo_bucket="bench-embargoed",
            s3_access_key_id=KEY,
            s3_secret_access_key=SECRET,
            **settings,
        )
        (work / "data").mkdir()
        archive = Archive.from_settings(resolved)
        server = uvicorn.Server(
            uvicorn.Config(
                wrap(create_app(archive)), host="127.0.0.1", port=free_port(), log_level="warning"
            )
        )
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.05)
        yield archive, f"http://127.0.0.1:{server.config.port}", work
    finally:
        if server is not None:
            server.should_exit = True
        seaweed.stop()
        shutil.rmtree(work, ignore_errors=True)  # the objects, the database, the local copies
