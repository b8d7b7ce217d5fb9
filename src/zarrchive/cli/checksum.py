"""``zarrchive checksum``: the Dandi Zarr checksum of a local directory.

Prints only the checksum on stdout (or, with ``--json``, the checksum and every
directory's digest); a progress display goes to stderr when it is a terminal.
Errors are one line on stderr and exit code 2.

The md5s of unchanged files come from the digest cache
(:mod:`zarrchive.client.local.digest_cache`) unless ``--no-cache``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from operator import attrgetter
from pathlib import Path

import typer

from zarrchive.client.local import (
    ProgressCallback,
    default_jobs,
    local_checksum,
    local_directory_digests,
)
from zarrchive.errors import ZarrchiveError

NO_CACHE_OPTION = typer.Option(
    False,
    "--no-cache",
    help="Read and hash every file: do not use (or fill) the digest cache of unchanged files "
    "(or set ZARRCHIVE_NO_CACHE=1).",
)


def checksum(
    path: Path = typer.Argument(..., help="The Zarr directory.", show_default=False),
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        help=f"Files hashed in parallel (default: {default_jobs()} on this machine).",
        show_default=False,
    ),
    as_json: bool = typer.Option(
        False,
        "--json",
        help='Print {"checksum": ..., "directories": {path: digest}} (root: "").',
    ),
    no_cache: bool = NO_CACHE_OPTION,
) -> None:
    """Compute the Dandi Zarr checksum of a local directory."""
    from zarrchive.client.local.digest_cache import default_cache, disable_default_cache

    if no_cache:
        disable_default_cache()
    try:
        with _progress() as progress:
            cache = default_cache()
            if as_json:
                digests = local_directory_digests(path, jobs=jobs, progress=progress, cache=cache)
                document = {
                    "checksum": digests[-1].digest,
                    "directories": {d.path: d.digest for d in sorted(digests, key=_path_of)},
                }
                output = json.dumps(document, indent=2)
            else:
                output = local_checksum(path, jobs=jobs, progress=progress, cache=cache)
    except ZarrchiveError as exc:
        print(f"zarrchive checksum: {exc.message}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        print("zarrchive checksum: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    print(output)


_path_of = attrgetter("path")


@contextmanager
def _progress() -> Iterator[ProgressCallback | None]:
    """A progress callback drawing on stderr if it is a terminal, else ``None``."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        DownloadColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    display = Progress(
        SpinnerColumn(),
        TextColumn("hashing: {task.fields[files]:,} files"),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = display.add_task("hashing", total=None, files=0)

    def update(files: int, size: int) -> None:
        display.update(task, completed=size, files=files)

    callback: Callable[[int, int], None] = update
    with display:
        yield callback
