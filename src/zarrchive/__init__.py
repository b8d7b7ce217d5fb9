"""zarrchive: an open-source data archive for Zarr datasets.

The curated public surface:

- :mod:`zarrchive.checksum`: the Dandi Zarr tree hash (pure);
- :mod:`zarrchive.paths`: Zarr entry path validation (pure);
- :mod:`zarrchive.errors`: the one exception tree;
- :mod:`zarrchive.client`: the API client and sync engine;
- :mod:`zarrchive.lindi`: HDF5/NWB as LINDI Zarr.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("zarrchive")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = ["__version__"]
