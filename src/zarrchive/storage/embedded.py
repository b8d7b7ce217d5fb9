"""The embedded default's S3: SeaweedFS under ``$ZARRCHIVE_DATA_DIR/s3``.

Credentials are generated once and kept in the data directory.  While one
process runs the embedded S3 it records the endpoint in ``s3-endpoint``, so
other commands on the same data directory (``zarrchive admin ...``) use that
server instead of starting a second one on the same files.  The data directory is readable
by its owner only; the public bucket refuses anonymous callers its in-progress multipart
uploads and its staging area (:meth:`SeaweedFS.keep_multipart_listings_private`).

It listens on a loopback address of its own (:func:`embedded_s3_host`), not the pages':
browsers then treat S3 and the pages as two sites.  S3 serves whatever was uploaded, and
SeaweedFS serves any object as ``text/html`` to an anonymous GET that asks for it
(``?response-content-type=``): a script on S3's origin must not be same-site with the pages,
whose cookies ignore ports (it could plant a session cookie of its choosing there).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from zarrchive.config import Settings, make_private_dir
from zarrchive.errors import ConfigurationError
from zarrchive.storage.seaweedfs import LOOPBACK, SeaweedFS, write_private

DEFAULT_PORT = 8333
#: The loopback addresses the embedded S3 may take, in order of preference: any but the
#: pages' (on Linux all of 127/8 is loopback; elsewhere, often only 127.0.0.1 is).
SEPARATE_HOSTS = ("127.0.0.2", "127.0.0.3")

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


def can_listen_on(host: str) -> bool:
    """Whether a server could listen on *host* (the address is configured here)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
    except OSError:
        return False
    return True


def embedded_s3_host(
    pages_host: str, requested: str | None, listenable: Callable[[str], bool] = can_listen_on
) -> str:
    """Where the embedded S3 listens: *requested* (``ZARRCHIVE_EMBEDDED_S3_HOST``) if set,
    else the first of :data:`SEPARATE_HOSTS` other than the pages' host (*pages_host*) that
    is *listenable*, else 127.0.0.1 (logged: S3 is then the pages' site)."""
    if requested:
        return requested
    for host in SEPARATE_HOSTS:
        if host != pages_host and listenable(host):
            return host
    log.warning(
        "the embedded S3 listens on %s, the pages' own site (no other loopback address "
        "can be used here): uploaded content served by S3 could plant cookies in the pages; "
        "set ZARRCHIVE_EMBEDDED_S3_HOST to another loopback address, or browse the pages "
        "at http://localhost:PORT",
        LOOPBACK,
    )
    return LOOPBACK


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
    host = embedded_s3_host(settings.host, os.environ.get("ZARRCHIVE_EMBEDDED_S3_HOST"))
    server = SeaweedFS(
        s3_dir, key, secret, s3_port=port, public_read_buckets=[settings.s3_bucket], host=host
    )
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
