"""The order test modules start in under pytest-xdist: the longest first.

``make test`` runs each module whole in one worker (``--dist loadfile``), and a worker takes
the next module when it is nearly done with its own.  Without an order, a long module that
starts last (pytest-xdist's default puts modules with few tests last, however long they are)
keeps one worker busy for minutes after the other ran out of work.  Starting the longest
modules first (longest-processing-time-first scheduling) leaves only short ones for the end.

:data:`MODULE_SECONDS` are the modules' measured times in one ``make test`` (per module, the
sum of its tests' times from ``--junitxml``, 3 workers on 2 idle cores, 2026-11-29: read
them as weights; modules under 8 s are left out).  Refreshed 2026-11-29 (evening): from that
run's junit, but for the modules changed since on their own (tests/client/test_upload_pipeline.py,
tests/reliability/test_faults.py: measured alone, ``-n 0``).  Test archives cost less since
(tests/helpers/setup_costs.py: about 40-65 % off the modules that make one per test), which
shortens most modules alike and leaves their order about as it was.
A module missing from the table weighs nothing and keeps its collection order after the
weighed ones; refresh the table when a module becomes one of the long ones.
"""

from __future__ import annotations

import pytest

#: test module -> seconds it took in one run (weights; see the module's docstring)
MODULE_SECONDS: dict[str, int] = {
    "tests/reliability/test_authorization.py": 80,
    "tests/api/test_verify_on_apply.py": 71,
    "tests/reliability/test_review_embargo.py": 64,
    "tests/services/test_dois.py": 46,
    "tests/api/test_trash.py": 41,
    "tests/services/test_manifest_records.py": 41,
    "tests/api/test_snapshots.py": 39,
    "tests/client/test_upload_pipeline.py": 38,
    "tests/client/test_patch_upload.py": 37,
    "tests/services/test_manifests.py": 37,
    "tests/api/test_manifest_jobs.py": 36,
    "tests/api/test_request_guard.py": 36,
    "tests/client/test_upload.py": 36,
    "tests/services/test_version_gc_histories.py": 36,
    "tests/api/test_embargo.py": 35,
    "tests/api/test_upload_pipeline.py": 35,
    "tests/reliability/test_fuzz.py": 35,
    "tests/lindi/test_archive.py": 34,
    "tests/reliability/test_review_listing_cost.py": 34,
    "tests/web/test_pages.py": 34,
    "tests/multiprocess/test_multiprocess.py": 33,
    "tests/reliability/test_crashes.py": 33,
    "tests/api/test_directory_delete.py": 32,
    "tests/api/test_next_batch.py": 32,
    "tests/api/test_publish.py": 32,
    "tests/api/test_zarr_api.py": 31,
    "tests/dandi/test_dandi_blobs.py": 31,
    "tests/jobs/test_jobs_rerun.py": 31,
    "tests/reliability/test_bad_input.py": 31,
    "tests/services/test_fsck_flat_listing.py": 31,
    "tests/client/test_s3_import.py": 30,
    "tests/storage/test_s3_conformance.py": 30,
    "tests/web/test_oidc_browser.py": 29,
    "tests/client/test_resume.py": 28,
    "tests/api/test_blobs.py": 27,
    "tests/client/test_download_bench.py": 27,
    "tests/api/test_zarr_multipart.py": 26,
    "tests/cli/test_review_serve_stop.py": 26,
    "tests/api/test_upload_integrity.py": 25,
    "tests/client/test_multipart_ctrl_c.py": 25,
    "tests/scale/test_scale_bench.py": 25,
    "tests/client/test_snapshots.py": 24,
    "tests/reliability/test_review_event_loop.py": 24,
    "tests/web/test_ome_zarr.py": 24,
    "tests/api/test_dandi_zarr_upload.py": 23,
    "tests/client/test_download_ranges.py": 23,
    "tests/cli/test_serve_and_admin.py": 22,
    "tests/dandi/test_dandi_accounts.py": 22,
    "tests/reliability/test_review_embedded_s3.py": 22,
    "tests/web/test_browser.py": 22,
    "tests/client/test_download.py": 21,
    "tests/client/test_embargo.py": 21,
    "tests/dandi/test_dandi_zarr.py": 21,
    "tests/jobs/test_jobs_redis.py": 21,
    "tests/api/test_accounts.py": 20,
    "tests/readme/test_readme.py": 20,
    "tests/web/test_oidc_signin.py": 20,
    "tests/reliability/test_faults.py": 19,
    "tests/services/test_embargo_end.py": 19,
    "tests/storage/test_seaweedfs.py": 19,
    "tests/client/test_retry_http.py": 18,
    "tests/api/test_checksum_node.py": 17,
    "tests/api/test_import_direct.py": 17,
    "tests/dandi/test_dandi_shared_zarr.py": 17,
    "tests/reliability/test_hostile_hdf5.py": 17,
    "tests/api/test_assets.py": 16,
    "tests/api/test_listing_cache.py": 16,
    "tests/api/test_metadata_validation.py": 16,
    "tests/api/test_upload_flow.py": 16,
    "tests/multiprocess/test_manifest_after_overlap.py": 16,
    "tests/services/test_embargo.py": 16,
    "tests/api/test_shared_zarr_views.py": 15,
    "tests/client/test_rm_cli.py": 15,
    "tests/client/test_store.py": 14,
    "tests/dandi/test_dandi_publish_valid.py": 14,
    "tests/services/test_blob_gc.py": 14,
    "tests/services/test_recorded_listing_index.py": 14,
    "tests/client/test_multipart_upload.py": 13,
    "tests/reliability/test_review_content_types.py": 13,
    "tests/reliability/test_review_slow_clients.py": 13,
    "tests/api/test_consistency.py": 12,
    "tests/api/test_dandi_zarr_listing.py": 12,
    "tests/api/test_dandiset_search.py": 12,
    "tests/cli/test_publish_cli.py": 12,
    "tests/api/test_reviewers.py": 11,
    "tests/checksum/test_checksum_properties.py": 11,
    "tests/cli/test_snapshot_cli.py": 11,
    "tests/client/test_local_tree.py": 11,
    "tests/client/test_sharded_zarr.py": 11,
    "tests/services/test_identities.py": 11,
    "tests/api/test_reference_files.py": 10,
    "tests/client/test_api_client.py": 10,
    "tests/client/test_newcomer_client.py": 10,
    "tests/jobs/test_embargo_end_on_rq.py": 10,
    "tests/reliability/test_review_bombs.py": 10,
    "tests/services/test_unreferenced_zarr_gc.py": 10,
    "tests/api/test_import_hash.py": 9,
    "tests/api/test_public_bucket_s3fs.py": 9,
    "tests/api/test_shared_zarr_publish.py": 9,
    "tests/api/test_zarr_restore.py": 9,
    "tests/dandi/test_dandi_published_snapshot.py": 9,
    "tests/api/test_import_security.py": 8,
    "tests/reliability/test_races.py": 8,
    "tests/storage/test_signed_copy.py": 8,
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
