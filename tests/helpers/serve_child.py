"""``zarrchive serve`` (the embedded default) as a child process, as a user runs it, and a
small Zarr upload through its API: for the start/stop tests."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.helpers.embedded_s3 import pid_alive, process_children, process_name
from tests.helpers.presigned import put_headers
from tests.helpers.server_process import zarrchive_command
from zarrchive.storage.seaweedfs import free_port


def serve_environment(data_dir: Path, s3_port: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
    env.update(
        ZARRCHIVE_DATA_DIR=str(data_dir),
        ZARRCHIVE_EMBEDDED_S3_PORT=str(s3_port),
        ZARRCHIVE_PORT=str(port),
        PYTHONUNBUFFERED="1",
    )
    return env


def default_stop_signals() -> None:
    """In a child, before it runs: SIGINT, SIGTERM and SIGHUP do what they do for a command
    typed at a terminal.  A test run started in the background (``make test &``, nohup)
    ignores SIGINT, children inherit that, and ``zarrchive serve`` keeps an inherited
    SIG_IGN on purpose: its Ctrl-C tests would then wait for nothing."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


#: How many times :meth:`ServeChild.start` tries fresh ports when its own were taken.
PORT_ATTEMPTS = 3
#: What ``serve`` says when a port it was given is taken: uvicorn's bind error (errno 98) for
#: the API, the embedded SeaweedFS launcher's for its S3 port.
PORT_TAKEN = ("address already in use", " is taken: stop what uses it")


class _PortTaken(Exception):
    """``serve`` exited because a port it was given is taken."""


@dataclass
class ServeChild:
    """One ``zarrchive serve`` (or ``make serve``) in a session of its own."""

    data_dir: Path
    log_path: Path
    port: int = field(default_factory=free_port)
    s3_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    #: The ``weed`` processes seen under it while it served.
    weed_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return serve_environment(self.data_dir, self.s3_port, self.port)

    def start(self, command: list[str] | None = None, timeout: float = 180) -> float:
        """Start it and wait until the API answers; the seconds that took.

        Its ports are chosen free before it starts (:func:`free_port`), and another process
        may take one in between (an outgoing connection's ephemeral port, on a busy
        machine): ``serve`` then exits saying so, and it is started again on fresh ports, up
        to :data:`PORT_ATTEMPTS` times.  Any other exit fails."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            log_start = len(self.output())
            try:
                return self._start_once(command, timeout)
            except _PortTaken:
                if attempt == PORT_ATTEMPTS:
                    raise AssertionError(
                        f"serve found its ports taken {attempt} times:\n{self.output()[log_start:]}"
                    ) from None
                self.port, self.s3_port = free_port(), free_port()
        raise AssertionError("unreachable")

    def _start_once(self, command: list[str] | None, timeout: float) -> float:
        log_start = len(self.output())
        began = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command or [*zarrchive_command(), "serve"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as a terminal's job
                preexec_fn=default_stop_signals,
            )
        while True:
            if self.process.poll() is not None:
                said = self.output()[log_start:]
                if any(taken in said for taken in PORT_TAKEN):
                    raise _PortTaken
                raise AssertionError(f"serve exited ({self.process.returncode}):\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/api/info/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - began > timeout:
                raise AssertionError(f"serve did not answer within {timeout} s:\n{self.output()}")
            time.sleep(0.1)
        self.weed_pids = self.find_weed()
        return time.monotonic() - began

    def find_weed(self) -> list[int]:
        """The ``weed`` processes in this child's process tree."""
        assert self.process is not None
        found, todo = [], [self.process.pid]
        while todo:
            for child in process_children(todo.pop()):
                todo.append(child)
                if process_name(child) == "weed":
                    found.append(child)
        return found

    def signal_group(self, sig: int) -> None:
        """*sig* to its whole process group, as the terminal sends Ctrl-C."""
        assert self.process is not None
        os.killpg(self.process.pid, sig)

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout)

    def weed_left(self, timeout: float = 0.0) -> list[int]:
        """The ``weed`` processes seen while it served that are still alive (after waiting
        up to *timeout* seconds for them to go)."""
        deadline = time.monotonic() + timeout
        while True:
            alive = [pid for pid in self.weed_pids if pid_alive(pid)]
            if not alive or time.monotonic() >= deadline:
                return alive
            time.sleep(0.1)

    def cleanup(self) -> None:
        """Kill whatever is left (after a failed test)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        for pid in self.weed_left():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def output(self) -> str:
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")


def create_user(child: ServeChild, name: str) -> str:
    """A token of a new user, made by ``zarrchive admin`` while *child* serves."""
    done = subprocess.run(
        [*zarrchive_command(), "admin", "create-user", name],
        env=child.env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def upload_chunk(url: str, token: str, dandiset: str | None, body: bytes) -> tuple[str, str]:
    """Upload *body* as ``a/0`` of a new Zarr (in a new dandiset unless given); wait until
    it is applied.  Returns (dandiset, the object's public S3 URL)."""
    headers = {"Authorization": f"token {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
        if dandiset is None:
            created = api.post("/api/dandisets/", json={"name": "d"})
            assert created.status_code == 200, created.text
            dandiset = str(created.json()["identifier"])
        zarr = api.post("/api/zarr/", json={"name": f"z{time.time_ns()}", "dandiset": dandiset})
        assert zarr.status_code == 200, zarr.text
        zarr_id = zarr.json()["zarr_id"]
        digest = hashlib.md5(body)
        batch = api.post(
            f"/api/zarr/{zarr_id}/upload/", json=[{"path": "a/0", "etag": digest.hexdigest()}]
        )
        assert batch.status_code == 200, batch.text
        (item,) = batch.json()
        url = item["upload_url"]
        put = httpx.put(url, content=body, headers=put_headers(url, body))
        assert put.status_code == 200, put.text
        done = api.post(f"/api/zarr/{zarr_id}/upload/complete/")
        assert done.status_code == 200, done.text
        deadline = time.monotonic() + 120
        while (state := api.get(f"/api/zarr/{zarr_id}/").json())["upload_state"] != "at_rest":
            assert time.monotonic() < deadline, state
            time.sleep(0.2)
        return dandiset, f"{state['s3_url'].rstrip('/')}/a/0"
