"""The s3fs oracle: zarr-python over s3fs with ``anon=True`` (no credentials), run in its own
environment (``.venv-s3fs``, built by the Makefile from ``requirements/s3fs.lock``), as a
DANDI user reads the public bucket."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

S3FS_PYTHON_ENV = "ZARRCHIVE_S3FS_PYTHON"

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import s3fs, zarr

    command, *args = sys.argv[1:]

    def options(endpoint):
        return {"anon": True, "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}

    def anonymous(endpoint):
        return s3fs.S3FileSystem(skip_instance_cache=True, **options(endpoint))

    def open_group(endpoint, root):
        store = zarr.storage.FsspecStore.from_url(
            "s3://" + root, storage_options=options(endpoint), read_only=True
        )
        return zarr.open_group(store, mode="r", zarr_format=2)

    if command == "write":  # a Zarr v2 group with nested arrays, written locally
        (root,) = args
        group = zarr.open_group(root, mode="w", zarr_format=2)
        a = group.create_array("a", shape=(10, 7), chunks=(3, 3), dtype="int32")
        a[:] = np.arange(70, dtype="int32").reshape(10, 7)
        b = group.create_group("g").create_array("b", shape=(5,), chunks=(2,), dtype="float64")
        b[:] = np.linspace(0, 1, 5)
        group.attrs["title"] = "s3fs oracle"
        print(json.dumps({"a": a[:].tolist(), "g/b": b[:].tolist(), "title": "s3fs oracle"}))
    elif command == "read":  # zarr-python over s3fs, anonymously
        endpoint, root = args
        fs = anonymous(endpoint)
        listed = {
            "ls": sorted(p[len(root):].lstrip("/") for p in fs.ls(root, refresh=True)),
            "find": sorted(p[len(root):].lstrip("/") for p in fs.find(root)),
        }
        group = open_group(endpoint, root)
        print(json.dumps({
            "a": group["a"][:].tolist(),
            "g/b": group["g/b"][:].tolist(),
            "title": group.attrs["title"],
            **listed,
        }))
    elif command == "refused":  # what an anonymous reader gets of each operation
        endpoint, root, key = args
        fs = anonymous(endpoint)
        outcome = {}
        for name, op in (
            ("ls", lambda: fs.ls(root, refresh=True)),
            ("cat", lambda: fs.cat(key)),
            ("zarr", lambda: open_group(endpoint, root)["a"][:]),
        ):
            try:
                op()
                outcome[name] = "allowed"
            except PermissionError:
                outcome[name] = "denied"
            except FileNotFoundError:
                outcome[name] = "not found"
            except Exception as exc:
                outcome[name] = type(exc).__name__ + ": " + str(exc)[:200]
        print(json.dumps(outcome))
    """
)


def run_oracle(python: str, *args: str, cwd: Path) -> Any:
    """Run the oracle script with *args* in the s3fs environment; its JSON answer."""
    script = cwd / "s3fs_oracle.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [python, str(script), *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert done.returncode == 0, done.stderr[:4000]
    return json.loads(done.stdout.strip().splitlines()[-1])


def local_zarr(python: str, tmp_path: Path) -> tuple[dict[str, bytes], dict[str, Any]]:
    """A Zarr v2 group written by zarr-python in the s3fs environment (arrays ``a`` and
    ``g/b``) under *tmp_path*: its files (relative path to content) and its data."""
    root = tmp_path / "local.zarr"
    expected = run_oracle(python, "write", str(root), cwd=tmp_path)
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    return files, expected
