"""A forward HTTP proxy (what ``HTTP_PROXY`` points the client at) that counts what an upload
sends to S3 and can stop it between two parts of a big file.

Every request is forwarded.  The S3 multipart parts PUT through it and answered 200 are
recorded (:attr:`PartGate.parts`: key, upload id, part number, bytes), as are the bytes of
every presigned PUT answered 200 (:attr:`PartGate.put_bytes`: files and parts).  With
*let_through*, the part PUTs after the first *let_through* are held (not forwarded, not
answered) until :meth:`PartGate.release`: a test waits for one to be held
(:meth:`PartGate.wait_held`), interrupts the client, then releases them (forwarded as they
are).  With *drop* instead, those part PUTs are not forwarded and
their connections closed without an answer (the network failing between client and S3).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.helpers.http_proxy import ProxiedRequest, proxy_server


@dataclass(frozen=True)
class SentPart:
    """A part PUT through the gate that S3 answered 200."""

    #: the object's key (the URL's path after the bucket)
    key: str
    #: the S3 multipart upload's id
    upload_id: str
    number: int
    size: int


def _part_number(request: ProxiedRequest) -> int:
    """The ``partNumber`` of an S3 multipart part request; 0 for any other."""
    query = parse_qs(urlsplit(request.path).query)
    return int(query["partNumber"][0]) if "partNumber" in query else 0


class PartGate:
    """Started with :func:`part_gate`."""

    def __init__(self, let_through: int | None, drop: bool = False) -> None:
        self.url = ""
        self.let_through = let_through
        self.drop = drop
        #: part PUTs dropped (closed unanswered)
        self.dropped = 0
        self.parts: list[SentPart] = []
        self.put_bytes = 0
        #: part PUTs held now
        self.held = 0
        self._admitted = 0
        self._released = let_through is None
        self._cond = threading.Condition()

    def admit(self) -> bool:
        """Called for each part PUT before it is forwarded: hold it if the gate says so;
        False if it is to be dropped."""
        with self._cond:
            if self._released or self._admitted < (self.let_through or 0):
                self._admitted += 1
                return True
            if self.drop:
                self.dropped += 1
                return False
            self.held += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._released, timeout=300)
            self.held -= 1
            return True

    def wait_held(self, ended: Callable[[], str | None], timeout: float = 120) -> None:
        """Wait until a part PUT is held (the client is stopped between parts); fail if
        *ended* says (with what it returns) that the client ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.held == 0:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"waited {timeout:.0f} s for a part PUT past the first "
                        f"{self.let_through} (parts answered so far: {len(self.parts)})"
                    )
                why = ended()
                if why is not None:
                    raise AssertionError(f"the client ended before a part was held: {why}")
                self._cond.wait(timeout=0.1)

    def release(self) -> None:
        """Forward the held part PUTs, and every later one."""
        with self._cond:
            self._released = True
            self._cond.notify_all()

    def on_request(self, request: ProxiedRequest) -> bool:
        """The proxy's hook before forwarding: a part PUT goes through :meth:`admit`."""
        number = _part_number(request)
        return not (number and request.method == "PUT") or self.admit()

    def on_answer(self, request: ProxiedRequest, status: int) -> None:
        """The proxy's hook once answered: record a presigned PUT answered 200."""
        target = urlsplit(request.path)
        query = parse_qs(target.query)
        to_s3 = request.method == "PUT" and "X-Amz-Signature" in query  # a presigned PUT
        if status != 200 or not to_s3:
            return
        key = unquote(target.path).lstrip("/").partition("/")[2]
        upload_id = query.get("uploadId", [""])[0]
        part = SentPart(key, upload_id, _part_number(request), len(request.body))
        with self._cond:
            self.put_bytes += part.size
            if part.number:
                self.parts.append(part)

    def part_numbers(self, key: str | None = None) -> list[int]:
        """The numbers of the parts answered 200 (of *key*, if given), in the order sent."""
        with self._cond:
            return [p.number for p in self.parts if key is None or p.key == key]

    def part_bytes(self) -> int:
        with self._cond:
            return sum(p.size for p in self.parts)


@contextlib.contextmanager
def part_gate(let_through: int | None = None, *, drop: bool = False) -> Iterator[PartGate]:
    gate = PartGate(let_through, drop)
    with proxy_server(on_request=gate.on_request, on_answer=gate.on_answer, timeout=300) as url:
        gate.url = url
        try:
            yield gate
        finally:
            gate.release()


def wait_for(condition: Any, what: str, timeout: float = 120) -> None:
    """Poll *condition* until it is true; after *timeout* seconds fail saying *what*."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.02)
