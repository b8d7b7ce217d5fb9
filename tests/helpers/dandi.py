"""The dandi oracle: DANDI's own client (``dandi``, with dandischema and pynwb) in its own
venv (``.venv-dandi``, built by ``make .venv-dandi``), run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.helpers.server_process import ServerProcess

DANDI_VENV_ENV = "ZARRCHIVE_DANDI_VENV"
REPO = Path(__file__).resolve().parents[2]


def dandi_venv() -> Path | None:
    """The venv holding ``dandi`` (``$ZARRCHIVE_DANDI_VENV`` or ``.venv-dandi``), if built."""
    configured = os.environ.get(DANDI_VENV_ENV)
    venv = Path(configured) if configured else REPO / ".venv-dandi"
    return venv if (venv / "bin" / "dandi").exists() else None


def require_dandi_venv() -> Path:
    """The dandi venv, or skip the test saying how to build it."""
    venv = dandi_venv()
    if venv is None:
        pytest.skip(
            "the dandi oracle is not installed: run `make .venv-dandi` (or set "
            f"{DANDI_VENV_ENV} to a venv with the `dandi` CLI)"
        )
    return venv


def run_python(code: str, *args: str, timeout: float = 300) -> str:
    """Run *code* with the dandi venv's Python; its stdout (fails the test on an error)."""
    venv = require_dandi_venv()
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:
        raise AssertionError(f"the dandi venv's python failed:\n{done.stderr[-4000:]}")
    return done.stdout


def run_json(code: str, *args: str, timeout: float = 300) -> object:
    return json.loads(run_python(code, *args, timeout=timeout))


def dandi_environment(home: Path, api_keys: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``dandi`` run: its own HOME (no keyring, no cache shared with
    the user's), no prompts, and ``{INSTANCE}_API_KEY`` variables (names bash cannot
    export, e.g. ``127.0.0.1:8000_API_KEY``)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and not k.startswith(("DANDI", "ZARRCHIVE_"))
    }
    env.update(
        {
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring",
            "DANDI_CACHE": "ignore",
            "DANDI_NO_ET": "1",
            "PYTHONWARNINGS": "ignore",
        }
    )
    env.update(api_keys or {})
    return env


def run_dandi(
    args: list[str],
    *,
    cwd: Path,
    home: Path,
    api_keys: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """``dandi ARGS`` (from the dandi venv) in *cwd*; never reads stdin."""
    venv = require_dandi_venv()
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(venv / "bin" / "dandi"), *args],
        cwd=cwd,
        env=dandi_environment(home, api_keys),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def show(done: subprocess.CompletedProcess[str]) -> str:
    """A finished run, for assertion messages."""
    return (
        f"exit {done.returncode}\n--- stdout ---\n{done.stdout[-6000:]}\n"
        f"--- stderr ---\n{done.stderr[-6000:]}"
    )


@dataclass
class DandiArchive:
    """The server, its owner's and a stranger's tokens, and where ``dandi`` keeps its HOME."""

    server: ServerProcess
    owner: str
    stranger: str
    home: Path

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def instance(self) -> str:
        """dandi's name of the instance: ``host:port`` of ``services.api.url``."""
        return self.url.removeprefix("http://")

    def key(self, token: str) -> dict[str, str]:
        """The environment variable giving dandi *token* (a name bash cannot export)."""
        return {f"{self.instance.upper()}_API_KEY": token}

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"token {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


class SnapshotServer(ServerProcess):
    """The server, publishing Zarrs in ``snapshot`` mode (``ZARRCHIVE_PUBLISHED_ZARRS``)."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "ZARRCHIVE_PUBLISHED_ZARRS": "snapshot"}


__all__ = [
    "DANDI_VENV_ENV",
    "DandiArchive",
    "SnapshotServer",
    "dandi_environment",
    "dandi_venv",
    "require_dandi_venv",
    "run_dandi",
    "run_json",
    "run_python",
    "show",
]
