"""zarrchive.allocator: large blocks mapped apart, whatever was freed before (glibc)."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys

import pytest

from zarrchive.allocator import LARGE_BLOCK
from zarrchive.config import Settings

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

#: In a fresh interpreter: free an 8 MiB block, then take a 2 MiB one; print how many more
#: blocks glibc has mapped apart (mallinfo2's hblks) once it is taken.
_SCRIPT = """
import ctypes, sys
from zarrchive.allocator import map_large_blocks

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "set":
    assert map_large_blocks()
freed = bytes(8 << 20)
del freed
before = libc.mallinfo2().hblks
taken = bytes(2 << 20)
print(libc.mallinfo2().hblks - before)
"""


def _mapped_after_a_free(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@glibc_only
def test_a_large_block_is_mapped_apart_after_a_larger_one_was_freed() -> None:
    assert LARGE_BLOCK == 1024 * 1024
    # glibc's own adjustment: the 8 MiB block freed, a 2 MiB one comes from the heap (where
    # freed memory stays in the process)
    assert _mapped_after_a_free("default") == 0
    # the archive's setting: mapped apart (given back to the system when freed)
    assert _mapped_after_a_free("set") == 1


class _Mapped(Exception):
    """Raised by the stand-in of ``map_large_blocks``: the server's entry point called it."""


def _refuse_to_start(threshold: int = LARGE_BLOCK) -> bool:
    raise _Mapped


def _started_unmapped() -> None:
    raise AssertionError("the server read its settings before it set the threshold")


@pytest.mark.parametrize("entry", ["serve", "app_from_env"])
def test_the_server_processes_map_large_blocks_first(
    entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `zarrchive serve` and each of its worker processes (uvicorn's factory) set the
    # threshold before anything else is built: the stand-in stops them right there
    from zarrchive import allocator
    from zarrchive.cli import serve

    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)  # (the test's own)
    monkeypatch.setattr(allocator, "map_large_blocks", _refuse_to_start)
    monkeypatch.setattr(Settings, "from_env", _started_unmapped)
    with pytest.raises(_Mapped):
        if entry == "serve":
            serve.serve(host=None, port=None, workers=1)
        else:
            serve.app_from_env()
