"""Slow clients must not exhaust the server (issue #35, item 5).

Another process, one client address (``127.0.0.9``), opens 5,000 connections to a
``zarrchive serve`` child and holds them: half send half a request head, half nothing.  The
child's open-files limit is 4,096 (a common machine's), so before the fix the connections
used up its file descriptors and everyone else's connections were reset or left waiting
until the client let go.  Now, while they are held:

- ``GET /server-info`` from another address answers (each within a generous deadline;
  its latencies are reported beside the same run's idle baseline);
- the server holds at most the per-client cap of them (its sockets, counted in ``/proc``);
- the server ends every one of them itself: those it admitted with ``408`` after the
  header timeout, those over the cap at once (``503``, or a reset when the client's half
  head arrived as it closed).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_settings
from tests.helpers.server_process import ServerProcess
from tests.helpers.slow_connections import read_held, slow_connections
from zarrchive.services.runtime import Archive
from zarrchive.storage.seaweedfs import SeaweedFS

CONNECTIONS = 5_000
#: The hostile client's address: another loopback address than the test's own.
SOURCE = "127.0.0.9"
OPEN_FILES = 4_096
PER_CLIENT = 200
HEADER_TIMEOUT = 6.0
#: The longest the client holds its connections (the server should end them all well before).
HOLD_SECONDS = 90.0
#: How long one ``/server-info`` may take while they are held: generous (a loaded machine);
#: before the fix it never answered.
PROBE_DEADLINE = 20.0
PROBES = 3
#: Sockets the server may hold beyond the cap: the probes', the database's and S3's, and a
#: refused connection between its accept and its close.
SLACK = 64


class LimitedServer(ServerProcess):
    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["ZARRCHIVE_HEADER_TIMEOUT"] = str(HEADER_TIMEOUT)
        env["ZARRCHIVE_MAX_CONNECTIONS_PER_CLIENT"] = str(PER_CLIENT)
        return env


@pytest.fixture
def server(
    seaweedfs: SeaweedFS, bucket: str, embargo_bucket: str, tmp_path: Path
) -> Iterator[LimitedServer]:
    settings = make_settings(seaweedfs, bucket, f"sqlite:///{tmp_path / 'z.sqlite3'}", tmp_path)
    Archive.from_settings(settings).close()  # migrates
    server = LimitedServer(settings, tmp_path / "server.log", open_files_limit=OPEN_FILES)
    server.start(timeout=300)  # the machine may be loaded: starting is not what is measured
    try:
        yield server
    finally:
        server.stop()


def sockets_of(pid: int) -> int:
    """How many sockets process *pid* holds open."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed meanwhile
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count


class SocketWatch(threading.Thread):
    """The most sockets a process held at once, sampled until stopped."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.most = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            self.most = max(self.most, sockets_of(self.pid))

    def stop(self) -> int:
        self.done.set()
        self.join(30)
        return self.most


def probe(url: str) -> float:
    """One ``GET /server-info`` on a new connection; its seconds."""
    start = time.monotonic()
    answer = httpx.get(f"{url}/server-info", timeout=PROBE_DEADLINE)
    assert answer.status_code == 200, answer.text
    return time.monotonic() - start


def test_slow_connections_do_not_exhaust_the_server(server: LimitedServer) -> None:
    assert server.process is not None
    idle = [probe(server.url) for _ in range(PROBES)]
    idle_sockets = sockets_of(server.process.pid)
    watch = SocketWatch(server.process.pid)
    watch.start()
    holder = slow_connections("127.0.0.1", server.port, CONNECTIONS, HOLD_SECONDS, SOURCE)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "ready"
        busy = []
        for _ in range(PROBES):
            try:
                busy.append(probe(server.url))
            except httpx.HTTPError as error:
                raise AssertionError(
                    f"/server-info did not answer within {PROBE_DEADLINE} s while one client "
                    f"held {CONNECTIONS} slow connections: {error!r}"
                ) from error
        output = holder.communicate(timeout=HOLD_SECONDS + 120)[0]
    finally:
        holder.kill()
        holder.wait()
        most = watch.stop()
    held = read_held(output)
    timings = (
        f"/server-info took {max(busy) * 1000:.0f} ms at most while held, {max(idle) * 1000:.0f} "
        f"ms idle; {held}"
    )
    print(timings)
    assert held.connected > 2 * PER_CLIENT, timings
    # the server holds no more of them than the cap
    assert most <= idle_sockets + PER_CLIENT + SLACK, (
        f"the server held {most} sockets ({idle_sockets} idle, cap {PER_CLIENT}); {timings}"
    )
    # and ends each one itself: the admitted after the header timeout, the others at once
    assert held.still_open == 0, timings
    assert held.timed_out >= 1, timings
    assert held.refused + held.reset >= 1, timings
    assert held.other == 0 and held.closed == 0, timings
