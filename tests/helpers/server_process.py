"""``zarrchive serve`` as a child process (to SIGKILL it), over a given database and S3."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

from zarrchive.config import Settings
from zarrchive.storage.seaweedfs import free_port

T = TypeVar("T")


def zarrchive_command() -> list[str]:
    script = Path(sys.executable).with_name("zarrchive")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "zarrchive.cli"]


class ServerProcess:
    """The archive's server in a process of its own, configured through ``ZARRCHIVE_*``."""

    def __init__(
        self,
        settings: Settings,
        log_path: Path,
        *,
        args: tuple[str, ...] = (),
        address_space_limit: int | None = None,
        open_files_limit: int | None = None,
    ) -> None:
        self.settings = settings
        #: Extra arguments of ``zarrchive serve`` (e.g. ``("--workers", "2")``).
        self.args = args
        #: ``RLIMIT_AS`` of the process, bytes: a runaway allocation fails with MemoryError
        #: there instead of exhausting the machine.
        self.address_space_limit = address_space_limit
        #: ``RLIMIT_NOFILE`` of the process (soft and hard): a machine's smaller limit.
        self.open_files_limit = open_files_limit
        self.port = free_port()
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        s = self.settings
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        env.update(
            {
                "ZARRCHIVE_DATA_DIR": str(s.data_dir),
                "ZARRCHIVE_DATABASE_URL": s.database_url,
                "ZARRCHIVE_S3_ENDPOINT_URL": str(s.s3_endpoint_url),
                "ZARRCHIVE_S3_BUCKET": s.s3_bucket,
                "ZARRCHIVE_S3_EMBARGO_BUCKET": s.s3_embargo_bucket,
                "ZARRCHIVE_S3_ACCESS_KEY_ID": str(s.s3_access_key_id),
                "ZARRCHIVE_S3_SECRET_ACCESS_KEY": str(s.s3_secret_access_key),
                "ZARRCHIVE_HOST": "127.0.0.1",
                "ZARRCHIVE_PORT": str(self.port),
                "ZARRCHIVE_STRICT_SESSIONS": "true" if s.strict_sessions else "false",
                "ZARRCHIVE_PUBLISH_REQUIRES_VALID": str(s.publish_requires_valid).lower(),
            }
        )
        if s.redis_url:
            env["ZARRCHIVE_REDIS_URL"] = s.redis_url
            env["ZARRCHIVE_REDIS_QUEUE"] = s.redis_queue
        return env

    def start(self, timeout: float = 300) -> None:
        """Start serve and wait until it answers (a generous deadline: a loaded machine takes
        a minute or more to import and migrate; starting is not what a test measures)."""
        assert self.process is None
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*zarrchive_command(), "serve", *self.args],
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=self._limit
                if self.address_space_limit or self.open_files_limit
                else None,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"zarrchive serve exited ({self.process.returncode}):\n{tail}")
            try:
                if httpx.get(f"{self.url}/api/info/", timeout=30).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"zarrchive serve did not answer within {timeout} s")
            time.sleep(0.1)

    def _limit(self) -> None:
        if self.address_space_limit:
            limit = self.address_space_limit
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        if self.open_files_limit:
            files = self.open_files_limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    def peak_rss(self) -> int:
        """The process's peak resident memory since it started or since
        :meth:`reset_peak_rss`, bytes."""
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        kilobytes = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
        return int(kilobytes.split()[1]) * 1024

    def reset_peak_rss(self) -> None:
        """Start :meth:`peak_rss` again from the process's current resident memory."""
        assert self.process is not None
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def peak_growth(self, action: Callable[[], T]) -> tuple[T, int]:
        """What *action* returns, and by how much it raised the process's peak resident
        memory (bytes)."""
        self.reset_peak_rss()
        before = self.peak_rss()
        result = action()
        return result, self.peak_rss() - before

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as a power cut."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
            self.process = None
