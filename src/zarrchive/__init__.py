"""zarrchive: an open-source data archive for Zarr datasets.

The curated public surface:

- :func:`open_store`: a read-only zarr-python 3 store of a Zarr in the archive;
- :mod:`zarrchive.checksum`: the Dandi Zarr tree hash (pure);
- :mod:`zarrchive.paths`: Zarr entry path validation (pure);
- :mod:`zarrchive.errors`: the one exception tree;
- :mod:`zarrchive.client`: the API client and sync engine;
- :mod:`zarrchive.manifest`: Zarr manifest files (pure);
- :mod:`zarrchive.lindi`: HDF5/NWB as LINDI Zarr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zarrchive.client import open_store

    __version__: str


def __getattr__(name: str) -> Any:
    # Looked up or imported on first use: `import zarrchive` stays light for the server and
    # the CLI (importlib.metadata alone costs tens of milliseconds).
    if name == "__version__":
        from zarrchive.version import package_version

        value = package_version()
        globals()["__version__"] = value
        return value
    if name == "open_store":
        from zarrchive.client import open_store

        return open_store
    raise AttributeError(f"module 'zarrchive' has no attribute {name!r}")


__all__ = ["__version__", "open_store"]
