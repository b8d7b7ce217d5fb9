"""The reliability suite's budget and its figures (cases run, faults injected, 5xx seen).

``ZARRCHIVE_RELIABILITY=full`` (``make reliability``) runs every part at full size; unset
(``make test``) on a small budget.  Each part records its figures with :func:`record`;
the suite's conftest prints them at the end and writes them as JSON to
``ZARRCHIVE_RELIABILITY_FIGURES`` when set.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FULL = os.environ.get("ZARRCHIVE_RELIABILITY", "") == "full"


def budget(small: int, full: int) -> int:
    """*full* under ``make reliability``, else *small*."""
    return full if FULL else small


@dataclass
class Tokens:
    """API tokens of the three users of a test archive."""

    owner: str
    other: str
    admin: str


@dataclass
class Figures:
    """What one part of the suite did."""

    part: str
    cases: int = 0
    faults: int = 0
    server_errors: int = 0
    notes: list[str] = field(default_factory=list)


_lock = threading.Lock()
_figures: dict[str, Figures] = {}


def figures(part: str) -> Figures:
    """The (shared, thread-safe to update under :func:`count`) figures of *part*."""
    with _lock:
        return _figures.setdefault(part, Figures(part))


def count(part: str, *, cases: int = 0, faults: int = 0, server_errors: int = 0) -> None:
    with _lock:
        entry = _figures.setdefault(part, Figures(part))
        entry.cases += cases
        entry.faults += faults
        entry.server_errors += server_errors


def note(part: str, text: str) -> None:
    with _lock:
        _figures.setdefault(part, Figures(part)).notes.append(text)


def export() -> list[dict[str, Any]]:
    """The figures as plain data (a pytest-xdist worker sends them to the controller)."""
    with _lock:
        return [asdict(f) for f in _figures.values()]


def merge(parts: list[dict[str, Any]]) -> None:
    """Add a worker's :func:`export` to this process's figures."""
    for part in parts:
        count(
            part["part"],
            cases=part["cases"],
            faults=part["faults"],
            server_errors=part["server_errors"],
        )
        for text in part["notes"]:
            note(part["part"], text)


def summary() -> list[Figures]:
    with _lock:
        return sorted(_figures.values(), key=lambda f: f.part)


def write_summary(path: Path) -> None:
    data = {"scale": "full" if FULL else "small", "parts": [asdict(f) for f in summary()]}
    path.write_text(json.dumps(data, indent=1) + "\n")
