"""The request guard: authentication before the body is read, bounded bodies, no NULs."""

from __future__ import annotations

import socket
import threading
import time
import urllib.parse

import httpx
import pytest
from sqlalchemy import text

from tests.conftest import LiveServer, Users
from tests.helpers.waiting import EVENT_TIMEOUT
from tests.helpers.zarr_client import md5
from zarrchive.services.runtime import Archive


def raw_request(
    server: LiveServer, head: str, body: bytes = b"", *, timeout: float = 60
) -> tuple[int, bytes, float]:
    """Send *head* (request line and headers) and *body* on a plain socket, without waiting
    to send anything more; returns the status, the response and the seconds it took.  A
    server that waits for the rest of the body never answers: the socket times out after
    *timeout* seconds (generous: the machine may be loaded, issue #41)."""
    host, port = urllib.parse.urlsplit(server.url).netloc.split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = sock.recv(65536)
            if not chunk:
                break
            response += chunk
    status = int(response.split(b" ", 2)[1])
    return status, response, time.monotonic() - started


def test_anonymous_huge_body_refused_unread(live_server: LiveServer, anon: httpx.Client) -> None:
    """50 MB announced, 10 bytes sent: the answer comes at once, the body never read."""
    head = (
        "POST /api/zarr/ HTTP/1.1\nHost: x\nContent-Type: application/json\n"
        "Content-Length: 52428800\n"
    )
    status, response, _ = raw_request(live_server, head, b'{"name": "')
    assert status == 413, response  # answered without the body (else the socket timed out)
    assert b"anonymous request" in response


def test_bad_token_refused_before_the_body(live_server: LiveServer, anon: httpx.Client) -> None:
    head = (
        "POST /api/zarr/00000000-0000-0000-0000-000000000000/upload/ HTTP/1.1\nHost: x\n"
        "Authorization: token not-a-token\nContent-Type: application/json\n"
        "Content-Length: 5000000\n"
    )
    status, response, _ = raw_request(live_server, head, b"[")
    assert status == 401, response  # answered without the body (else the socket timed out)


def test_streamed_anonymous_body_is_counted(live_server: LiveServer, anon: httpx.Client) -> None:
    """No Content-Length (chunked): the guard counts what arrives and stops at the cap."""
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(20))  # 1.25 MiB
    head = "POST /api/zarr/ HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n"
    status, response, _ = raw_request(live_server, head, body)
    assert status == 413, response


def test_owner_may_send_a_full_batch(api: httpx.Client, zarr_id: str) -> None:
    long = "/".join(["c" * 200] * 3)
    files = [{"path": f"arr/{i}/{long}", "etag": md5(str(i).encode())} for i in range(500)]
    response = api.post(f"/api/zarr/{zarr_id}/upload/", json=files)
    assert response.status_code == 200, response.text  # about 330 KB: well within the cap


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("GET", "/api/zarr/?name=a%00b", None),
        ("GET", "/api/dandisets/%00/", None),
        ("POST", "/api/dandisets/", {"name": "a\u0000b"}),
        ("POST", "/api/zarr/", {"name": "x\x00", "dandiset": "000001"}),
    ],
)
def test_nul_characters_refused(
    api: httpx.Client, dandiset: str, method: str, url: str, body: object
) -> None:
    response = api.request(method, url, json=body)
    assert response.status_code == 400, response.text
    assert "NUL characters are not allowed" in response.json()["detail"]


def test_other_users_token_works_and_is_checked_once(
    live_server: LiveServer, users: Users, anon: httpx.Client
) -> None:
    response = anon.post(
        "/api/dandisets/",
        json={"name": "theirs"},
        headers={"Authorization": f"token {users.other}"},
    )
    assert response.status_code == 200, response.text
    response = anon.get("/api/dandisets/000001/", headers={"Authorization": "Bearer x"})
    assert response.status_code == 401


def test_writes_wait_for_a_running_sqlite_write(
    api: httpx.Client, dandiset: str, archive: Archive, database_url: str
) -> None:
    """Creating a Zarr or a blob upload while another write holds SQLite's write lock (and
    commits) waits for it instead of answering 500 "database is locked"."""
    if not database_url.startswith("sqlite"):
        pytest.skip("SQLite's locking")
    release = threading.Event()
    holding = threading.Event()

    def long_write() -> None:
        with archive.db.write_session() as session:
            session.execute(text("UPDATE dandisets SET name = name || '!'"))
            holding.set()
            release.wait(EVENT_TIMEOUT)

    writer = threading.Thread(target=long_write)
    writer.start()
    assert holding.wait(EVENT_TIMEOUT), "the long write did not start"
    threading.Timer(0.5, release.set).start()
    results = []
    for n in range(3):
        results.append(api.post("/api/zarr/", json={"name": f"z{n}", "dandiset": dandiset}))
    data = b"blob"
    results.append(
        api.post(
            "/api/uploads/initialize/",
            json={"size": len(data), "md5": md5(data), "dandiset": dandiset},
        )
    )
    writer.join()
    assert [r.status_code for r in results] == [200] * 4, [r.text for r in results]
