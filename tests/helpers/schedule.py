"""The order test modules start in under pytest-xdist: the longest first.

``make test`` runs each module whole in one worker (``--dist loadfile``), and a worker takes
the next module when it is nearly done with its own.  Without an order, a long module that
starts last (pytest-xdist's default puts modules with few tests last, however long they are)
keeps one worker busy for minutes after the other ran out of work.  Starting the longest
modules first (longest-processing-time-first scheduling) leaves only short ones for the end.

:data:`MODULE_SECONDS` are the modules' measured times in one ``make test`` (per module, the
sum of its tests' times from ``--junitxml``, 3 workers on 2 idle cores, 2026-11-29 17:32 UTC,
after test archives got cheaper (tests/helpers/setup_costs.py): read them as weights;
modules under 8 s are left out).
A module missing from the table weighs nothing and keeps its collection order after the
weighed ones; refresh the table when a module becomes one of the long ones.
"""

from __future__ import annotations

import pytest

#: test module -> seconds it took in one run (weights; see the module's docstring)
MODULE_SECONDS: dict[str, int] = {
    "tests/client/test_upload_pipeline.py": 40,
    "tests/client/test_patch_upload.py": 40,
    "tests/reliability/test_fuzz.py": 33,
    "tests/reliability/test_bad_input.py": 33,
    "tests/client/test_upload.py": 32,
    "tests/jobs/test_jobs_rerun.py": 29,
    "tests/client/test_resume.py": 29,
    "tests/reliability/test_authorization.py": 28,
    "tests/scale/test_scale_bench.py": 27,
    "tests/dandi/test_dandi_blobs.py": 27,
    "tests/cli/test_review_serve_stop.py": 27,
    "tests/client/test_download_bench.py": 26,
    "tests/api/test_directory_delete.py": 26,
    "tests/reliability/test_crashes.py": 26,
    "tests/services/test_version_gc_histories.py": 25,
    "tests/reliability/test_review_event_loop.py": 24,
    "tests/api/test_manifest_jobs.py": 23,
    "tests/multiprocess/test_multiprocess.py": 23,
    "tests/web/test_pages.py": 23,
    "tests/api/test_verify_on_apply.py": 23,
    "tests/cli/test_serve_and_admin.py": 23,
    "tests/web/test_oidc_browser.py": 22,
    "tests/services/test_manifest_records.py": 22,
    "tests/services/test_fsck_flat_listing.py": 22,
    "tests/reliability/test_review_embargo.py": 22,
    "tests/client/test_multipart_ctrl_c.py": 21,
    "tests/reliability/test_review_listing_cost.py": 21,
    "tests/reliability/test_review_embedded_s3.py": 20,
    "tests/dandi/test_dandi_accounts.py": 20,
    "tests/client/test_s3_import.py": 19,
    "tests/api/test_snapshots.py": 19,
    "tests/dandi/test_dandi_zarr.py": 19,
    "tests/services/test_manifests.py": 18,
    "tests/readme/test_readme.py": 18,
    "tests/api/test_embargo.py": 18,
    "tests/lindi/test_archive.py": 18,
    "tests/api/test_request_guard.py": 17,
    "tests/reliability/test_faults.py": 17,
    "tests/web/test_browser.py": 17,
    "tests/services/test_embargo_end.py": 16,
    "tests/reliability/test_hostile_hdf5.py": 16,
    "tests/client/test_download.py": 15,
    "tests/jobs/test_jobs_redis.py": 15,
    "tests/client/test_embargo.py": 14,
    "tests/services/test_dois.py": 14,
    "tests/client/test_download_ranges.py": 14,
    "tests/storage/test_s3_conformance.py": 13,
    "tests/client/test_snapshots.py": 13,
    "tests/api/test_dandi_zarr_upload.py": 12,
    "tests/api/test_upload_pipeline.py": 12,
    "tests/api/test_big_object_checksum.py": 12,
    "tests/dandi/test_dandi_shared_zarr.py": 11,
    "tests/client/test_local_tree.py": 11,
    "tests/web/test_ome_zarr.py": 11,
    "tests/api/test_next_batch.py": 11,
    "tests/api/test_listing_cache.py": 11,
    "tests/dandi/test_dandi_publish_valid.py": 11,
    "tests/client/test_download_checksum.py": 11,
    "tests/client/test_retry_http.py": 10,
    "tests/services/test_recorded_listing_index.py": 10,
    "tests/storage/test_seaweedfs.py": 10,
    "tests/reliability/test_review_slow_clients.py": 9,
    "tests/checksum/test_checksum_properties.py": 9,
    "tests/client/test_store.py": 9,
    "tests/api/test_accounts.py": 9,
    "tests/client/test_rm_cli.py": 8,
    "tests/api/test_upload_flow.py": 8,
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
