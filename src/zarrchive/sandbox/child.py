"""The sandboxed child: ``python -I -m zarrchive.sandbox.child`` (started by
:func:`zarrchive.sandbox.runner.run_task`, never by hand).

It reads its request, limits itself (address space, CPU, no file written, no core), imports
and prepares its task (the last moment it may read files or resolve names), then walls
itself in before it touches the hostile input:

- Landlock: it may read only the trees of Python's code (and what the task asks for, such as
  the CA certificates), write nothing, connect only to the task's TCP ports, signal nothing
  outside (kernels without Landlock: this wall is missing, the header says so);
- when it runs as root: it becomes ``nobody`` (65534), without supplementary groups;
- ``PR_SET_NO_NEW_PRIVS`` and a small number of open files.

Its answer is a header line and the result's bytes (:mod:`zarrchive.sandbox.protocol`).
"""

from __future__ import annotations

import importlib
import os
import resource
import sys
from pathlib import Path
from typing import Any

from zarrchive.errors import StorageError, ZarrchiveError
from zarrchive.sandbox import landlock
from zarrchive.sandbox.protocol import (
    MAX_REQUEST,
    Header,
    Limits,
    PreparedTask,
    Request,
    Status,
    readable_roots,
)

NOBODY = 65534
#: Shared libraries a running interpreter may still load (glibc loads libgcc_s lazily).
SYSTEM_LIBRARIES = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")


def limit_resources(limits: Limits) -> None:
    """Address space, CPU seconds, no file written, no core dump."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
    cpu = limits.cpu_seconds
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def code_roots() -> list[str]:
    """Where this interpreter's code lives: ``sys.path`` and the system's libraries."""
    roots = [p for p in sys.path if p and os.path.isdir(p)]
    roots += [p for p in SYSTEM_LIBRARIES if os.path.isdir(p)]
    return [os.path.realpath(p) for p in roots]


def wall_in(task: PreparedTask, request: Request) -> dict[str, int]:
    """Put the walls up; which are up."""
    walls: dict[str, int] = {}
    kept, _dropped = readable_roots([*code_roots(), *task.read_only], request.forbidden)
    try:
        walls["landlock"] = landlock.restrict_self(
            [Path(p) for p in kept], connect_ports=task.connect_ports
        )
    except landlock.LandlockUnavailable:
        landlock.no_new_privileges()
        walls["landlock"] = 0
    walls["no_new_privs"] = 1
    if os.getuid() == 0 or os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    walls["uid"] = os.getuid()
    files = request.limits.open_files
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    return walls


def answer(header: Header, body: bytes = b"") -> None:
    out = sys.stdout.buffer
    out.write(header.encode())
    out.write(body)
    out.flush()


def run(request: Request) -> tuple[Header, bytes]:
    """Prepare, wall in, run: the answer."""
    module: Any = importlib.import_module(request.task)
    walls: dict[str, int] = {}
    try:
        task: PreparedTask = module.prepare(request.args)
    except StorageError as exc:  # e.g. the blob's host did not resolve: may pass
        return Header(Status.STORAGE, reason=str(exc)), b""
    walls = wall_in(task, request)
    try:
        body = task.run()
    except MemoryError:
        limit = request.limits.memory_bytes // 1024**2
        return Header(
            Status.LIMIT, reason=f"ran out of its memory limit ({limit} MiB)", walls=walls
        ), b""
    except StorageError as exc:
        return Header(Status.STORAGE, reason=str(exc), walls=walls), b""
    except ZarrchiveError as exc:
        return Header(Status.REFUSED, reason=task.reason(exc), walls=walls), b""
    except Exception as exc:
        return Header(Status.REFUSED, reason=task.reason(exc), walls=walls), b""
    if len(body) > request.limits.output_bytes:
        reason = f"its result passed {request.limits.output_bytes} bytes"
        return Header(Status.LIMIT, reason=reason, walls=walls), b""
    return Header(Status.OK, size=len(body), walls=walls), body


def main() -> None:
    data = sys.stdin.buffer.read(MAX_REQUEST + 1)
    try:
        if len(data) > MAX_REQUEST:
            raise ZarrchiveError("the sandbox request is too large")
        request = Request.decode(data)
        limit_resources(request.limits)
        header, body = run(request)
    except MemoryError:
        header, body = Header(Status.LIMIT, reason="ran out of its memory limit"), b""
    except Exception as exc:  # before the task ran: the sandbox itself failed
        header, body = Header(Status.CRASHED, reason=f"{type(exc).__name__}: {exc}"), b""
    answer(header, body)
    os._exit(0)  # nothing more: no cleanup that could touch the file system


if __name__ == "__main__":
    main()
