"""The client's one HTTP layer: how every request it makes is retried, and who it says it is.

- :class:`RetryPolicy`: how many attempts in all, exponential backoff with jitter between
  them, capped (also the longest ``Retry-After`` honoured);
- what is worth another attempt, in one place: :data:`RETRY_STATUSES` (rate limits and
  server-side failures) and :data:`RETRY_EXCEPTIONS` (connection errors, timeouts);
- ``Retry-After`` (delta-seconds or an HTTP date) honoured on every retried answer:
  :func:`parse_retry_after`;
- the user agent ``zarrchive/<version>``: :data:`USER_AGENT`, set by :func:`http_client`;
- a retry hook (:data:`RetryHook`), called with a :class:`RetryEvent` before each wait
  (progress displays, logs); every retry is also logged at DEBUG on ``zarrchive.client``;
- a caller's say on when a retryable failure is final all the same (:data:`GiveUp`: the API
  client gives up quickly on a server it has never reached, a wrong URL rather than a blip).

:func:`run` is the one retry loop of the client: it calls an attempt until it returns,
retrying :class:`TryAgain` and :data:`RETRY_EXCEPTIONS` while the policy allows.
:func:`call` and :func:`send` make one HTTP request the attempt (a retryable status is
retried; once the attempts run out the last response is returned, so that each caller
words its own error).  Work made of a request and more (a download streamed to a file and
checked by md5) runs whole under :func:`run`: one loop, never a loop within a loop.

Large bodies (big files' ranged GETs) can be read through :class:`BodyReader` instead: the
same user agent, timeouts and TLS verification over urllib3, whose streamed reads cost about
a third of httpx's (``bench/RESULTS.md``, "Downloads at the floor, second round"); its failures
are raised as :data:`RETRY_EXCEPTIONS` and its answers retried by the same :func:`run`.

Used by the API client (:mod:`~zarrchive.client.api`), the uploads' PUTs to S3
(:mod:`~zarrchive.client.upload`), downloads (:mod:`~zarrchive.client.download`), the
zarr-python store (:mod:`~zarrchive.client.store`), snapshot manifests
(:mod:`~zarrchive.client.snapshot`) and the LINDI range reads (:mod:`zarrchive.lindi.store`).
"""

from __future__ import annotations

import datetime
import email.utils
import http.client
import logging
import random
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
import urllib3

from zarrchive.errors import InvalidInput
from zarrchive.version import package_version

#: Statuses worth another attempt: rate limits and server-side failures.
RETRY_STATUSES: frozenset[int] = frozenset({429, 500, 502, 503, 504})
#: Exceptions worth another attempt: the request did not get an answer (connection
#: refused or reset, timeouts, a broken stream).
RETRY_EXCEPTIONS: tuple[type[Exception], ...] = (httpx.TransportError,)
#: Sent with every request.
USER_AGENT = f"zarrchive/{package_version()}"
#: The blocks in which :class:`BodyReader` reads a body.
BLOCK = 1 << 20

log = logging.getLogger("zarrchive.client")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: ``attempts`` tries in all, backoff between them."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    #: The longest ``Retry-After`` honoured (longer values are capped).
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise InvalidInput(f"a retry policy needs at least 1 attempt, got {self.attempts}")
        if min(self.base_delay, self.max_delay, self.max_retry_after) < 0:
            raise InvalidInput("a retry policy's delays cannot be negative")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number *attempt* (1-based): the server's
        ``Retry-After`` when it gave one (capped), else exponential backoff with jitter
        (between half the ceiling and the ceiling, ``base_delay * 2**(attempt-1)``
        capped at ``max_delay``)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        return random.uniform(ceiling / 2, ceiling)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date; a date in the
    past is 0), or None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" (no zone information): taken as UTC
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def is_retryable_status(status: int) -> bool:
    return status in RETRY_STATUSES


def is_retryable_error(exc: BaseException) -> bool:
    return isinstance(exc, (TryAgain, *RETRY_EXCEPTIONS))


class TryAgain(Exception):
    """An attempt failed in a way worth another: a retryable status, a broken transfer.

    Raised by an attempt under :func:`run`; when the attempts run out it reaches the
    caller, who turns it into its own error (:attr:`reason` says what happened last).
    """

    def __init__(
        self,
        reason: str,
        *,
        retry_after: float | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.response = response


@dataclass(frozen=True)
class RetryEvent:
    """One retry, as the hook sees it: attempt *attempt* of *attempts* failed."""

    what: str
    attempt: int
    attempts: int
    #: Seconds before the next attempt.
    wait: float
    reason: str
    #: The HTTP status that failed, None for an exception.
    status: int | None = None

    def __str__(self) -> str:
        return (
            f"{self.what}: {self.reason}; retrying in {self.wait:.1f} s "
            f"(attempt {self.attempt + 1} of {self.attempts})"
        )


#: Called before each wait between two attempts.
RetryHook = Callable[[RetryEvent], None]
#: Says whether a retryable exception is final all the same, given the number of attempts
#: made (e.g. a refused connection to a server never reached: a wrong URL, not a blip).
GiveUp = Callable[[Exception, int], bool]


def run(
    policy: RetryPolicy,
    attempt: Callable[[], T],
    *,
    what: str,
    on_retry: RetryHook | None = None,
    retry_on: tuple[type[Exception], ...] = (),
    give_up: GiveUp | None = None,
) -> T:
    """The result of *attempt*, called up to ``policy.attempts`` times.

    :class:`TryAgain`, :data:`RETRY_EXCEPTIONS` and *retry_on* are retried after the
    policy's delay (``TryAgain.retry_after`` when the server said); the last one is
    raised when the attempts run out, or earlier when *give_up* says it is final.
    Anything else is raised at once.
    """
    retryable: tuple[type[Exception], ...] = (TryAgain, *RETRY_EXCEPTIONS, *retry_on)
    number = 0
    while True:
        number += 1
        try:
            return attempt()
        except retryable as exc:
            if number >= policy.attempts or (give_up is not None and give_up(exc, number)):
                raise
            if isinstance(exc, TryAgain):
                reason = exc.reason
                status = None if exc.response is None else exc.response.status_code
                wait = policy.delay(number, exc.retry_after)
            else:
                reason, status = transport_message(exc), None
                wait = policy.delay(number)
            event = RetryEvent(what, number, policy.attempts, wait, reason, status)
            log.debug("%s", event)
            if on_retry is not None:
                on_retry(event)
            time.sleep(wait)


def check(response: httpx.Response) -> httpx.Response:
    """*response*, unless its status is worth another attempt: then :class:`TryAgain` (with
    the server's ``Retry-After``), the response read and closed."""
    if response.status_code not in RETRY_STATUSES:
        return response
    try:
        response.read()  # a streamed answer: free the connection for the next attempt
    except httpx.HTTPError:
        pass
    finally:
        response.close()
    raise TryAgain(
        f"{response.status_code} {response.reason_phrase}".strip(),
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
        response=response,
    )


def call(
    policy: RetryPolicy,
    request: Callable[[], httpx.Response],
    *,
    what: str,
    on_retry: RetryHook | None = None,
    give_up: GiveUp | None = None,
) -> httpx.Response:
    """The response of *request* (one HTTP request; called again for each attempt, so it
    can rebuild a streamed body), retried on :data:`RETRY_STATUSES` and
    :data:`RETRY_EXCEPTIONS`.  When the attempts run out: the last response (a retryable
    status), or the last exception."""
    try:
        return run(policy, lambda: check(request()), what=what, on_retry=on_retry, give_up=give_up)
    except TryAgain as exc:
        assert exc.response is not None
        return exc.response


def send(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    policy: RetryPolicy,
    on_retry: RetryHook | None = None,
    give_up: GiveUp | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """``client.request(method, url, **kwargs)`` under :func:`call`."""
    what = f"{method} {url.partition('?')[0]}"  # never a presigned URL's signature in logs
    return call(
        policy,
        lambda: client.request(method, url, **kwargs),
        what=what,
        on_retry=on_retry,
        give_up=give_up,
    )


def http_client(
    *,
    timeout: httpx.Timeout | float,
    max_connections: int = 32,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Client:
    """A pooled :class:`httpx.Client` that sends :data:`USER_AGENT` (and *headers*)."""
    return httpx.Client(
        timeout=timeout,
        headers={"User-Agent": USER_AGENT, **(headers or {})},
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        **kwargs,
    )


@dataclass(frozen=True)
class BodyAnswer:
    """What :meth:`BodyReader.get` heard: the status line and the headers (the body went to
    the caller's *write* when the status was the one expected)."""

    status: int
    reason: str
    headers: Mapping[str, str]

    def as_response(self) -> httpx.Response:
        """The answer as a (bodiless) :class:`httpx.Response`, for :class:`TryAgain` and the
        callers that read one."""
        return httpx.Response(self.status, headers=dict(self.headers))


class BodyReader:
    """Streamed GETs of large bodies through urllib3 (pooled, one attempt per call): what the
    client's other requests say and check (:data:`USER_AGENT` and *headers*, *timeout*, TLS
    verified as httpx does, with ``SSL_CERT_FILE``/``SSL_CERT_DIR``), at a third of the CPU
    and latency of httpx's streams.  No redirect is followed and no proxy used: a caller
    sends such requests through httpx (:meth:`direct` is False, a 3xx answer).

    Failures to get an answer (refused or reset connections, timeouts, a body cut short) are
    raised as :data:`RETRY_EXCEPTIONS` (httpx's), so :func:`run` retries them as any other.
    """

    def __init__(
        self,
        *,
        timeout: httpx.Timeout | float,
        max_connections: int = 32,
        headers: dict[str, str] | None = None,
    ) -> None:
        if isinstance(timeout, httpx.Timeout):
            connect, read = timeout.connect, timeout.read
        else:
            connect = read = timeout
        self.headers = {"User-Agent": USER_AGENT, **(headers or {})}
        self.pools = urllib3.PoolManager(
            num_pools=4,
            maxsize=max_connections,
            timeout=urllib3.Timeout(connect=connect, read=read),
            retries=False,
            ssl_context=httpx.create_ssl_context(),
        )
        # (read once, as httpx reads them when its client is made)
        self._proxies = urllib.request.getproxies()
        self._direct: dict[tuple[str, str], bool] = {}
        #: Each thread's buffer for :meth:`get`.
        self._local = threading.local()

    def direct(self, url: str) -> bool:
        """Whether this reader may GET *url*: the environment sends no request to it through
        a proxy (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, unless ``NO_PROXY`` names
        the host), which httpx would use."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.hostname or "")
        known = self._direct.get(key)
        if known is None:
            proxy = self._proxies.get(key[0]) or self._proxies.get("all")
            known = not proxy or bool(urllib.request.proxy_bypass(key[1]))
            self._direct[key] = known
        return known

    def get(
        self,
        url: str,
        write: Callable[[memoryview], None],
        *,
        expected: int,
        headers: dict[str, str] | None = None,
    ) -> BodyAnswer:
        """GET *url*: when the status is *expected*, its raw body (no content decoding, as
        httpx's ``iter_raw``) to *write* in order, each block a view of this thread's buffer
        (:data:`BLOCK` bytes, reused) valid only during the call: the body is read from the
        socket straight into it (``readinto``), so a large body costs no allocation per
        block and each byte is copied once on its way to the caller's ``os.pwrite``.  A
        body shorter than its ``Content-Length`` is a transport error.  Any other answer's
        body is read (up to 1 MiB, else the connection is closed) and dropped.  An
        exception of *write* ends the request (the connection is closed)."""
        view = self._buffer()

        def body(response: urllib3.BaseHTTPResponse) -> None:
            raw = getattr(response, "_fp", None)  # urllib3's http.client response
            readinto = getattr(raw, "readinto", None)
            if readinto is None:  # (not an http.client response: a block at a time)
                while True:
                    try:
                        data = response.read(BLOCK, decode_content=False)
                    except (urllib3.exceptions.HTTPError, OSError) as exc:
                        raise _transport_error(exc) from None
                    if not data:
                        return
                    write(memoryview(data))
            length = response.headers.get("Content-Length")
            left = int(length) if length is not None and length.isdigit() else None
            while True:
                try:
                    count = readinto(view if left is None else view[: min(len(view), left)])
                except (http.client.HTTPException, OSError) as exc:
                    raise _transport_error(exc) from None
                if not count:
                    break
                write(view[:count])
                if left is not None:
                    left -= count
                    if not left:
                        break
            if left:  # (http.client's readinto answers 0 at an early end: no error of its own)
                raise httpx.ReadError(f"the connection closed with {left} bytes of the body unread")

        return self._get(url, body, expected=expected, headers=headers)

    def _buffer(self) -> memoryview:
        view: memoryview | None = getattr(self._local, "buffer", None)
        if view is None:
            view = self._local.buffer = memoryview(bytearray(BLOCK))
        return view

    def _get(
        self,
        url: str,
        body: Callable[[urllib3.BaseHTTPResponse], None],
        *,
        expected: int,
        headers: dict[str, str] | None,
    ) -> BodyAnswer:
        """GET *url*: *body* reads the answer when its status is *expected*."""
        try:
            response = self.pools.request(
                "GET",
                url,
                headers={**self.headers, **(headers or {})},
                preload_content=False,
                decode_content=False,
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _transport_error(exc) from None
        answer = BodyAnswer(response.status, response.reason or "", response.headers)
        complete = False
        try:
            if answer.status == expected:
                body(response)
                complete = True
            else:
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) <= 1 << 20:
                    try:
                        response.read(decode_content=False)
                        complete = True
                    except (urllib3.exceptions.HTTPError, OSError):
                        pass
        finally:
            if not complete:
                response.close()  # never a half-read body on a pooled connection
            response.release_conn()
        return answer

    def close(self) -> None:
        self.pools.clear()


def _transport_error(exc: BaseException) -> httpx.TransportError:
    """urllib3's (or the socket's) failure as the httpx error the retry loop knows."""
    message = transport_message(exc)
    if isinstance(exc, (urllib3.exceptions.NewConnectionError, ConnectionRefusedError)):
        return httpx.ConnectError(message)  # (a subclass of ConnectTimeoutError in urllib3)
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        return httpx.ReadTimeout(message)
    return httpx.ReadError(message)


def transport_message(exc: BaseException) -> str:
    """One line about a failed request (httpx's messages may span several)."""
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


__all__ = [
    "RETRY_EXCEPTIONS",
    "RETRY_STATUSES",
    "USER_AGENT",
    "BodyAnswer",
    "BodyReader",
    "GiveUp",
    "RetryEvent",
    "RetryHook",
    "RetryPolicy",
    "TryAgain",
    "call",
    "check",
    "http_client",
    "is_retryable_error",
    "is_retryable_status",
    "parse_retry_after",
    "run",
    "send",
    "transport_message",
]
