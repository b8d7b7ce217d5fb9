"""Fuzz: schemathesis on ``/openapi.json`` against a live server, with a token and real ids
(so requests reach the handlers): no input may get a 5xx.

schemathesis lives in its own environment (``make .venv-schemathesis``: it pins libraries
that may clash with ours) and runs as its CLI, ``st run``, in a subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO
from tests.helpers.reliability import FULL, Tokens, budget, count, note
from tests.helpers.zarr_client import create_dandiset, create_zarr, expect, md5, upload

PART = "fuzz"
ST = REPO / ".venv-schemathesis" / "bin" / "st"


def _world(api: httpx.Client) -> dict[str, str | int]:
    dandiset = create_dandiset(api, "fuzz")
    zarr_id = create_zarr(api, dandiset)
    upload(api, zarr_id, {"arr/.zarray": b"{}", "arr/0": b"zero", "top": b"t"})
    asset = expect(
        api.post(
            f"/api/dandisets/{dandiset}/versions/draft/assets/",
            json={"metadata": {"path": "fuzz.zarr"}, "zarr_id": zarr_id},
        )
    )
    plan = expect(
        api.post(
            "/api/uploads/initialize/", json={"size": 4, "md5": md5(b"blob"), "dandiset": dandiset}
        )
    )
    # DELETE /api/auth/tokens/{key_id}/ revokes this spare key, never the fuzzing one
    spare = expect(api.post("/api/auth/tokens/", json={"name": "spare", "scope": "read"}), 201)
    return {
        "path.key_id": spare["id"],
        "path.dandiset_id": dandiset,
        "path.zarr_id": zarr_id,
        "path.asset_id": asset["asset_id"],
        "path.upload_id": plan["upload_id"],
        "path.version": "draft",
        "path.path": "arr/0",
    }


def test_no_server_errors(
    module_api: httpx.Client, module_tokens: Tokens, module_database_url: str, tmp_path: Path
) -> None:
    if not ST.exists():
        pytest.skip(f"{ST} is missing: run `make .venv-schemathesis` (schemathesis' own venv)")
    if not FULL and not module_database_url.startswith("sqlite"):
        pytest.skip("fuzzing runs on PostgreSQL under make reliability only (time budget)")
    parameters = _world(module_api)
    # a key of the owner's not named "default": DANDI's POST /api/auth/token/ replaces only
    # that one, so the fuzzing key keeps working all along
    made = module_api.post("/api/auth/tokens/", json={"name": "fuzz", "scope": "write"})
    fuzz_key = expect(made, 201)["key"]
    config = "[parameters]\n" + "".join(f'"{k}" = {json.dumps(v)}\n' for k, v in parameters.items())
    (tmp_path / "schemathesis.toml").write_text(config)
    base = str(module_api.base_url).rstrip("/")
    junit = tmp_path / "junit.xml"
    command = [
        str(ST),
        "run",
        f"{base}/openapi.json",
        "--header",
        f"Authorization: token {fuzz_key}",
        "--checks",
        "not_a_server_error",
        "--max-examples",
        str(budget(8, 100)),
        "--max-time",
        str(budget(30, 240)),
        "--workers",
        "1",
        "--seed",
        "1",
        "--request-timeout",
        "60",
        "--report",
        "junit",
        "--report-junit-path",
        str(junit),
    ]
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=budget(120, 600)
    )
    out = result.stdout + result.stderr
    tested = re.search(r"(\d+) generated", out)
    cases = int(tested.group(1)) if tested else 0
    errors = len(re.findall(r"Server error", out))
    count(PART, cases=cases, server_errors=errors)
    note(PART, f"exit {result.returncode}")
    assert cases > 0, out[-3000:]
    assert result.returncode == 0 and errors == 0, out[-6000:]
