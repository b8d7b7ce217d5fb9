"""The batch records: which upload batch open on a Zarr is this client's.

The archive allows one open batch per Zarr.  Before opening one, the sync engine
(:mod:`zarrchive.client.upload`) writes a small record in the client's state directory
and removes it once the batch is completed or cancelled; a batch found open at the start
of an upload is then known to be ours (left by an interrupted run: completed if all its
files reached S3) or someone else's (cancelled, with a message).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path


def default_state_dir() -> Path:
    """``$ZARRCHIVE_STATE_DIR``, else ``$XDG_STATE_HOME/zarrchive``, else ``~/.local/state/zarrchive``."""
    explicit = os.environ.get("ZARRCHIVE_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "zarrchive"


class BatchRecords:
    """One small file per Zarr with a batch this client has opened (or is opening).

    A record names the archive (*api_url*) too: a record is ours only for the same archive.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_state_dir()

    def _file(self, zarr_id: str) -> Path:
        return self.directory / "batches" / f"{zarr_id}.json"

    def mark(self, api_url: str, zarr_id: str, files: int) -> None:
        path = self._file(zarr_id)
        record = {
            "api_url": api_url,
            "zarr_id": zarr_id,
            "files": files,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "time": time.time(),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(record))
            os.replace(tmp, path)
        except OSError:
            pass  # without a record the batch is still recognised as stale, only less politely

    def get(self, api_url: str, zarr_id: str) -> dict[str, object] | None:
        try:
            record = json.loads(self._file(zarr_id).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("api_url") != api_url:
            return None
        return record

    def clear(self, zarr_id: str) -> None:
        """Forget the record of *zarr_id* (the batch is closed, or was never opened)."""
        with contextlib.suppress(OSError):
            self._file(zarr_id).unlink()


__all__ = ["BatchRecords", "default_state_dir"]
