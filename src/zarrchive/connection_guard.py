"""The server's connection guard: what a connection passes before the API reads a request.

uvicorn holds every connection it accepts for as long as the client likes: one that never
finishes its request head is never timed out, and nothing bounds how many one client may
hold.  One anonymous client holding about 20,000 idle and half-sent connections used up the
server's file descriptors, and everyone else got connection resets.  The guard, uvicorn's
httptools protocol with three bounds (each API process on its own):

1. **a header timeout**: a connection gets :attr:`ConnectionLimits.header_timeout` seconds
   from its opening (and a kept-alive one from the first byte of its next request) to send
   a whole request head; then it gets ``408`` and is closed;
2. **a cap per client address** (an IPv6 client's: its /64) and 3. **a cap in all**: a connection over either is
   answered ``503`` with ``Retry-After`` and closed at once, before anything is read.

A request head is also bounded in size (:data:`MAX_HEAD_BYTES`, then ``431``): httptools
itself would buffer a header of any length.  The caps stay below the process's open-files
limit (:func:`raise_open_files_limit` raises it to the hard limit first), leaving
:data:`RESERVED_FILES` for the database, S3 and the jobs.

:class:`ConnectionGuard` is the pure bookkeeping; :class:`GuardedHttpToolsProtocol` applies
it (``uvicorn.Config(http=...)``; :data:`PROTOCOL` names it for ``--workers N``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import resource
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from zarrchive.config import Settings
from zarrchive.errors import ConfigurationError

log = logging.getLogger(__name__)

#: The import string of :class:`GuardedHttpToolsProtocol` (uvicorn's ``http=`` of worker
#: processes, which import it themselves).
PROTOCOL = "zarrchive.connection_guard:GuardedHttpToolsProtocol"
#: Open files kept for everything but client connections: the database's and S3's pools,
#: job threads, logs, the embedded S3's pipes.
RESERVED_FILES = 256
#: The largest request head (request line and headers) a connection may send.
MAX_HEAD_BYTES = 64 * 1024
#: What a refused connection is told to wait before trying again, seconds.
RETRY_AFTER = 5
#: At most one log line about refused or timed-out connections per this many seconds.
LOG_INTERVAL = 10.0


class Admission(Enum):
    """The guard's answer to a new connection."""

    ADMITTED = "admitted"
    #: the process holds :attr:`ConnectionLimits.max_connections` already
    SERVER_FULL = "server full"
    #: the client's address holds :attr:`ConnectionLimits.max_per_client` already
    CLIENT_FULL = "client full"


@dataclass(frozen=True)
class ConnectionLimits:
    """The bounds of one API process."""

    header_timeout: float
    max_connections: int
    max_per_client: int

    @classmethod
    def for_process(cls, settings: Settings, open_files: int) -> ConnectionLimits:
        """*settings*' bounds, the caps kept below *open_files* (the process's limit) less
        :data:`RESERVED_FILES`; the per-client cap at most the total."""
        room = open_files - RESERVED_FILES
        if room < 1:
            raise ConfigurationError(
                f"the open-files limit ({open_files}) leaves no room for connections: raise "
                f"it (ulimit -n) above {RESERVED_FILES}"
            )
        total = min(settings.max_connections, room)
        return cls(
            header_timeout=settings.header_timeout,
            max_connections=total,
            max_per_client=min(settings.max_connections_per_client, total),
        )


@dataclass
class ConnectionGuard:
    """Counts the open connections of one process, in all and by client address, and
    decides whether a new one may stay (no I/O)."""

    limits: ConnectionLimits
    total: int = 0
    _by_client: dict[str, int] = field(default_factory=dict)

    def admit(self, client: str) -> Admission:
        """Count a new connection from *client* if both caps allow it."""
        if self.total >= self.limits.max_connections:
            return Admission.SERVER_FULL
        held = self._by_client.get(client, 0)
        if held >= self.limits.max_per_client:
            return Admission.CLIENT_FULL
        self._by_client[client] = held + 1
        self.total += 1
        return Admission.ADMITTED

    def release(self, client: str) -> None:
        """An admitted connection from *client* has closed."""
        held = self._by_client[client]
        if held == 1:
            del self._by_client[client]
        else:
            self._by_client[client] = held - 1
        self.total -= 1

    def held_by(self, client: str) -> int:
        return self._by_client.get(client, 0)

    @property
    def clients(self) -> int:
        """How many addresses hold a connection."""
        return len(self._by_client)


def client_of(address: str) -> str:
    """The client a peer *address* counts as: an IPv4 address itself, an IPv6 address its
    /64 network (one host usually holds a whole /64, and may use any address of it)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address  # not an IP address (a Unix socket's peer)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def raise_open_files_limit() -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit (children inherit it);
    return the soft limit in effect."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:
            log.warning("could not raise the open-files limit to %d: %s", hard, error)
    return soft


def open_files_limit() -> int:
    """This process's soft ``RLIMIT_NOFILE``."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


_guard: ConnectionGuard | None = None


def install_connection_guard(limits: ConnectionLimits) -> ConnectionGuard:
    """Make *limits* this process's bounds (one server per process); the guard."""
    global _guard
    _guard = ConnectionGuard(limits)
    return _guard


def connection_guard() -> ConnectionGuard:
    """This process's guard (from ``ZARRCHIVE_*`` if none was installed)."""
    if _guard is None:
        return install_connection_guard(
            ConnectionLimits.for_process(Settings.from_env(), open_files_limit())
        )
    return _guard


def _response(status: bytes, message: str, *extra: bytes) -> bytes:
    body = message.encode()
    lines = [
        b"HTTP/1.1 " + status,
        b"content-type: text/plain; charset=utf-8",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


_REFUSALS = {
    Admission.SERVER_FULL: _response(
        b"503 Service Unavailable",
        "the server holds as many connections as it may: try again shortly",
        b"retry-after: %d" % RETRY_AFTER,
    ),
    Admission.CLIENT_FULL: _response(
        b"503 Service Unavailable",
        "too many connections from your address at once: reuse the ones you have",
        b"retry-after: %d" % RETRY_AFTER,
    ),
}
_HEAD_TIMEOUT = _response(b"408 Request Timeout", "the request head did not arrive in time")
_HEAD_TOO_LARGE = _response(
    b"431 Request Header Fields Too Large",
    f"the request line and headers may take {MAX_HEAD_BYTES} bytes at most",
)


class _EventLog:
    """Counts refused and timed-out connections; logs them at most every
    :data:`LOG_INTERVAL` seconds (a flood of them must not flood the log)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._logged_at = -LOG_INTERVAL

    def note(self, event: str, client: str) -> None:
        self._counts[event] = self._counts.get(event, 0) + 1
        now = time.monotonic()
        if now - self._logged_at < LOG_INTERVAL:
            return
        self._logged_at = now
        summary = ", ".join(f"{count} {name}" for name, count in sorted(self._counts.items()))
        self._counts.clear()
        log.warning("connections closed by the guard: %s (the latest from %s)", summary, client)


_events = _EventLog()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under this process's :class:`ConnectionGuard`."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guard = connection_guard()
        #: The admitted client's address; None: refused (or not yet made).
        self._admitted: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        #: Bytes received of the request head in progress; None between heads.
        self._head_bytes: int | None = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        client = client_of(str(peer[0])) if isinstance(peer, tuple) and peer else "local"
        admission = self._guard.admit(client)
        if admission is not Admission.ADMITTED:
            _events.note(admission.value, client)
            transport.write(_REFUSALS[admission])
            transport.close()
            return
        self._admitted = client
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted is None:
            return  # refused: uvicorn never knew it
        self._guard.release(self._admitted)
        self._admitted = None
        self._cancel_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_bytes is not None:
            self._head_bytes += len(data)
        super().data_received(data)
        # still inside a head after parsing: every byte counted so far belongs to it
        if (
            self._head_bytes is not None
            and self._head_bytes > MAX_HEAD_BYTES
            and not self.transport.is_closing()
        ):
            self._close_head(_HEAD_TOO_LARGE, "request heads too large")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_bytes is None:
            self._head_bytes = 0
        if self._head_timer is None:
            self._arm_head_timer()

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._head_bytes = None
        super().on_headers_complete()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(
            self._guard.limits.header_timeout, self._head_timed_out
        )

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm_head_timer()  # a pipelined head waits for the response before it
            return
        self._close_head(_HEAD_TIMEOUT, "request heads timed out")

    def _close_head(self, response: bytes, event: str) -> None:
        _events.note(event, self._admitted or "?")
        self._cancel_head_timer()
        self.transport.write(response)
        self.transport.close()
