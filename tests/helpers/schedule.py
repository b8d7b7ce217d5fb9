"""The order test modules start in under pytest-xdist: the longest first.

``make test`` runs each module whole in one worker (``--dist loadfile``), and a worker takes
the next module when it is nearly done with its own.  Without an order, a long module that
starts last (pytest-xdist's default puts modules with few tests last, however long they are)
keeps one worker busy for minutes after the other ran out of work.  Starting the longest
modules first (longest-processing-time-first scheduling) leaves only short ones for the end.

:data:`MODULE_SECONDS` are the modules' measured times in one ``make test`` (per module, the
sum of its tests' times from ``--junitxml``, 3 workers on 2 cores: read them as weights).
A module missing from the table weighs nothing and keeps its collection order after the
weighed ones; refresh the table when a module becomes one of the long ones.
"""

from __future__ import annotations

import pytest

#: test module -> seconds it took in one run (weights; see the module's docstring)
MODULE_SECONDS: dict[str, int] = {
    "tests/reliability/test_hostile_hdf5.py": 120,  # measured alone on a loaded machine
    "tests/reliability/test_review_listing_cost.py": 120,  # alone, load 20 (1,000 directories)
    "tests/reliability/test_authorization.py": 130,  # CI 244 s; about half since worlds are shared
    "tests/services/test_manifest_records.py": 81,
    "tests/dandi/test_dandi_blobs.py": 77,
    "tests/web/test_oidc_browser.py": 75,  # alone: 65 s light, 155 s loaded (serve, provider, dandi)
    "tests/web/test_oidc_signin.py": 45,  # alone: 40 s light (provider, proxy, 10 archives)
    "tests/services/test_dois.py": 110,  # alone: 102 s light (16 tests, sqlite + postgresql)
    "tests/dandi/test_dandi_accounts.py": 45,  # estimate: an embargoed upload, 3 downloads
    "tests/dandi/test_dandi_shared_zarr.py": 45,  # alone, light: a serve child, one download
    "tests/client/test_multipart_ctrl_c.py": 60,  # estimate: 4 CLI uploads interrupted + reruns
    "tests/reliability/test_review_embargo.py": 56,
    "tests/api/test_zarr_api.py": 51,
    "tests/api/test_directory_delete.py": 50,
    "tests/multiprocess/test_multiprocess.py": 80,  # CI: 70 s its postgresql test alone
    "tests/web/test_pages.py": 49,
    "tests/services/test_manifests.py": 46,
    "tests/api/test_request_guard.py": 44,
    "tests/api/test_embargo.py": 43,
    "tests/api/test_trash.py": 41,  # alone, light (12 tests, sqlite + postgresql)
    "tests/services/test_blob_gc.py": 28,  # alone, light (the CLI test: sqlite only)
    "tests/reliability/test_faults.py": 60,  # CI: 34 s s3_paused_mid_batch alone
    "tests/cli/test_review_serve_stop.py": 41,
    "tests/api/test_snapshots.py": 41,
    "tests/api/test_upload_pipeline.py": 40,
    "tests/api/test_manifest_jobs.py": 40,
    "tests/reliability/test_review_content_types.py": 40,  # alone, loaded: 2 SeaweedFS, Chromium
    "tests/api/test_dandi_zarr_upload.py": 39,
    "tests/api/test_zarr_multipart.py": 38,
    "tests/client/test_patch_upload.py": 37,
    "tests/reliability/test_bad_input.py": 37,
    "tests/client/test_upload.py": 130,  # CI: 53 + 43 s its two longest
    "tests/reliability/test_fuzz.py": 36,
    "tests/client/test_download.py": 36,
    "tests/api/test_publish.py": 35,
    "tests/client/test_resume.py": 50,  # CI: 23 + 21 s
    "tests/client/test_snapshots.py": 55,  # CI: 43 s its longest
    "tests/web/test_browser.py": 31,
    "tests/api/test_blobs.py": 30,
    "tests/web/test_ome_zarr.py": 30,
    "tests/client/test_upload_pipeline.py": 150,  # CI: 41 + 36 + 35 + 33 s
    "tests/api/test_upload_integrity.py": 28,
    "tests/storage/test_s3_conformance.py": 27,
    "tests/lindi/test_archive.py": 26,
    "tests/storage/test_seaweedfs.py": 26,
    "tests/cli/test_serve_and_admin.py": 25,
    "tests/multiprocess/test_manifest_after_overlap.py": 25,
    "tests/dandi/test_dandi_zarr.py": 40,  # CI: 33 s
    "tests/scale/test_scale_bench.py": 60,  # CI: 56 s
    "tests/reliability/test_review_embedded_s3.py": 23,
    "tests/reliability/test_review_event_loop.py": 21,
    "tests/services/test_embargo.py": 21,
    "tests/reliability/test_crashes.py": 30,  # CI: 23 s
    "tests/api/test_dandi_zarr_listing.py": 21,
    "tests/dandi/test_dandi_publish_valid.py": 20,
    "tests/api/test_reference_files.py": 19,
    "tests/api/test_assets.py": 19,
    "tests/readme/test_readme.py": 90,  # alone, loaded: 92 s (publishing and reading added, #41)
    "tests/jobs/test_jobs_rerun.py": 18,
    "tests/services/test_uploads.py": 18,
    "tests/api/test_metadata_validation.py": 17,
    "tests/client/test_embargo.py": 16,
    "tests/client/test_retry_http.py": 16,
    "tests/reliability/test_review_bombs.py": 16,
    "tests/checksum/test_checksum_properties.py": 15,
    "tests/api/test_listing_cache.py": 15,
    "tests/api/test_dandiset_search.py": 14,
    "tests/api/test_consistency.py": 14,
    "tests/api/test_upload_flow.py": 14,
    "tests/client/test_store.py": 13,
    "tests/client/test_rm_cli.py": 13,
    "tests/cli/test_publish_cli.py": 11,
    "tests/api/test_search_at_scale.py": 11,
    "tests/api/test_public_bucket_s3fs.py": 11,
    "tests/client/test_newcomer_client.py": 10,
    "tests/api/test_cors.py": 10,
    "tests/client/test_multipart_upload.py": 10,
    "tests/api/test_audit_trail.py": 10,
    "tests/services/test_unreferenced_zarr_gc.py": 10,
    "tests/lindi/test_selection.py": 9,
    "tests/jobs/test_jobs_redis.py": 9,
    "tests/client/test_sharded_zarr.py": 9,
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
