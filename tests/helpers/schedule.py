"""The order test modules start in under pytest-xdist: the longest first.

``make test`` runs each module whole in one worker (``--dist loadfile``), and a worker takes
the next module when it is nearly done with its own.  Without an order, a long module that
starts last (pytest-xdist's default puts modules with few tests last, however long they are)
keeps one worker busy for minutes after the other ran out of work.  Starting the longest
modules first (longest-processing-time-first scheduling) leaves only short ones for the end.

:data:`MODULE_SECONDS` are the modules' measured times in one ``make test`` (per module, the
sum of its tests' times from ``--junitxml``; 2 cores under load, so read them as weights, not
as times).  A module missing from the table weighs nothing and keeps its collection order
after the weighed ones; refresh the table when a module becomes one of the long ones.
"""

from __future__ import annotations

import pytest

#: test module -> seconds it took in one run (weights; see the module's docstring)
MODULE_SECONDS: dict[str, int] = {
    "tests/dandi/test_dandi_blobs.py": 266,
    "tests/api/test_dandi_zarr_upload.py": 180,
    "tests/cli/test_review_serve_stop.py": 163,
    "tests/multiprocess/test_multiprocess.py": 140,
    "tests/services/test_manifest_records.py": 139,
    # measured in another run (added after the table was made)
    "tests/api/test_directory_delete.py": 60,
    "tests/client/test_patch_upload.py": 40,
    "tests/web/test_pages.py": 131,
    "tests/api/test_zarr_multipart.py": 125,
    "tests/cli/test_serve_and_admin.py": 125,
    "tests/api/test_manifest_jobs.py": 124,
    "tests/reliability/test_authorization.py": 120,
    "tests/client/test_resume.py": 113,
    "tests/api/test_blobs.py": 106,
    "tests/readme/test_readme.py": 105,
    "tests/dandi/test_dandi_zarr.py": 105,
    "tests/lindi/test_archive.py": 104,
    "tests/scale/test_scale_bench.py": 102,
    "tests/api/test_snapshots.py": 94,
    "tests/api/test_metadata_validation.py": 93,
    "tests/api/test_upload_pipeline.py": 92,
    "tests/api/test_assets.py": 90,
    "tests/api/test_embargo.py": 90,
    "tests/api/test_request_guard.py": 89,
    "tests/services/test_unreferenced_zarr_gc.py": 89,
    "tests/services/test_manifests.py": 86,
    "tests/api/test_dandiset_owners.py": 83,
    "tests/reliability/test_crashes.py": 80,
    "tests/api/test_publish.py": 79,
    "tests/api/test_dandi_zarr_listing.py": 75,
    "tests/multiprocess/test_manifest_after_overlap.py": 70,
    "tests/reliability/test_review_event_loop.py": 69,
    "tests/api/test_audit_trail.py": 68,
    "tests/client/test_upload.py": 67,
    "tests/web/test_browser.py": 65,
    "tests/reliability/test_fuzz.py": 64,
    "tests/web/test_ome_zarr.py": 63,
    "tests/api/test_dandiset_search.py": 62,
    "tests/api/test_upload_integrity.py": 60,
    "tests/api/test_reference_files.py": 59,
    "tests/services/test_embargo.py": 58,
    "tests/reliability/test_review_bombs.py": 58,
    "tests/client/test_download.py": 57,
    "tests/api/test_zarr_api.py": 56,
    "tests/client/test_snapshots.py": 55,
    "tests/client/test_upload_pipeline.py": 53,
    "tests/reliability/test_faults.py": 52,
    "tests/reliability/test_review_embargo.py": 50,
    "tests/dandi/test_dandi_publish_valid.py": 50,
    "tests/client/test_newcomer_client.py": 49,
    "tests/jobs/test_jobs_rerun.py": 47,
    "tests/client/test_embargo.py": 43,
    "tests/api/test_dandisets.py": 42,
    "tests/api/test_public_bucket_s3fs.py": 41,
    "tests/reliability/test_bad_input.py": 41,
    "tests/api/test_listing_cache.py": 41,
    "tests/storage/test_seaweedfs.py": 40,
    "tests/api/test_search_at_scale.py": 39,
    "tests/client/test_store.py": 38,
    "tests/jobs/test_jobs_redis.py": 37,
    "tests/cli/test_publish_cli.py": 36,
    "tests/storage/test_s3_conformance.py": 36,
}


def module_of(item: pytest.Item) -> str:
    """The test module of *item*, as a path relative to the repository (``tests/...py``)."""
    return item.nodeid.split("::", 1)[0]


def longest_modules_first(items: list[pytest.Item]) -> None:
    """Reorder *items* in place: modules by weight, heaviest first; a module's own tests
    (and the modules without a weight) keep their collection order."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(module_of(item), index)

    def key(indexed: tuple[int, pytest.Item]) -> tuple[int, int, int]:
        index, item = indexed
        module = module_of(item)
        return (-MODULE_SECONDS.get(module, 0), first_seen[module], index)

    items[:] = [item for _index, item in sorted(enumerate(items), key=key)]
