"""The stock-reader oracle: zarr-python over fsspec (its reference filesystem, and its HTTP
filesystem with an ``Authorization`` header), run in the s3fs environment (``.venv-s3fs``:
fsspec, aiohttp and zarr-python 3, no zarrchive code), as a user of those tools reads."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers.oracle_env import oracle_python
from tests.helpers.s3fs_oracle import S3FS_PYTHON_ENV

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import fsspec, zarr

    command, *args = sys.argv[1:]

    def dump(group):
        return {
            "a": group["a"][:].tolist(),
            "g/b": group["g/b"][:].tolist(),
            "title": group.attrs["title"],
        }

    def attempt(fn):
        try:
            print(json.dumps(fn()))
        except Exception as exc:
            print(json.dumps({"error": type(exc).__name__ + ": " + str(exc)[:300]}))

    if command == "refs":  # the README's recipe: a reference file, opened by stock fsspec
        url, token = args
        headers = {"Authorization": "token " + token} if token else {}
        def read():
            fs = fsspec.filesystem(
                "reference",
                fo=url,
                target_options={"headers": headers},
                remote_protocol="http",
                remote_options={"asynchronous": True, "headers": headers},
                asynchronous=True,
            )
            store = zarr.storage.FsspecStore(fs, read_only=True)
            return dump(zarr.open_group(store, mode="r", zarr_format=2))
        attempt(read)
    elif command == "http":  # zarr-python over fsspec's HTTP filesystem, with a token
        url, token = args
        options = {"headers": {"Authorization": "token " + token}} if token else {}
        attempt(lambda: dump(
            zarr.open_group(url, mode="r", storage_options=options, zarr_format=2)
        ))
    """
)


def s3fs_python() -> str:
    """The s3fs environment's python, or skip saying how to build it."""
    return oracle_python(
        S3FS_PYTHON_ENV,
        ".venv-s3fs/.installed-stamp",
        ".venv-s3fs with fsspec and zarr, to read the archive with stock readers",
    )


def read_with_fsspec(python: str, command: str, url: str, token: str, cwd: Path) -> Any:
    """Run the oracle: its JSON answer (the arrays read, or ``{"error": ...}``)."""
    script = cwd / "fsspec_oracle.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        [python, str(script), command, url, token],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr[:4000]
    return json.loads(done.stdout.strip().splitlines()[-1])
