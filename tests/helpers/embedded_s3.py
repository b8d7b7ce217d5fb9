"""Probes of the embedded SeaweedFS's internal ports, as another local user would try them.

- :func:`weed_ports`: the ports a ``weed mini`` child listens on, from its command line;
- :func:`grpc_answers_plaintext` / :func:`grpc_tls_handshake`: whether a gRPC port talks
  HTTP/2 to a client without TLS, and whether it completes a TLS handshake with or
  without a client certificate;
- :func:`weed_shell`: ``weed shell`` run in a directory (its ``security.toml`` decides
  whether it can talk to the servers), the trusted client of these tests;
- :func:`process_children` / :func:`pid_alive`: the process tree, for "no weed left".
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
from pathlib import Path

from zarrchive.storage.seaweedfs import find_weed

GRPC_OFFSET = 10000
#: The HTTP/2 client connection preface and an empty SETTINGS frame.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def weed_ports(args: list[str]) -> dict[str, int]:
    """``{"s3": ..., "master": ..., "volume": ..., "filer": ..., "admin": ...}`` (HTTP ports;
    gRPC is +10000) from a ``weed mini`` command line."""
    ports = {}
    for arg in args:
        found = re.fullmatch(r"-(s3|master|volume|filer|admin)\.port=(\d+)", arg)
        if found:
            ports[found[1]] = int(found[2])
    return ports


def _is_settings_frame(data: bytes) -> bool:
    # a frame header: 3 bytes length, 1 byte type (4 = SETTINGS), 1 byte flags, 4 bytes id
    return len(data) >= 9 and data[3] == 0x04


def _read_some(sock: socket.socket | ssl.SSLSocket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    try:
        return sock.recv(4096)
    except (TimeoutError, OSError):
        return b""


def grpc_answers_plaintext(port: int, timeout: float = 5.0, host: str = "127.0.0.1") -> bool:
    """Whether the gRPC server on *port* (of *host*) answers an HTTP/2 preface sent without
    TLS with its SETTINGS frame (what a plaintext gRPC server does, and an mTLS one never)."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(_H2_PREFACE)
        return _is_settings_frame(_read_some(sock, timeout))


def grpc_tls_handshake(
    port: int,
    ca: Path,
    client_cert: tuple[Path, Path] | None,
    timeout: float = 5.0,
    host: str = "127.0.0.1",
) -> bool:
    """Whether a TLS client (trusting *ca*, presenting *client_cert* if given) gets an
    HTTP/2 SETTINGS frame from the gRPC server on *port* (a handshake the server refused
    fails, at once or, under TLS 1.3, at the first read)."""
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    context.set_alpn_protocols(["h2"])
    if client_cert is not None:
        context.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
    try:
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw) as sock,
        ):
            sock.sendall(_H2_PREFACE)
            return _is_settings_frame(_read_some(sock, timeout))
    except (ssl.SSLError, OSError):
        return False


def weed_shell(command: str, cwd: Path, master: str, filer: str, timeout: float = 60) -> str:
    """The output of one ``weed shell`` *command*, run in *cwd* (and with *cwd* as HOME, so
    only a ``security.toml`` there counts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEED_")}
    env["HOME"] = str(cwd)
    result = subprocess.run(
        [find_weed(), "shell", f"-master={master}", f"-filer={filer}"],
        input=command + "\n",
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result.stdout + result.stderr


def process_children(pid: int) -> list[int]:
    """The direct children of process *pid* (Linux ``/proc``)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return children


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def pid_alive(pid: int) -> bool:
    """Whether *pid* is a live (not zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
