"""``zarrchive lindi``: HDF5/NWB <-> LINDI commands."""

from __future__ import annotations

import sys
from typing import Any

import typer

from zarrchive.cli._common import one_line_errors

app = typer.Typer(help="LINDI: HDF5/NWB files as Zarr.", no_args_is_help=True)

_one_line_errors = one_line_errors("zarrchive lindi")


@app.command("convert")
@_one_line_errors
def convert(
    source: str = typer.Argument(..., help="The HDF5/NWB file: a local path or an http(s) URL."),
    output: str = typer.Argument(..., help="The LINDI file to write (name ends with .lindi.json)."),
    external_array_link_threshold: int = typer.Option(
        1000,
        "--external-array-link-threshold",
        help="Chunked datasets with more chunks than this become external array links (-1: never).",
    ),
    url: str | None = typer.Option(
        None, "--url", help="The location to write into references (default: SOURCE)."
    ),
) -> None:
    """Convert an HDF5/NWB file to a .lindi.json reference file system."""
    from zarrchive.lindi import ConvertOptions, convert_to_lindi_json
    from zarrchive.version import package_version

    threshold = None if external_array_link_threshold < 0 else external_array_link_threshold
    path = convert_to_lindi_json(
        source,
        output,
        options=ConvertOptions(external_array_link_threshold=threshold),
        url=url,
        generation_metadata={
            "generatedBy": "zarrchive",
            "generatedByVersion": package_version(),
            "source": source,
            "externalArrayLinkThreshold": threshold,
        },
    )
    print(path)


@app.command("backfill")
@_one_line_errors
def backfill(
    assets: list[str] = typer.Argument(None, help="Asset ids (or give --all)."),
    all_assets: bool = typer.Option(
        False, "--all", help="Every blob of every asset that has no LINDI file yet."
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Write the LINDI files of existing HDF5/NWB blobs (of the archive of `zarrchive serve`,
    as `zarrchive admin` finds it).  With --all, blobs whose file is written, failed or
    not HDF5 are left as they are; named ASSETs are converted again if their file failed.
    Prints one line per blob: its id, then ready, failed: reason, or not-hdf5."""
    from zarrchive.cli._common import fail, make_progress, open_archive
    from zarrchive.services.dandi import lindi_files

    if bool(assets) == all_assets:
        raise fail("give asset ids, or --all (not both)")
    counts: dict[str, int] = {}
    with open_archive() as archive:
        blob_ids = lindi_files.blobs_of(archive, None if all_assets else list(assets))
        sizes = lindi_files.blob_sizes(archive, blob_ids)
        with make_progress(quiet) as progress:
            progress.start("converting", files=len(blob_ids), nbytes=sum(sizes.values()))
            for blob_id in blob_ids:
                status = lindi_files.convert_blob(archive, blob_id, force=not all_assets)
                text = "gone" if status is None else status.text
                counts[text.partition(":")[0]] = counts.get(text.partition(":")[0], 0) + 1
                print(f"{blob_id}\t{text}")
                progress.advance(files=1, nbytes=sizes.get(blob_id, 0))
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items())) or "nothing"
    print(f"{len(blob_ids)} blobs: {summary}", file=sys.stderr)
    if counts.get("failed"):
        raise typer.Exit(1)


@app.command("to-zarr")
@_one_line_errors
def to_zarr(
    source: str = typer.Argument(
        ..., help="The HDF5/NWB file, or a .lindi.json file (local path or http(s) URL)."
    ),
    out_dir: str = typer.Argument(..., help="The Zarr directory to create (new or empty)."),
) -> None:
    """Write a self-contained LINDI Zarr directory (chunk bytes copied) from HDF5 or .lindi.json."""
    from zarrchive.lindi import convert_to_zarr, load_lindi_json, write_zarr_directory

    if source.endswith(".lindi.json"):
        print(write_zarr_directory(load_lindi_json(source), out_dir, base=source))
    else:
        print(convert_to_zarr(source, out_dir))


@app.command("show")
@_one_line_errors
def show(
    source: str = typer.Argument(
        ..., help="A .lindi.json file or URL, a LINDI Zarr directory, or an HDF5 file."
    ),
) -> None:
    """Print the tree of a LINDI file: groups, datasets with shapes and dtypes, annotations."""
    from zarrchive.lindi import File

    with File(source) as f:
        for line in tree_lines(f):
            print(line)


def tree_lines(f: Any) -> list[str]:
    """The lines of ``zarrchive lindi show`` for an open :class:`zarrchive.lindi.File`."""
    import zarrchive.lindi.annotations as ann

    lines = ["/"]

    def walk(group: Any, depth: int) -> None:
        source = f.source
        for name in source.children(group._path):
            path = f"{group._path}/{name}" if group._path else name
            indent = "  " * depth
            raw = f.raw_attrs(path)
            link = ann.soft_link_path(raw) if source.kind(path) == "group" else None
            if link is not None:
                lines.append(f"{indent}{name} -> {link}  [_SOFT_LINK]")
                continue
            node = f.node(path)
            notes = [k for k in sorted(raw) if k in ann.SPECIAL_KEYS]
            if ann.EXTERNAL_ARRAY_LINK in raw:
                url, target = ann.parse_external_array_link(raw[ann.EXTERNAL_ARRAY_LINK])
                notes = [n for n in notes if n != ann.EXTERNAL_ARRAY_LINK]
                notes.append(f"{ann.EXTERNAL_ARRAY_LINK} {url}:{target}")
            suffix = f"  [{', '.join(notes)}]" if notes else ""
            if source.kind(path) == "group":
                lines.append(f"{indent}{name}/{suffix}")
                walk(node, depth + 1)
            else:
                shape = "scalar" if node.shape == () else "x".join(str(s) for s in node.shape)
                if node.shape != () and len(node.shape) == 1:
                    shape = f"({node.shape[0]},)"
                elif node.shape != ():
                    shape = str(tuple(node.shape))
                lines.append(f"{indent}{name}  {shape}  {_dtype_text(node)}{suffix}")

    walk(f, 1)
    return lines


def _dtype_text(ds: Any) -> str:
    import h5py

    dtype = ds.dtype
    if dtype.names is not None:
        return "compound(" + ", ".join(dtype.names) + ")"
    if h5py.check_dtype(ref=dtype) is not None:
        return "reference"
    if h5py.check_dtype(vlen=dtype) is not None:
        return "string"
    return str(dtype)
