"""Jobs queued before ``zarrchive.services`` was laid out by concept still run after it."""

from __future__ import annotations

import pytest

from zarrchive.jobs import resolve
from zarrchive.jobs.renamed import MOVED_SERVICES, current_module
from zarrchive.services.dandi.lindi_files import convert_blob_job
from zarrchive.services.zarr_engine.manifests import generate_manifest_job
from zarrchive.services.zarr_engine.uploads import apply_pending_job

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("zarrchive.services.manifests:generate_manifest_job", generate_manifest_job),
        ("zarrchive.services.uploads:apply_pending_job", apply_pending_job),
        ("zarrchive.services.lindi_files:convert_blob_job", convert_blob_job),
    ],
)
def test_a_job_queued_under_its_old_module_resolves_to_the_moved_function(
    old: str, new: object
) -> None:
    assert resolve(old) is new


def test_current_names_and_other_modules_are_unchanged() -> None:
    assert current_module("zarrchive.services.runtime") == "zarrchive.services.runtime"
    assert current_module("zarrchive.services.dandi.assets") == "zarrchive.services.dandi.assets"
    assert current_module("zarrchive.services.uploads.apply") == (
        "zarrchive.services.zarr_engine.uploads.apply"
    )
    assert current_module("tests.helpers.job_functions") == "tests.helpers.job_functions"


def test_every_moved_module_exists_where_the_table_says() -> None:
    import importlib

    for module, package in MOVED_SERVICES.items():
        importlib.import_module(f"zarrchive.services.{package}.{module}")
