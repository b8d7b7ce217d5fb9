"""A task that tests the walls from inside: it tries to read files, to connect, and to read
every dataset of an HDF5 file through HDF5 itself (no check of the first wall: external
storage, external links and virtual datasets are followed if HDF5 can), and answers with
what it managed.  Used by the tests of :mod:`zarrchive.sandbox`; harmless anywhere.

Arguments: ``paths`` (files to read), ``ports`` (loopback TCP ports to connect to),
``hdf5`` (the path of an HDF5 file, opened by path before the wall goes up, as HDF5 opens
a local file: its pointers out are followed, or not, once walled in); and to test the limits: ``forever`` (compute until killed),
``allocate`` (bytes to allocate), ``output`` (bytes to answer).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np


@dataclass
class Probe:
    paths: list[str]
    ports: list[int]
    hdf5: h5py.File | None
    forever: bool = False
    allocate: int = 0
    output: int = 0
    read_only: list[str] = field(default_factory=list)
    connect_ports: list[int] = field(default_factory=list)

    def run(self) -> bytes:
        while self.forever:
            pass
        if self.allocate:
            bytearray(self.allocate)
        if self.output:
            return b"x" * self.output
        found: dict[str, Any] = {
            "uid": os.getuid(),
            "cwd": _list("."),
            "environ": sorted(os.environ),
            "files": {p: _read(p) for p in self.paths},
            "ports": {str(p): _connect(p) for p in self.ports},
            "write": _write("probe-was-here"),
        }
        if self.hdf5 is not None:
            found["hdf5"] = _datasets(self.hdf5)
        return json.dumps(found).encode()

    def reason(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}"


def prepare(args: dict[str, Any]) -> Probe:
    hdf5 = args.get("hdf5")
    return Probe(
        paths=[str(p) for p in args.get("paths", [])],
        ports=[int(p) for p in args.get("ports", [])],
        hdf5=None if hdf5 is None else h5py.File(str(hdf5), "r"),
        forever=bool(args.get("forever", False)),
        allocate=int(args.get("allocate", 0)),
        output=int(args.get("output", 0)),
    )


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return "read: " + f.read(200).decode(errors="replace")
    except OSError as exc:
        return f"denied: {exc.strerror}"


def _list(path: str) -> str:
    try:
        return "listed: " + " ".join(sorted(os.listdir(path)))
    except OSError as exc:
        return f"denied: {exc.strerror}"


def _write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as exc:
        return f"denied: {exc.strerror}"


def _connect(port: int) -> str:
    with socket.socket() as sock:
        sock.settimeout(5)
        try:
            sock.connect(("127.0.0.1", port))
            return "connected"
        except OSError as exc:
            return f"denied: {exc.strerror or exc}"


def _datasets(f: h5py.File) -> dict[str, str]:
    """Each dataset read through HDF5: its bytes as text, or the error."""
    out: dict[str, str] = {}
    with f:
        names: list[str] = []
        f.visit(names.append)
        for name in [*names, *(k for k in f if k not in names)]:
            try:
                value = f[name]
                if isinstance(value, h5py.Dataset):
                    array = np.asarray(value[()])
                    out[name] = "read: " + array.tobytes().decode(errors="replace")[:200]
            except Exception as exc:
                out[name] = f"error: {type(exc).__name__}: {exc}"[:300]
    return out
