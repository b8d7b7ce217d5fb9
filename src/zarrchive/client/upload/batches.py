"""The calls on a Zarr's upload batches that the engine, its pipeline and the S3 import
share: cancel the open batch, wait until the completed ones are applied."""

from __future__ import annotations

import time

from zarrchive.client.api import ApiClient, UploadState, ZarrInfo
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


__all__ = ["APPLY_TIMEOUT", "cancel_batch", "wait_at_rest"]
