"""The installed zarrchive's version, looked up once on first use.

A module of its own (not ``zarrchive.__version__``) so that what needs the version imports
this leaf, never the package's ``__init__`` (which imports the client lazily): no import
cycle runs through the package root.
"""

from __future__ import annotations

from functools import cache


@cache
def package_version() -> str:
    """The version of the installed ``zarrchive`` distribution ("0.0.0" in a bare source
    tree)."""
    # looked up on first use: importlib.metadata alone costs tens of milliseconds
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("zarrchive")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"
