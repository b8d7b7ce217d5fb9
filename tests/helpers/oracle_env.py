"""The test oracles' own environments (``.venv-lindi``, ``.venv-s3fs``, ``.venv-ome``, ...),
built by the Makefile and named to the tests by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def oracle_python(env_var: str, make_target: str, purpose: str) -> str:
    """The interpreter *env_var* names; the test skips when it is unset (saying how to build
    it with `make pytest`, and what for) and fails when it names nothing."""
    python = os.environ.get(env_var)
    if not python:
        pytest.skip(f"{env_var} is not set: run `make pytest` (it builds {purpose})")
    if not Path(python).exists():
        pytest.fail(f"{env_var}={python} does not exist: run `make {make_target}`")
    return python
