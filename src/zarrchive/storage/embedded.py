"""The embedded default's S3: SeaweedFS under ``$ZARRCHIVE_DATA_DIR/s3``.

Credentials are generated once and kept in the data directory.  While one
process runs the embedded S3 it records the endpoint in ``s3-endpoint``, so
other commands on the same data directory (``zarrchive admin ...``) use that
server instead of starting a second one on the same files.  The data directory is readable
by its owner only; the public bucket refuses anonymous callers its in-progress multipart
uploads (:meth:`SeaweedFS.keep_multipart_listings_private`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from zarrchive.config import Settings, make_private_dir
from zarrchive.errors import ConfigurationError
from zarrchive.storage.seaweedfs import SeaweedFS, write_private

DEFAULT_PORT = 8333

log = logging.getLogger(__name__)


def _credentials(data_dir: Path, settings: Settings) -> tuple[str, str]:
    if settings.s3_access_key_id and settings.s3_secret_access_key:
        return settings.s3_access_key_id, settings.s3_secret_access_key
    path = data_dir / "s3-credentials.json"
    make_private_dir(data_dir)
    if path.exists():
        stored = json.loads(path.read_text())
        return str(stored["access_key_id"]), str(stored["secret_access_key"])
    key, secret = "zarrchive" + secrets.token_hex(6), secrets.token_hex(20)
    write_private(path, json.dumps({"access_key_id": key, "secret_access_key": secret}))
    return key, secret


def _running_endpoint(marker: Path) -> str | None:
    if not marker.exists():
        return None
    endpoint = marker.read_text().strip()
    try:
        httpx.get(endpoint, timeout=1.0)
    except httpx.HTTPError:
        return None
    return endpoint


def running_embedded_s3(settings: Settings) -> Settings:
    """Settings pointing at the embedded S3 another process runs (for workers).

    Settings with an explicit ``s3_endpoint_url`` are returned unchanged.
    """
    if not settings.embedded_s3:
        return settings
    endpoint = _running_endpoint(settings.data_dir / "s3-endpoint")
    if endpoint is None:
        raise ConfigurationError(
            f"no embedded S3 is running for {settings.data_dir}: start 'zarrchive serve' first, "
            "or set ZARRCHIVE_S3_ENDPOINT_URL"
        )
    key, secret = _credentials(settings.data_dir, settings)
    return settings.with_overrides(
        s3_endpoint_url=endpoint, s3_access_key_id=key, s3_secret_access_key=secret
    )


@contextlib.contextmanager
def embedded_s3(settings: Settings) -> Iterator[Settings]:
    """Settings pointing at the embedded S3, started for the duration if needed.

    Settings with an explicit ``s3_endpoint_url`` are returned unchanged.
    """
    if not settings.embedded_s3:
        yield settings
        return
    settings.ensure_data_dir()
    s3_dir = settings.data_dir / "s3"
    key, secret = _credentials(settings.data_dir, settings)
    marker = settings.data_dir / "s3-endpoint"
    endpoint = _running_endpoint(marker)
    if endpoint is not None:
        yield settings.with_overrides(
            s3_endpoint_url=endpoint, s3_access_key_id=key, s3_secret_access_key=secret
        )
        return
    port = int(os.environ.get("ZARRCHIVE_EMBEDDED_S3_PORT") or DEFAULT_PORT)
    server = SeaweedFS(s3_dir, key, secret, s3_port=port, public_read_buckets=[settings.s3_bucket])
    server.start()
    try:
        server.keep_multipart_listings_private(settings.s3_bucket)
        write_private(marker, server.endpoint_url)
        yield settings.with_overrides(
            s3_endpoint_url=server.endpoint_url, s3_access_key_id=key, s3_secret_access_key=secret
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            marker.unlink()
        began = time.monotonic()
        server.stop()
        log.info("embedded S3 stopped in %.1f s", time.monotonic() - began)
