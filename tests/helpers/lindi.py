"""Helpers of the LINDI tests: comparisons with h5py, an HTTP server with ranges (its script is
``range_server.py`` here), the lindi oracle."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from zarrchive.lindi import Reference

LINDI_PYTHON_ENV = "ZARRCHIVE_LINDI_PYTHON"


SERVER_SCRIPT = Path(__file__).with_name("range_server.py")


@dataclass
class RangeServer:
    """A loopback HTTP server (its own process) of a directory that honours ``Range``."""

    root: Path
    log: Path
    base_url: str = ""

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    @property
    def requests(self) -> list[tuple[str, str]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        return [(p, r) for p, _, r in (line.partition("\t") for line in lines)]

    def ranged(self, name: str) -> int:
        return sum(1 for path, rng in self.requests if path == f"/{name}" and rng)


@contextlib.contextmanager
def range_server_process(root: Path, log: Path) -> Iterator[RangeServer]:
    proc = subprocess.Popen(
        [sys.executable, str(SERVER_SCRIPT), str(root), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield RangeServer(root=root, log=log, base_url=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(10)


def run_oracle(python: str, script: str, *args: str | os.PathLike[str], cwd: Path) -> Any:
    """Run *script* with the lindi interpreter; it prints one JSON document, returned parsed."""
    proc = subprocess.run(
        [python, "-c", textwrap.dedent(script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    if proc.returncode != 0:
        raise AssertionError(f"lindi script failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def same_value(ours: Any, theirs: Any, ours_file: Any, their_file: Any) -> None:
    """Values equal, references compared by the name of their target."""
    if isinstance(theirs, h5py.Reference):
        assert isinstance(ours, Reference), (ours, theirs)
        assert ours_file[ours].name == their_file[theirs].name
        return
    if isinstance(theirs, np.ndarray) and theirs.dtype.names is not None:
        assert isinstance(ours, np.ndarray) and ours.dtype.names == theirs.dtype.names
        assert ours.shape == theirs.shape
        for name in theirs.dtype.names:
            for a, b in zip(ours[name].reshape(-1), theirs[name].reshape(-1), strict=True):
                same_value(a, b, ours_file, their_file)
        return
    if isinstance(theirs, np.void):
        assert isinstance(ours, np.void)
        for a, b in zip(ours.tolist(), theirs.tolist(), strict=True):
            same_value(a, b, ours_file, their_file)
        return
    if isinstance(theirs, np.ndarray) and theirs.dtype.kind == "O":
        assert isinstance(ours, np.ndarray) and ours.shape == theirs.shape
        for a, b in zip(ours.reshape(-1), theirs.reshape(-1), strict=True):
            same_value(a, b, ours_file, their_file)
        return
    if isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray), type(ours)
        assert ours.dtype == theirs.dtype
        assert ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
        return
    assert type(ours) is type(theirs), (type(ours), type(theirs))
    if isinstance(theirs, float | np.floating) and np.isnan(theirs):
        assert np.isnan(ours)
    else:
        assert ours == theirs


def same_attrs(ours: Any, theirs: Any, ours_file: Any, their_file: Any) -> None:
    assert sorted(ours.attrs) == sorted(theirs.attrs)
    for key in theirs.attrs:
        a, b = ours.attrs[key], theirs.attrs[key]
        if isinstance(b, bytes):  # LINDI attributes hold text
            assert a == b.decode("utf-8")
        elif isinstance(b, np.ndarray) and b.dtype.kind == "S":
            assert a.tolist() == [x.decode("utf-8") for x in b.reshape(-1)]
        elif isinstance(b, np.ndarray) and b.dtype.kind in "iu":
            assert isinstance(a, np.ndarray) and a.dtype.kind in "iu"
            np.testing.assert_array_equal(a, b)
        elif isinstance(b, np.ndarray) and b.dtype.kind == "f":
            np.testing.assert_array_equal(a, b.astype(np.float64))
        elif isinstance(b, np.integer):
            assert isinstance(a, np.integer) and a == b
        elif isinstance(b, np.floating):
            assert isinstance(a, np.floating)
            assert (np.isnan(a) and np.isnan(b)) or a == b
        else:
            same_value(a, b, ours_file, their_file)


def same_dtype(ours: np.dtype[Any], theirs: np.dtype[Any]) -> None:
    if theirs.names is not None:
        assert ours.names == theirs.names
        for name in theirs.names:
            same_dtype(ours[name], theirs[name])
        return
    assert ours == theirs, (ours, theirs)
    assert h5py.check_dtype(ref=ours) == h5py.check_dtype(ref=theirs)
    if h5py.check_dtype(vlen=theirs) is not None:
        assert h5py.check_dtype(vlen=ours) is not None


def same_tree(ours: Any, theirs: Any) -> None:
    """Groups, datasets, attributes, shapes, dtypes and values equal (soft links followed)."""
    ours_file, their_file = ours.file, theirs.file

    def walk(a: Any, b: Any) -> None:
        same_attrs(a, b, ours_file, their_file)
        if isinstance(b, h5py.Dataset):
            assert isinstance(a, h5py.Dataset), a
            assert a.shape == b.shape, (a.name, a.shape, b.shape)
            same_dtype(a.dtype, b.dtype)
            same_value(a[()], b[()], ours_file, their_file)
            return
        assert isinstance(a, h5py.Group)
        assert sorted(a.keys()) == sorted(b.keys()), a.name
        for key in b:
            if b.get(key) is None:  # dangling link
                assert a.get(key) is None
                continue
            walk(a[key], b[key])

    walk(ours, theirs)


#: Normalises a file (h5py, lindi or ours) to JSON; the same code runs on both sides.
DUMP = r"""
import json, math, sys
import numpy as np
import h5py

def norm(v, f):
    if isinstance(v, h5py.Reference):
        return {"ref": f[v].name}
    if isinstance(v, (bytes, np.bytes_)):
        return bytes(v).decode("utf-8")
    if isinstance(v, np.ndarray):
        return norm(v.tolist(), f) if v.ndim else norm(v[()], f)
    if isinstance(v, (list, tuple)):
        return [norm(x, f) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return "NaN" if math.isnan(v) else ("Inf" if v == math.inf else ("-Inf" if v == -math.inf else v))
    return v

def dump(f):
    out = {"/": {a: norm(f.attrs[a], f) for a in sorted(f.attrs.keys())}}
    def walk(g, path):
        for k in sorted(g.keys()):
            p = path + "/" + k
            obj = g[k]
            entry = {"attrs": {a: norm(obj.attrs[a], f) for a in sorted(obj.attrs.keys())}}
            if isinstance(obj, h5py.Dataset):
                entry["shape"] = list(obj.shape)
                try:
                    names = obj.dtype.names
                    if names:
                        cols = [obj[n][:] for n in names]
                        entry["value"] = [[norm(c[i], f) for c in cols] for i in range(obj.shape[0])]
                    else:
                        entry["value"] = norm(obj[()], f)
                except Exception as exc:
                    entry["error"] = type(exc).__name__
            else:
                walk(obj, p)
            out[p] = entry
    walk(f, "")
    return out
"""

_namespace: dict[str, Any] = {}
exec(DUMP, _namespace)
dump = _namespace["dump"]
