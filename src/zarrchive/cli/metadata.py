"""``zarrchive metadata get|set DANDISET``: a draft's dandiset metadata from the command line.

``get`` prints the draft's metadata as YAML (or JSON with ``--json``); ``set`` replaces it
with a YAML or JSON file (``PUT /api/dandisets/{id}/versions/draft/``: its ``name`` is the
dandiset's name; ``schemaKey`` and ``schemaVersion``, when the file gives none, are
``Dandiset`` and the archive's schema version, as DANDI's own editor sets them), then waits for the archive's validation and prints the draft's status
with every error it lists (the dandiset's own and its assets'), as publishing needs it
``Valid``.  Exit 0 when valid, 1 when the draft is ``Invalid`` (the metadata is stored all
the same: a draft may be fixed step by step), 2 on an error.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import typer

from zarrchive.cli._common import API_URL_OPTION, TOKEN_OPTION, run_client_command, say_retry
from zarrchive.client.asset_metadata import DEFAULT_SCHEMA_VERSION
from zarrchive.errors import InvalidInput

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    from zarrchive.client.api import ApiClient

app = typer.Typer(
    help="A draft's dandiset metadata: print it, or set it from a YAML or JSON file.",
    no_args_is_help=True,
)

#: Statuses that are a validation's result (the others say it is under way).
SETTLED = frozenset({"Valid", "Invalid", "Published"})
#: How long ``set`` waits for the archive's validation, seconds.
VALIDATION_WAIT = 120.0
#: The largest metadata file read, bytes (the archive's own bound on a body is lower).
MAX_FILE_BYTES = 4 * 1024 * 1024

DANDISET_ARGUMENT = typer.Argument(
    ..., help="The dandiset's identifier (six digits).", show_default=False
)


def _draft_url(dandiset: str) -> str:
    return f"/api/dandisets/{quote(dandiset.strip(), safe='')}/versions/draft/"


def read_metadata(path: Path) -> dict[str, Any]:
    """The mapping in the YAML or JSON file *path* (JSON is YAML); :class:`InvalidInput`
    saying what is wrong otherwise."""
    import yaml

    if path.stat().st_size > MAX_FILE_BYTES:
        raise InvalidInput(f"{path}: more than {MAX_FILE_BYTES} bytes: not a metadata file")
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise InvalidInput(f"{path} is not YAML or JSON{at}: {problem}") from None
    if not isinstance(data, dict):
        raise InvalidInput(f"{path} does not hold a mapping of metadata fields")
    plain: dict[str, Any] = json.loads(json.dumps(data, default=str))  # dates as strings
    return plain


def _status(client: ApiClient, dandiset: str, *, wait: float) -> dict[str, Any]:
    """The draft's ``info/``, once its validation is settled (or after *wait* seconds)."""
    deadline = time.monotonic() + wait
    delay = 0.2
    while True:
        info: dict[str, Any] = client.request("GET", _draft_url(dandiset) + "info/").json()
        if info.get("status") in SETTLED or time.monotonic() >= deadline:
            return info
        time.sleep(delay)
        delay = min(delay * 1.5, 2.0)


def _report(dandiset: str, info: dict[str, Any]) -> int:
    """Print the status and the errors it lists; the exit code (1 when Invalid)."""
    status = str(info.get("status"))
    errors = [
        (e.get("field", ""), e.get("message", ""))
        for e in info.get("version_validation_errors") or []
    ]
    assets = [
        (e.get("path", ""), e.get("field", ""), e.get("message", ""))
        for e in info.get("asset_validation_errors") or []
    ]
    print(f"dandiset {dandiset} draft: {status}")
    for field, message in errors:
        print(f"  {field or '(metadata)'}: {message}")
    for path, field, message in assets:
        print(f"  asset {path}: {field + ': ' if field else ''}{message}")
    if status not in SETTLED:
        print("  (validation still under way: `zarrchive metadata get --status` says when done)")
    return 1 if status == "Invalid" else 0


@app.command("get")
def get(
    dandiset: str = DANDISET_ARGUMENT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON rather than YAML."),
    status: bool = typer.Option(
        False, "--status", help="Print the draft's validation status and errors instead."
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Print the draft's metadata of DANDISET (YAML), ready to edit and set again."""
    from zarrchive.client.api import ApiClient

    def run() -> int:
        with ApiClient.from_env(api_url, token, on_retry=say_retry) as client:
            if status:
                return _report(dandiset, _status(client, dandiset, wait=0))
            metadata = client.request("GET", _draft_url(dandiset)).json()
        if as_json:
            print(json.dumps(metadata, indent=2, ensure_ascii=False))
        else:
            import yaml

            sys.stdout.write(yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True))
        return 0

    raise typer.Exit(run_client_command("metadata get", run))


@app.command("set")
def set_(
    dandiset: str = DANDISET_ARGUMENT,
    file: Path = typer.Argument(
        ..., help="A YAML or JSON file of the dandiset's metadata.", show_default=False
    ),
    no_wait: bool = typer.Option(
        False, "--no-wait", help="Do not wait for the archive's validation."
    ),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Replace the draft's metadata of DANDISET with FILE (YAML or JSON), then print the
    draft's validation status and its errors (schemaKey and schemaVersion are filled in
    when FILE gives none)."""
    from zarrchive.client.api import ApiClient

    def run() -> int:
        metadata = read_metadata(file)
        with ApiClient.from_env(api_url, token, on_retry=say_retry) as client:
            current = client.request("GET", _draft_url(dandiset)).json()
            name = metadata.get("name") or current.get("name")
            if not isinstance(name, str) or not name.strip():
                raise InvalidInput(f"{file}: give the dandiset a name (the `name` field)")
            metadata.setdefault("schemaKey", "Dandiset")
            metadata.setdefault(
                "schemaVersion", client.info().schema_version or DEFAULT_SCHEMA_VERSION
            )
            client.request("PUT", _draft_url(dandiset), json={"metadata": metadata, "name": name})
            if no_wait:
                print(f"dandiset {dandiset}: metadata set; validation under way")
                return 0
            info = _status(client, dandiset, wait=VALIDATION_WAIT)
        return _report(dandiset, info)

    raise typer.Exit(run_client_command("metadata set", run))
