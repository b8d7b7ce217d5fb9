"""``zarrchive publish DANDISET``: publish a dandiset's draft, after saying what happens.

In the archive's ``freeze`` mode (the spec; ``GET /api/info/`` tells), publishing makes
every Zarr of the draft immutable for good (no upload, no deletion: the published version
references the Zarr, it is not copied): the command lists those Zarrs in red.  In
``snapshot`` mode the version pins each Zarr's current state (checksum and manifest) and
the draft's Zarrs stay writable: the command lists the states it pins.  Either way it asks
for confirmation; ``--yes`` skips the question, and without a terminal it refuses unless
``--yes`` is given.

Plain httpx, on purpose: two requests, kept local to the command.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import typer

from zarrchive.cli._common import API_URL_OPTION, TOKEN_OPTION, human_size

if TYPE_CHECKING:  # imported when used: `zarrchive --help` stays quick
    import httpx
    from rich.console import Console


class _Failure(Exception):
    """One line for stderr, then exit 2."""


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = None
    if isinstance(detail, dict):
        detail = detail.get("message")
    return f"{response.status_code}: {detail or response.reason_phrase}"


def _request(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Any:
    import httpx

    try:
        response = client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise _Failure(f"cannot reach the archive at {client.base_url}: {exc}") from exc
    if response.status_code >= 400:
        raise _Failure(f"{method} {url} failed: {_detail(response)}")
    return response.json()


def _draft_zarrs(client: httpx.Client, dandiset: str) -> list[dict[str, Any]]:
    """The Zarr assets of the draft (every page)."""
    url = f"/api/dandisets/{dandiset}/versions/draft/assets/"
    found: list[dict[str, Any]] = []
    number = 1
    while True:
        params: dict[str, Any] = {"page_size": 1000, "page": number, "metadata": "true"}
        page = _request(client, "GET", url, params=params)
        found += [a for a in page["results"] if a.get("zarr_id")]
        if not page.get("next"):
            return found
        number += 1


def _mode(client: httpx.Client) -> str:
    """The archive's ``published_zarrs`` mode (``freeze`` for archives that do not say)."""
    info = _request(client, "GET", "/api/info/")
    return str(info.get("published_zarrs") or "freeze")


def _warn(console: Console, dandiset: str, zarrs: list[dict[str, Any]], mode: str) -> None:
    from rich.table import Table

    if not zarrs:
        console.print(f"[bold]Dandiset {dandiset}: the draft has no Zarr assets.[/bold]")
        return
    if mode == "snapshot":
        console.print(
            f"[bold]Publishing dandiset {dandiset} pins the current state of {len(zarrs)} "
            "Zarr(s) (checksum and manifest): the version will always read exactly these "
            "files.[/bold]\nThe draft's Zarrs stay writable: later uploads and deletions "
            "change the draft only."
        )
        style, header = "cyan", "bold cyan"
    else:
        console.print(
            f"[bold red]WARNING: publishing dandiset {dandiset} makes {len(zarrs)} Zarr(s) "
            "IMMUTABLE, for good.[/bold red]\n"
            "[red]No upload and no deletion will ever be accepted for them again; "
            "new data will need new Zarrs.[/red]"
        )
        style, header = "red", "bold red"
    table = Table(border_style=style, header_style=header)
    for column in ("path", "zarr_id", "checksum", "size"):
        table.add_column(column)
    for asset in zarrs:
        metadata = asset.get("metadata", {})
        checksum = (metadata.get("digest") or {}).get("dandi:dandi-zarr-checksum", "")
        table.add_row(
            asset["path"], asset["zarr_id"], checksum, human_size(int(asset.get("size", 0)))
        )
    console.print(table)


def publish(
    dandiset: str = typer.Argument(..., help="The dandiset's identifier (six digits)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Publish without asking."),
    api_url: str | None = API_URL_OPTION,
    token: str | None = TOKEN_OPTION,
) -> None:
    """Publish the draft of DANDISET (you are asked first): its Zarrs become immutable, or
    in an archive in snapshot mode their current states are pinned."""
    import httpx
    from rich.console import Console
    from rich.prompt import Confirm

    from zarrchive.client.address import archive_root
    from zarrchive.errors import InvalidInput

    try:
        if not api_url:
            raise _Failure("no archive URL: pass --api-url or set ZARRCHIVE_URL")
        if not token:
            raise _Failure("publishing needs an API token: pass --token or set ZARRCHIVE_TOKEN")
        headers = {"Authorization": f"token {token}"}
        try:
            base_url = archive_root(api_url)
        except InvalidInput as exc:
            raise _Failure(exc.message) from None
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
            zarrs = _draft_zarrs(client, dandiset)
            mode = _mode(client)
            if not yes:
                if not sys.stdin.isatty():
                    what = (
                        "would have their state pinned"
                        if mode == "snapshot"
                        else "would become immutable"
                    )
                    raise _Failure(
                        f"not publishing dandiset {dandiset}: {len(zarrs)} Zarr(s) {what} "
                        "and stdin is not a terminal to confirm; rerun with --yes"
                    )
                console = Console(stderr=True)
                _warn(console, dandiset, zarrs, mode)
                if not Confirm.ask(
                    f"Publish dandiset {dandiset} now?", default=False, console=console
                ):
                    print("zarrchive publish: not published", file=sys.stderr)
                    raise typer.Exit(1)
            else:
                _warn(Console(stderr=True), dandiset, zarrs, mode)
            version = _request(client, "POST", f"/api/dandisets/{dandiset}/versions/draft/publish/")
    except _Failure as exc:
        print(f"zarrchive publish: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None
    print(f"published dandiset {dandiset} as version {version['version']}")
