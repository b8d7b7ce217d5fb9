"""Job lanes: background work split so that a Zarr's own jobs never wait behind content work.

Each lane has its own consumers: threads of their own in-process
(:class:`~zarrchive.jobs.InProcessJobQueue`), an RQ queue of its own on Redis
(:class:`~zarrchive.jobs.RedisJobQueue`, consumed by ``zarrchive worker --queue LANE``).
A conversion or validation that takes minutes (a hostile NWB file: thousands of groups and
references) then holds only the content lane; a Zarr's batches are still applied, its
manifest written and a dandiset unembargoed at once.

- :attr:`JobLane.ZARR` (the default): short work on the archive's own state: applying a
  Zarr's batches, its manifests, unembargo moves.
- :attr:`JobLane.CONTENT`: work that reads or decodes what an uploader sent: LINDI
  conversions, metadata and asset validations, hashing blobs.
"""

from __future__ import annotations

from enum import StrEnum


class JobLane(StrEnum):
    """Which consumers run a job (see the module's description)."""

    ZARR = "zarr"
    CONTENT = "content"

    def queue_name(self, base: str) -> str:
        """The RQ queue of this lane for the archive's queue name *base*
        (``ZARRCHIVE_REDIS_QUEUE``): *base* itself for :attr:`ZARR` (the queue of old),
        ``{base}-content`` for :attr:`CONTENT`."""
        return base if self is JobLane.ZARR else f"{base}-{self.value}"


def lane_for_name(name: str, base: str) -> JobLane | None:
    """The lane named *name*: its lane name (``zarr``, ``content``) or its RQ queue name
    under *base* (a lane name first); None if it names none."""
    if name in {lane.value for lane in JobLane}:
        return JobLane(name)
    return next((lane for lane in JobLane if lane.queue_name(base) == name), None)
