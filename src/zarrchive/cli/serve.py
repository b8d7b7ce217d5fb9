"""``zarrchive serve``: start the archive.

One process by default (the embedded default: SQLite, an embedded SeaweedFS, jobs in a
background thread).  ``--workers N`` runs N API processes (uvicorn's workers, each building
its app with :func:`app_from_env`); they share nothing but the database, S3 and Redis, so
more than one needs all three outside the process: an S3 endpoint
(``ZARRCHIVE_S3_ENDPOINT_URL``), a database other than SQLite and Redis
(``ZARRCHIVE_REDIS_URL``, consumed by ``zarrchive worker`` processes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

import typer

from zarrchive.cli._common import friendly_errors
from zarrchive.config import Settings, redact_url
from zarrchive.errors import ConfigurationError

if TYPE_CHECKING:
    import uvicorn
    from fastapi import FastAPI

log = logging.getLogger("zarrchive")

#: The import string of the app factory each API worker process calls.
APP_FACTORY = "zarrchive.cli.serve:app_from_env"


def check_multiprocess(settings: Settings, workers: int) -> None:
    """Refuse a configuration that more than one API process would break."""
    if workers <= 1:
        return
    missing = []
    if settings.embedded_s3:
        missing.append(
            "an S3 endpoint (ZARRCHIVE_S3_ENDPOINT_URL): the embedded SeaweedFS belongs to "
            "the single-process default"
        )
    if settings.database_url.startswith("sqlite"):
        missing.append(
            "a database server (ZARRCHIVE_DATABASE_URL=postgresql+psycopg://...): SQLite "
            "serialises every write of every process on one file"
        )
    if not settings.redis_url:
        missing.append(
            "Redis (ZARRCHIVE_REDIS_URL) and `zarrchive worker` processes: in-process jobs "
            "would run in every API process, each coalescing only its own"
        )
    if missing:
        raise ConfigurationError(
            f"--workers {workers} needs " + "; ".join(missing) + ". Without them, run one process"
        )


def app_from_env() -> FastAPI:
    """The app of one API worker process, configured from ``ZARRCHIVE_*`` (uvicorn's factory).

    The parent process has migrated the database already.
    """
    from zarrchive.allocator import map_large_blocks
    from zarrchive.api import create_app
    from zarrchive.jobs import job_queue_from_settings
    from zarrchive.services.runtime import Archive, set_current_archive

    map_large_blocks()  # a long-lived process: see zarrchive.allocator
    settings = Settings.from_env()
    _install_connection_guard(settings)
    archive = Archive.from_settings(settings, migrate=False)
    archive.jobs = job_queue_from_settings(settings)
    set_current_archive(archive)
    log.info("API worker process %d ready", os.getpid())
    return create_app(archive, close_on_shutdown=True)


@friendly_errors
def serve(
    host: str | None = typer.Option(
        None, help="Address to listen on [env ZARRCHIVE_HOST; 127.0.0.1]"
    ),
    port: int | None = typer.Option(None, help="Port to listen on [env ZARRCHIVE_PORT; 8000]"),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="API processes [env ZARRCHIVE_WORKERS; 1]; more than one needs an S3 endpoint, "
        "PostgreSQL and Redis (with `zarrchive worker` processes for the jobs)",
        envvar="ZARRCHIVE_WORKERS",
    ),
) -> None:
    """Start the archive: the API, background jobs and (by default) an embedded S3."""
    import uvicorn

    from zarrchive.allocator import map_large_blocks
    from zarrchive.connection_guard import PROTOCOL, raise_open_files_limit
    from zarrchive.services.runtime import Archive

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    map_large_blocks()  # a long-lived process: see zarrchive.allocator
    settings = Settings.from_env()
    if host is not None:
        settings = settings.with_overrides(host=host)
    if port is not None:
        settings = settings.with_overrides(port=port)
    check_multiprocess(settings, workers)
    raise_open_files_limit()  # the worker processes inherit it
    if workers > 1:
        # migrate once, here; then every worker process builds its own archive from the env
        Archive.from_settings(settings).close()
        log.info(
            "%d API processes; database %s; S3 at %s; jobs on Redis at %s",
            workers,
            redact_url(settings.database_url),
            settings.s3_endpoint_url,
            redact_url(settings.redis_url or ""),
        )
        log.info("API listening on http://%s:%d (docs at /docs)", settings.host, settings.port)
        log_sign_in_providers(settings)
        uvicorn.run(
            APP_FACTORY,
            factory=True,
            workers=workers,
            host=settings.host,
            port=settings.port,
            log_level="info",
            http=PROTOCOL,  # each worker installs its guard in app_from_env
        )
        log.info("stopped")
        return
    with StopSignals() as stop:
        _serve_one_process(settings, stop)


def _serve_one_process(settings: Settings, stop: StopSignals) -> None:
    """The API, in-process jobs and (by default) the embedded S3, each start step timed."""
    import uvicorn

    from zarrchive.api import create_app
    from zarrchive.cli.admin import first_user_note
    from zarrchive.connection_guard import GuardedHttpToolsProtocol
    from zarrchive.jobs import job_queue_from_settings
    from zarrchive.services.runtime import Archive, set_current_archive
    from zarrchive.storage.embedded import embedded_s3

    began = time.monotonic()
    try:
        step = time.monotonic()
        with embedded_s3(settings) as resolved:
            if settings.embedded_s3:
                log.info(
                    "embedded S3 (SeaweedFS) listening on %s, data in %s (ready in %.1f s)",
                    resolved.s3_endpoint_url,
                    settings.data_dir / "s3",
                    time.monotonic() - step,
                )
            else:
                log.info("S3 at %s", resolved.s3_endpoint_url)
            step = time.monotonic()
            archive = Archive.from_settings(resolved, migrate=False)
            try:
                log.info(
                    "buckets %s and %s ready in %.1f s",
                    resolved.s3_bucket,
                    resolved.s3_embargo_bucket,
                    time.monotonic() - step,
                )
                step = time.monotonic()
                archive.db.migrate()
                log.info(
                    "database %s migrated in %.1f s",
                    redact_url(resolved.database_url),
                    time.monotonic() - step,
                )
                note = first_user_note(archive)
                if note is not None:
                    log.warning(note)
                archive.jobs = job_queue_from_settings(resolved)
                set_current_archive(archive)
                log.info(
                    "background jobs: %s",
                    f"Redis at {redact_url(resolved.redis_url)}, {archive.jobs}"
                    if resolved.redis_url
                    else str(archive.jobs),  # in-process: the threads of each lane
                )
                _install_connection_guard(resolved)
                log_sign_in_providers(resolved)
                config = uvicorn.Config(
                    create_app(archive),
                    host=resolved.host,
                    port=resolved.port,
                    log_level="info",
                    timeout_graceful_shutdown=GRACEFUL_REQUESTS_TIMEOUT,
                    http=GuardedHttpToolsProtocol,
                )
                server = _make_server(config, began)
                stop.serving(server)
                server.run()
                stop.serving(None)
                if not server.started and not stop.requested:
                    raise ConfigurationError(
                        f"the API could not listen on {resolved.host}:{resolved.port} (see the "
                        "message above): stop what uses it or choose another port with --port"
                    )
                log.info("API stopped")
            finally:
                archive.close()
    except StopRequested:
        log.info("start abandoned; stopped in %.1f s", time.monotonic() - stop.first_at)
        return
    if stop.requested:
        log.info("stopped in %.1f s", time.monotonic() - stop.first_at)
    else:
        log.info("stopped")


def _install_connection_guard(settings: Settings) -> None:
    """This process's connection bounds (:mod:`zarrchive.connection_guard`), logged."""
    from zarrchive.connection_guard import (
        ConnectionLimits,
        install_connection_guard,
        open_files_limit,
    )

    limits = ConnectionLimits.for_process(settings, open_files_limit())
    install_connection_guard(limits)
    log.info(
        "connections: at most %d, %d per client address; request heads within %g s",
        limits.max_connections,
        limits.max_per_client,
        limits.header_timeout,
    )


def log_sign_in_providers(settings: Settings) -> None:
    """Name each OpenID Connect provider and the redirect URI to register at it."""
    if not settings.oidc_providers:
        return
    from zarrchive.web.oidc import redirect_uri

    base = settings.public_url or f"http://{settings.host}:{settings.port}"
    for provider in settings.oidc_providers:
        log.info(
            "sign-in with %s (%s, client %s): register the redirect URI %s at the provider%s",
            provider.name,
            provider.issuer,
            provider.client_id,
            redirect_uri(base),
            ""
            if settings.public_url
            else " (or set ZARRCHIVE_PUBLIC_URL to the address browsers use)",
        )


#: How long a graceful stop waits for requests in progress before it closes them.
GRACEFUL_REQUESTS_TIMEOUT = 10


class StopRequested(Exception):
    """A stop signal arrived before the API was serving: the start is abandoned."""


class StopSignals:
    """How ``zarrchive serve`` stops: on SIGINT (Ctrl-C), SIGTERM or SIGHUP.

    - before the API serves, a signal abandons the start (:class:`StopRequested`);
    - while it serves, the first signal stops gracefully: the API (its requests in
      progress get :data:`GRACEFUL_REQUESTS_TIMEOUT` seconds), the jobs, then the embedded
      S3 (:data:`~zarrchive.storage.seaweedfs.STOP_GRACE`);
    - any further signal stops at once: the embedded S3 is killed and the process exits
      with status 0 (a second Ctrl-C under ``make serve`` leaves no error line).

    uvicorn's own handlers are not used: after its shutdown it re-raises the SIGTERM it
    caught, which ended this process before it stopped the embedded S3.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.requested = 0
        #: When the first signal arrived (``time.monotonic()``).
        self.first_at = 0.0
        self._server: uvicorn.Server | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for sig in self.SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue  # e.g. SIGHUP under nohup: the user asked to survive it
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def serving(self, server: uvicorn.Server | None) -> None:
        """The server a first signal stops (``None``: none is serving)."""
        self._server = server
        if server is not None and self.requested:
            server.should_exit = True

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        from zarrchive.storage.seaweedfs import kill_running

        self.requested += 1
        name = signal.Signals(signum).name
        if self.requested > 1:
            log.warning("%s again: stopping at once", name)
            kill_running()
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        self.first_at = time.monotonic()
        log.info("%s: stopping (Ctrl-C again to stop at once)", name)
        if self._server is None:
            raise StopRequested(name)
        self._server.should_exit = True


def _make_server(config: uvicorn.Config, began: float) -> uvicorn.Server:
    """uvicorn's server, with :class:`StopSignals` instead of its signal handlers, saying
    when it listens and how long the whole start took (since *began*)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                log.info(
                    "API listening on http://%s:%d (docs at /docs); ready in %.1f s",
                    self.config.host,
                    self.config.port,
                    time.monotonic() - began,
                )

    return Server(config)
