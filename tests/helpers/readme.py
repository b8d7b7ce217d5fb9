"""The README's shell blocks as a user pastes them, and a server started as ``make serve``
starts it (``zarrchive serve`` in the clone's directory, no ``ZARRCHIVE_*`` settings but
free ports)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx

from tests.helpers.serve_child import default_stop_signals
from tests.helpers.server_process import zarrchive_command
from zarrchive.storage.seaweedfs import free_port

REPO = Path(__file__).resolve().parents[2]
#: The comment that marks a README block the tests run (`tests/readme/`).
RUN_MARKER = "<!-- readme-test: run -->"
_BLOCK = re.compile(re.escape(RUN_MARKER) + r"\n```sh\n(.*?)```", re.S)


#: The comment that marks a README ```python block the tests run with the clone's Python
#: (``.venv/bin/python``: zarrchive installed), and one they run with stock tools only
#: (``.venv-stock/bin/python``: zarr-python, fsspec and aiohttp, no zarrchive).
PYTHON_MARKER = "<!-- readme-test: python -->"
STOCK_PYTHON_MARKER = "<!-- readme-test: python (stock tools) -->"
_MARKED = re.compile(r"(<!-- readme-test: [^>]*-->)\n```(\w+)\n(.*?)```", re.S)
_PYTHONS = {PYTHON_MARKER: ".venv/bin/python", STOCK_PYTHON_MARKER: ".venv-stock/bin/python"}


def runnable_blocks(readme: Path = REPO / "README.md") -> list[str]:
    """The ```sh blocks of *readme* marked :data:`RUN_MARKER`, in order."""
    return _BLOCK.findall(readme.read_text())


def marked_blocks(readme: Path = REPO / "README.md") -> list[tuple[str, str, str]]:
    """Every block of *readme* after a ``readme-test`` marker: ``(marker, language, code)``."""
    return _MARKED.findall(readme.read_text())


def readme_script(readme: Path = REPO / "README.md") -> str:
    """One bash script of the marked blocks in order, as a user pastes them into one
    terminal: the shell blocks as they are, each Python block fed to its interpreter (the
    ``ZARR_ID`` it names is the shell's ``$ZARR_ID``, which the README sets before)."""
    parts = ["set -euo pipefail"]
    for marker, language, code in marked_blocks(readme):
        if marker == RUN_MARKER and language == "sh":
            parts.append(code)
        elif marker in _PYTHONS and language == "python":
            if any(c in code for c in "$`\\"):
                raise ValueError(f"a README Python block the shell would expand: {code[:80]!r}")
            body = code.replace("ZARR_ID", "${ZARR_ID}")
            parts.append(f"{_PYTHONS[marker]} - <<PYTHON\n{body}PYTHON")
        else:
            raise ValueError(f"{marker} before a {language} block: nothing runs it")
    return "\n".join(parts) + "\n"


class MakeServe:
    """``zarrchive serve`` in *workdir* (its archive in ``workdir/.zarrchive``), as
    ``make serve`` runs it, on free ports."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRCHIVE_")}
        env.update(ZARRCHIVE_PORT=str(self.port), ZARRCHIVE_EMBEDDED_S3_PORT=str(free_port()))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [*zarrchive_command(), "serve"],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=default_stop_signals,  # it is stopped with Ctrl-C
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"zarrchive serve exited:\n{self.log()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/api/info/", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"zarrchive serve did not answer:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """Ctrl-C, as a user stops it (then SIGKILL to the whole group if it lingers)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None
