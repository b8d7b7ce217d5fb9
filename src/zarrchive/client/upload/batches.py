"""The calls on a Zarr's upload batches outside the pipeline's own: cancel the open batch,
deal with one an earlier run left open, delete files, wait until the completed batches are
applied (the engine, its pipeline and the S3 import share them)."""

from __future__ import annotations

import time

from zarrchive.client.api import ApiClient, UploadState, ZarrInfo
from zarrchive.client.records import BatchRecords
from zarrchive.client.upload.results import UploadResult
from zarrchive.errors import ApiError, TransferError
from zarrchive.transport import RetryPolicy

#: How long to wait, at the end, for the archive to apply the completed batches.
APPLY_TIMEOUT = 1800.0


def cancel_batch(client: ApiClient, zarr_id: str, retry: RetryPolicy | None = None) -> None:
    """Cancel the Zarr's open batch (and the one opened ahead of it); none open is fine."""
    try:
        client.cancel_upload(zarr_id, retry=retry)
    except ApiError as exc:
        if exc.status_code != 404:  # already closed: fine
            raise


def resolve_stale_batch(
    client: ApiClient, records: BatchRecords, zarr_id: str
) -> tuple[str | None, str]:
    """Deal with the batch found open on the Zarr at the start of an upload: what was done
    (None, ``completed``, ``resumed``: left open for the run's first batch to take up, or
    ``cancelled``) and the message that says it (empty: nothing to say).

    A batch of ours (:class:`BatchRecords` has it) is completed if all its files reached
    S3, else left open; anyone else's is cancelled (one batch per Zarr: a batch nobody
    completes blocks every upload)."""
    message = ""
    outcome: str | None
    if records.get(client.url, zarr_id) is not None:
        try:
            client.complete_upload(zarr_id)
            outcome = "completed"
            message = (
                "completed the upload batch left open by an interrupted earlier run "
                "(all its files had reached S3)"
            )
        except ApiError as exc:
            if exc.status_code == 404:
                outcome = None
            elif exc.status_code == 400:
                # some files never reached S3: leave the batch open, the first batch of
                # this run takes it up if it is the same (files sent, and big files'
                # parts sent, are not sent again), else cancels it
                outcome = "resumed"
                message = (
                    "taking up the upload batch left open by an interrupted earlier run "
                    "(what reached S3 is not sent again)"
                )
            else:
                raise
    else:
        cancel_batch(client, zarr_id)
        outcome = "cancelled"
        message = (
            "cancelled an upload batch that was already open on this Zarr (left by an "
            "interrupted run elsewhere or by another client; only one batch can be open)"
        )
    records.clear(zarr_id)
    return outcome, message


def delete_files(client: ApiClient, zarr_id: str, paths: list[str]) -> None:
    """Delete the Zarr's files *paths*: those already gone (deleted by our own first attempt,
    its answer lost, or by another client meanwhile) are not an error; a batch opened
    meanwhile (our own, interrupted) is cancelled and the deletion tried again once."""
    try:
        client.delete_files(zarr_id, paths)
    except ApiError as exc:
        detail = exc.detail if isinstance(exc.detail, dict) else {}
        missing = detail.get("missing") if exc.status_code in (400, 404) else None
        if isinstance(missing, list) and missing:
            rest = [p for p in paths if p not in set(missing)]
            if rest:
                client.delete_files(zarr_id, rest)
            return
        if exc.status_code == 409:
            cancel_batch(client, zarr_id)
            client.delete_files(zarr_id, paths)
            return
        raise


def wait_at_rest(client: ApiClient, zarr_id: str, result: UploadResult | None = None) -> ZarrInfo:
    """Poll the Zarr until no completed batch of it waits to be applied (the time it took
    is *result*'s ``apply``)."""
    started = time.perf_counter()
    deadline = time.monotonic() + APPLY_TIMEOUT
    pause = 0.02
    while True:
        zarr = client.get_zarr(zarr_id)
        if zarr.upload_state != UploadState.APPLYING:
            if result is not None:
                result.add_time("apply", started)
            return zarr
        if time.monotonic() > deadline:
            raise TransferError(
                f"the archive is still applying the completed batches of Zarr {zarr_id} "
                f"after {APPLY_TIMEOUT:.0f} s (they will be applied): check later with "
                "`zarrchive verify`"
            )
        time.sleep(pause)
        pause = min(pause * 1.5, 0.2)  # the upload ends when this answers: poll briskly


__all__ = ["APPLY_TIMEOUT", "cancel_batch", "delete_files", "resolve_stale_batch", "wait_at_rest"]
