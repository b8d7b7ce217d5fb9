"""The parent side: run a task in a walled child process and read its answer within bounds.

The child gets an empty environment (no credentials), a fresh empty working directory of its
own, its limits (:class:`~zarrchive.sandbox.protocol.Limits`), and a process group the parent
kills at the wall-clock limit.  Its answer is spooled to a temporary file (the caller's
memory does not grow with it) and read only up to the output limit.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from zarrchive.sandbox.protocol import MAX_HEADER, Header, Limits, Request, Status

log = logging.getLogger(__name__)

#: The child's whole environment: no ``ZARRCHIVE_*``, no ``AWS_*``, no home; HDF5 loads no
#: filter plugin; one thread per library.
CHILD_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HDF5_PLUGIN_PRELOAD": "::",
    "HDF5_USE_FILE_LOCKING": "FALSE",
    "MALLOC_ARENA_MAX": "2",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}
_STDERR_TAIL = 16 * 1024
_warned: set[str] = set()


@dataclass
class TaskResult:
    """How a task ended; with :attr:`Status.OK`, its bytes in :attr:`output` (a temporary
    file at offset 0, closed with the result)."""

    status: Status
    reason: str | None = None
    size: int = 0
    output: IO[bytes] | None = None
    walls: dict[str, int] = field(default_factory=dict)

    def close(self) -> None:
        if self.output is not None:
            self.output.close()

    def __enter__(self) -> TaskResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def child_command() -> list[str]:
    """The child: this interpreter, isolated (no ``PYTHON*`` variables, no user site, not
    the working directory on its path)."""
    return [sys.executable, "-I", "-m", "zarrchive.sandbox.child"]


def run_task(
    task: str, args: dict[str, Any], limits: Limits, *, forbidden: Sequence[Path] = ()
) -> TaskResult:
    """Run *task* (a module of the archive with ``prepare(args)``) on *args* in a walled
    child under *limits*; *forbidden* paths stay unreadable to it whatever its code needs.

    Never raises for what the child does: a crash, a limit or a refusal is the result's
    status and reason."""
    request = Request(task, args, limits, tuple(str(p) for p in forbidden))
    workdir = tempfile.mkdtemp(prefix="zarrchive-sandbox-")
    try:
        env = {**CHILD_ENV, "HDF5_PLUGIN_PATH": workdir}
        with subprocess.Popen(
            child_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            close_fds=True,
            start_new_session=True,  # its own process group: killed whole
        ) as child:
            result = _converse(child, request)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _note_walls(result.walls)
    return result


def _converse(child: subprocess.Popen[bytes], request: Request) -> TaskResult:
    limits = request.limits
    deadline = time.monotonic() + limits.seconds
    spool = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the result, which closes it)
    try:
        result = _exchange(child, request, spool, deadline)
    except BaseException:
        spool.close()
        _kill(child)
        raise
    if result.output is None:
        spool.close()
    return result


def _exchange(
    child: subprocess.Popen[bytes], request: Request, spool: IO[bytes], deadline: float
) -> TaskResult:
    limits = request.limits
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    with contextlib.suppress(BrokenPipeError):  # a child that died early says why below
        child.stdin.write(request.encode())
    with contextlib.suppress(BrokenPipeError):
        child.stdin.close()
    head = b""  # the header line, then the body goes to the spool
    in_body = False
    received = 0
    tail = b""
    over: str | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        selector.register(child.stderr, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                over = f"took longer than its time limit ({limits.seconds:g} s)"
                break
            for key, _ in selector.select(timeout=min(left, 1.0)):
                stream: Any = key.fileobj
                chunk = os.read(stream.fileno(), 256 * 1024)
                if not chunk:
                    selector.unregister(stream)
                elif stream is child.stdout:
                    if not in_body:
                        head += chunk
                        line, newline, chunk = head.partition(b"\n")
                        if not newline and len(head) <= MAX_HEADER:
                            continue
                        head, in_body = line[:MAX_HEADER], True
                    received += len(chunk)
                    if received > limits.output_bytes:
                        over = f"its result passed {limits.output_bytes} bytes"
                        break
                    spool.write(chunk)
                else:
                    tail = (tail + chunk)[-_STDERR_TAIL:]
            if over is not None:
                break
    if over is not None:
        _kill(child)
        return TaskResult(Status.LIMIT, over)
    try:
        code = child.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(child)
        return TaskResult(Status.LIMIT, f"took longer than its time limit ({limits.seconds:g} s)")
    try:
        header = Header.decode(head) if in_body else None
    except Exception:
        header = None
    if header is None:
        return TaskResult(Status.CRASHED, _crash_reason(code, limits, tail))
    if header.status != Status.OK:
        return TaskResult(header.status, header.reason, walls=header.walls)
    if received != header.size:
        return TaskResult(Status.CRASHED, "its answer was cut short", walls=header.walls)
    spool.seek(0)
    return TaskResult(Status.OK, None, header.size, spool, header.walls)


def _crash_reason(code: int, limits: Limits, stderr_tail: bytes) -> str:
    if stderr_tail:
        log.warning(
            "a sandboxed task ended (%s) saying: %s",
            code,
            stderr_tail[-2000:].decode(errors="replace"),
        )
    if code == -signal.SIGXCPU:
        return f"used its CPU time limit ({limits.cpu_seconds} s)"
    if code == -signal.SIGKILL:
        return f"was killed (out of memory? its limit is {limits.memory_bytes // 1024**2} MiB)"
    if code < 0:
        return f"crashed (signal {signal.Signals(-code).name})"
    return f"ended without an answer (exit status {code})"


def _kill(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    child.wait()


def _note_walls(walls: dict[str, int]) -> None:
    """Say once per process which wall is missing."""
    if not walls:
        return
    if walls.get("landlock", 0) == 0 and "landlock" not in _warned:
        _warned.add("landlock")
        log.warning(
            "sandboxed conversions run without Landlock (the kernel has none): the child"
            " holds no credentials and has its limits%s, but may read what that user may",
            " and runs as nobody" if walls.get("uid") == 65534 else "",
        )
