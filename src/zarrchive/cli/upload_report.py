"""What ``zarrchive upload`` reports, of a local directory or of an S3 source
(:mod:`zarrchive.cli.upload`, :mod:`zarrchive.cli.s3_upload`): the summary line (for a dry
run, the first paths) and what an interrupted upload left open."""

from __future__ import annotations

from typing import TYPE_CHECKING

from zarrchive.cli._common import human_size

if TYPE_CHECKING:
    from zarrchive.client.upload import LeftOpen, UploadResult


def summary(result: UploadResult, seconds: float | None = None) -> str:
    """The command's report on stdout: one line, and for a dry run the first paths."""
    if result.dry_run:
        if result.patch:
            line = (
                f"dry run (--patch): would upload {result.planned_uploads} files "
                f"({human_size(result.planned_upload_bytes)}; {result.new} new), delete none, "
                f"skip {result.skipped} unchanged (of {result.local_files} selected local "
                f"files); Zarr {result.zarr_id or '(new: ' + result.name + ')'}"
            )
        else:
            line = (
                f"dry run: would upload {result.planned_uploads} files "
                f"({human_size(result.planned_upload_bytes)}), delete "
                f"{result.planned_deletes} ({human_size(result.planned_delete_bytes)}), skip "
                f"{result.skipped} (of {result.local_files} local files); Zarr "
                f"{result.zarr_id or '(new: ' + result.name + ')'}"
            )
        lines = [line]
        lines += _paths("upload", result.planned_upload_paths, result.planned_uploads)
        lines += _paths("delete", result.planned_delete_paths, result.planned_deletes)
        if result.patch and result.expected_checksum:
            lines.append(
                f"the Zarr's checksum would become {result.expected_checksum} (from "
                f"{result.base_checksum} now)"
            )
        return "\n".join(lines)
    rate = ""
    if seconds and result.uploaded_bytes:
        rate = f" at {human_size(int(result.uploaded_bytes / seconds))}/s"
    if result.patch:
        said = ""
        if result.ok:
            said = (
                " (the one predicted: the Zarr as read before the patch, checksum "
                f"{result.base_checksum}, plus the patch's files, so nothing else in it changed "
                "meanwhile; a local checksum of the Zarr would need its whole tree here)"
            )
        return (
            f"Zarr {result.zarr_id}: uploaded {result.uploaded} files "
            f"({human_size(result.uploaded_bytes)}{rate}; {result.new} new), deleted none "
            f"(--patch), skipped {result.skipped} unchanged (of {result.local_files} selected "
            f"local files); checksum {result.remote_checksum}{said}"
        )
    return (
        f"Zarr {result.zarr_id}: uploaded {result.uploaded} files "
        f"({human_size(result.uploaded_bytes)}{rate}), deleted {result.deleted}, skipped "
        f"{result.skipped}; checksum {result.remote_checksum}"
        + (" (matches the local one)" if result.ok else "")
    )


def left_open_note(left: LeftOpen, command: str) -> str:
    """What an interrupted upload says it left: the batch open, what S3 holds of it, how to
    resume or cancel it (*command*: the same command, to run again)."""
    held = f"S3 holds {left.files_in_s3} of its {left.files} files whole"
    if left.big_files:
        held += f" and {left.parts_in_s3} parts of its {left.big_files} big files"
    return (
        f"left the upload batch open on Zarr {left.zarr_id} ({held}): run the same command "
        "again to resume it (what S3 holds is not sent again), or cancel it with "
        f"`{command} --cancel` (what it sent is dropped)"
    )


def _paths(verb: str, shown: list[tuple[str, int]], total: int) -> list[str]:
    lines = [f"  {verb} {path} ({human_size(size)})" for path, size in shown]
    if total > len(shown):
        lines.append(f"  ... and {total - len(shown)} more to {verb}")
    return lines


__all__ = ["left_open_note", "summary"]
