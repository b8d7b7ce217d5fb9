"""The OME-Zarr oracle: ome-zarr-py writing a real multiscale image, run in its own
environment (``.venv-ome``, built by the Makefile from ``requirements/ome.lock``); and
reading a page's tables back as cells.

The image: axes ``c, y, x`` (channel; micrometre spaces), ``IMAGE_SHAPE`` at full resolution,
levels down-sampled by 2 and 4 (ome-zarr-py's own pyramid), written as NGFF 0.4 (Zarr v2,
``.zattrs``) or 0.5 (Zarr v3, ``zarr.json`` under ``ome``).
"""

from __future__ import annotations

import html.parser
import subprocess
import textwrap
from pathlib import Path

from tests.helpers.oracle_env import oracle_python

OME_PYTHON_ENV = "ZARRCHIVE_OME_PYTHON"
#: Channels, rows, columns of the full-resolution level.
IMAGE_SHAPE = (3, 64, 96)
#: Micrometres per pixel along y and x at full resolution.
PIXEL_SIZE = {"y": 0.5, "x": 0.25}

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import zarr
    from ome_zarr.format import FormatV04, FormatV05
    from ome_zarr.io import parse_url
    from ome_zarr.writer import write_image

    root, version, c, y, x = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    fmt = FormatV04() if version == "0.4" else FormatV05()
    rows, cols = np.indices((y, x))
    data = np.stack([(rows * (k + 1) + cols * 3 + 7 * k) % 4096 for k in range(c)])
    store = parse_url(root, mode="w", fmt=fmt).store
    group = zarr.group(store=store, zarr_format=2 if version == "0.4" else 3)
    write_image(
        data.astype(np.uint16),
        group,
        fmt=fmt,
        axes="cyx",
        scale_factors=[2, 4],
        scale={"y": float(sys.argv[6]), "x": float(sys.argv[7])},
        axes_units={"y": "micrometer", "x": "micrometer"},
        name="cells",
    )
    """
)


def ome_python() -> str:
    """The Python of the ome-zarr-py environment; skips the test without it."""
    return oracle_python(
        OME_PYTHON_ENV, ".venv-ome", ".venv-ome with ome-zarr-py, to write real OME-Zarr images"
    )


def write_ome_zarr(python: str, where: Path, version: str) -> Path:
    """Write the image as NGFF *version* (``0.4`` or ``0.5``) below *where*; its root."""
    where = where.resolve()
    script = where / "write_ome_zarr.py"
    script.write_text(SCRIPT)
    root = where / f"image-{version}.ome.zarr"
    done = subprocess.run(
        [
            python,
            str(script),
            str(root),
            version,
            *map(str, IMAGE_SHAPE),
            str(PIXEL_SIZE["y"]),
            str(PIXEL_SIZE["x"]),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=where,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return root


class _Tables(html.parser.HTMLParser):
    """The text of each cell of each row of the ``<table id=...>`` asked for."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id = table_id
        self.inside = False
        self.rows: list[list[str]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("id", self.table_id) in attrs:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell.append(data)


def table_rows(page: str, table_id: str) -> list[list[str]]:
    """The rows of the page's table *table_id* (its header row first), each a list of the
    cells' text with white space collapsed."""
    parser = _Tables(table_id)
    parser.feed(page)
    return parser.rows
