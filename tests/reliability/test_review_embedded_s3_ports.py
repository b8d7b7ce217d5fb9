"""The embedded S3 starts although another process takes one of its ports (issue #35).

:class:`SeaweedFS` chooses each internal port (master, volume, filer, admin and their gRPC
twins) free, then hands it to ``weed mini``; on a busy machine another process may take one
in between, and ``weed`` exits ("Port allocation failed: port N for Filer ...").  Before the
fix that ended the start (``zarrchive serve`` exited with code 2).  Here the port choice is
injected so that the filer gets a port another process holds: the start must try again with
fresh ports and serve; when every attempt collides, it must stop after
:data:`START_ATTEMPTS` with the port named.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from zarrchive.storage import seaweedfs
from zarrchive.storage.seaweedfs import PortTaken, SeaweedFS, free_port

#: The internal parts in the order a start chooses their ports.
PARTS = ("master", "volume", "filer", "admin")

HOLDER = """
import socket, sys
held = socket.socket()
held.bind(("127.0.0.1", 0))
held.listen()
print(held.getsockname()[1], flush=True)
sys.stdin.read()  # until the test closes it
"""


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 another process listens on (no gRPC twin needed: the HTTP port
    alone is refused by ``weed``)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        yield int(holder.stdout.readline())
    finally:
        holder.stdin.close()
        holder.wait(30)


class CollidingPicker:
    """The port choice of a start, except that the filer gets *held* in the first
    *collisions* attempts (each attempt asks for the S3-less parts in :data:`PARTS` order)."""

    def __init__(self, held: int, collisions: int) -> None:
        self.held = held
        self.collisions = collisions
        self.calls = 0
        self.given: list[int] = []

    def __call__(self, exclude: Sequence[int] = ()) -> int:
        attempt, part = divmod(self.calls, len(PARTS))
        self.calls += 1
        if PARTS[part] == "filer" and attempt < self.collisions:
            port = self.held
        else:
            port = free_port([*exclude, self.held])
        self.given.append(port)
        return port


def test_start_retries_with_fresh_ports_when_one_is_taken(tmp_path: Path, held_port: int) -> None:
    picker = CollidingPicker(held_port, collisions=1)
    server = SeaweedFS(
        tmp_path / "s3",
        "key",
        "secret-of-the-test",
        s3_port=free_port([held_port]),  # given, as zarrchive serve gives it
        pick_port=picker,
    )
    try:
        server.start()
        # it serves S3, on ports that avoid the held one
        assert server.client().list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
        assert held_port not in server.ports.values()
        assert picker.calls == 2 * len(PARTS), "one attempt refused, the second started"
        log = (tmp_path / "s3" / "weed.log").read_text(errors="replace")
        assert f"port {held_port}" in log, "the first attempt did not collide as intended"
    finally:
        server.stop()


def test_start_gives_up_after_its_attempts(
    tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seaweedfs, "START_ATTEMPTS", 2)
    picker = CollidingPicker(held_port, collisions=2)
    server = SeaweedFS(
        tmp_path / "s3",
        "key",
        "secret-of-the-test",
        s3_port=free_port([held_port]),  # given, as zarrchive serve gives it
        pick_port=picker,
    )
    with pytest.raises(PortTaken) as failed:
        server.start()
    assert failed.value.port == held_port
    assert "Port allocation failed" in str(failed.value)
    assert picker.calls == 2 * len(PARTS)
    assert server.process is None  # nothing left running
