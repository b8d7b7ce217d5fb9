"""What the archive and a sandboxed child say to each other (pure: no I/O).

The parent writes one JSON request to the child's standard input; the child answers on its
standard output with one JSON header line, then the result's bytes::

    {"status": "ok", "size": 1234, "reason": null, "walls": {...}}\\n<1234 bytes>
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from zarrchive.errors import InvalidInput

#: The longest header line read back.
MAX_HEADER = 64 * 1024
#: The largest request a child reads.
MAX_REQUEST = 16 * 1024 * 1024
#: The longest reason kept (it is shown on pages).
MAX_REASON = 500
#: Only the archive's own modules are tasks.
TASK_PREFIX = "zarrchive."


class Status(enum.Enum):
    """How a sandboxed task ended."""

    #: it ran: its bytes follow
    OK = "ok"
    #: the input was refused (the task said why)
    REFUSED = "refused"
    #: reading the input over the network failed (may pass: try again later)
    STORAGE = "storage"
    #: it passed a limit: time, CPU, memory or output size
    LIMIT = "limit"
    #: it ended without an answer (a crash, a signal)
    CRASHED = "crashed"


class PreparedTask(Protocol):
    """A task made ready before the wall goes up (imports, connections, caches)."""

    #: trees it still needs to read once walled (besides Python's own code)
    read_only: list[str]
    #: the TCP ports it connects to once walled
    connect_ports: list[int]

    def run(self) -> bytes:
        """Do the work on the hostile input; raise to refuse it."""

    def reason(self, exc: BaseException) -> str:
        """What a failure of :meth:`run` says."""


@dataclass(frozen=True)
class Limits:
    """The limits of one sandboxed run: wall-clock seconds (the parent kills the child),
    CPU seconds, address space, open files, and the bytes it may answer."""

    seconds: float
    memory_bytes: int = 1024**3
    output_bytes: int = 64 * 1024**2
    open_files: int = 64

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.memory_bytes < 64 * 1024**2 or self.output_bytes < 0:
            raise InvalidInput("sandbox limits: seconds > 0, memory >= 64 MiB, output >= 0")
        if self.open_files < 16:
            raise InvalidInput("sandbox limits: at least 16 open files")

    @property
    def cpu_seconds(self) -> int:
        """``RLIMIT_CPU``: the wall-clock limit, rounded up (a child that computes all the
        time meets both)."""
        return max(1, int(-(-self.seconds // 1)))


@dataclass(frozen=True)
class Request:
    """What the child is asked to do: the task module, its arguments, its limits, and the
    paths it must not be able to read even where the code it needs lives."""

    task: str
    args: dict[str, Any]
    limits: Limits
    forbidden: tuple[str, ...] = ()

    def encode(self) -> bytes:
        body = {
            "task": self.task,
            "args": self.args,
            "limits": {
                "seconds": self.limits.seconds,
                "memory_bytes": self.limits.memory_bytes,
                "output_bytes": self.limits.output_bytes,
                "open_files": self.limits.open_files,
            },
            "forbidden": list(self.forbidden),
        }
        return json.dumps(body).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> Request:
        try:
            body = json.loads(data)
            task = body["task"]
            if not isinstance(task, str) or not task.startswith(TASK_PREFIX):
                raise ValueError(f"not a task: {task!r}")
            return cls(
                task=task,
                args=dict(body["args"]),
                limits=Limits(**body["limits"]),
                forbidden=tuple(str(p) for p in body["forbidden"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"a malformed sandbox request: {exc}") from exc


@dataclass(frozen=True)
class Header:
    """The child's answer, before the result's bytes."""

    status: Status
    size: int = 0
    reason: str | None = None
    #: which walls were up: ``landlock`` (ABI, 0: none), ``uid``, ``no_new_privs``
    walls: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        body = {
            "status": self.status.value,
            "size": self.size,
            "reason": None if self.reason is None else self.reason[:MAX_REASON],
            "walls": self.walls,
        }
        return json.dumps(body).encode("utf-8") + b"\n"

    @classmethod
    def decode(cls, line: bytes) -> Header:
        try:
            body = json.loads(line)
            reason = body["reason"]
            return cls(
                status=Status(body["status"]),
                size=int(body["size"]),
                reason=None if reason is None else str(reason)[:MAX_REASON],
                walls={str(k): int(v) for k, v in dict(body["walls"]).items()},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidInput(f"a malformed sandbox answer: {exc}") from exc


def readable_roots(
    candidates: list[str], forbidden: tuple[str, ...] | list[str]
) -> tuple[list[str], list[str]]:
    """The trees a walled child may read: the *candidates* that neither hold nor lie inside a
    *forbidden* path (a data directory inside a virtualenv stays unreadable; its code then
    is unreadable too).  Returns (kept, dropped), without repeats, in order."""
    kept: list[str] = []
    dropped: list[str] = []
    banned = [Path(p) for p in forbidden]
    for text in candidates:
        root = Path(text)
        if text in kept or text in dropped:
            continue
        clash = any(root == b or b.is_relative_to(root) or root.is_relative_to(b) for b in banned)
        (dropped if clash else kept).append(text)
    return kept, dropped
