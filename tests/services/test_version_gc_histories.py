"""Property (issue #38 item 4): over random histories of uploads, deletions, manifests,
publications, trash and its restore, rollbacks, time passing and gc runs (applied), every
published state, every restorable state (a manifest every gc kept), the current state and
the blob read back byte for byte after each gc.  In-memory store, SQLite."""

from __future__ import annotations

import itertools

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.databases import SQLITE_ONLY
from tests.helpers.version_histories import History, OffsetClock, run_stores_on
from zarrchive.config import PublishedZarrs
from zarrchive.db import models
from zarrchive.services.runtime import Archive

pytestmark = [SQLITE_ONLY, pytest.mark.settings(published_zarrs=PublishedZarrs.SNAPSHOT)]

PATHS = ["a", "b", "d/c"]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(PATHS), st.binary(max_size=3)),
        st.tuples(st.just("delete"), st.sampled_from(PATHS)),
        st.tuples(st.just("manifest")),
        st.tuples(st.just("publish")),
        st.tuples(st.just("trash")),
        st.tuples(st.just("untrash")),
        st.tuples(st.just("rewrite_blob")),
        st.tuples(st.just("wait"), st.sampled_from([1, 10, 29, 31, 60])),
        st.tuples(st.just("gc")),
        st.tuples(st.just("rollback"), st.integers(0, 7)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.fixture
def archive(memory_archive: Archive) -> Archive:
    return memory_archive


def test_every_published_and_restorable_state_reads_back_after_gc(
    api: httpx.Client, archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = OffsetClock()
    monkeypatch.setattr(models, "datetime", clock.shifted_datetime())
    run_stores_on(archive, clock)
    counter = itertools.count()
    shared = History.dandiset_with_blob(api, archive)

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps)
    def run(history_steps: list[tuple[object, ...]]) -> None:
        history = History.start(api, archive, clock, shared, next(counter))
        for name, *args in history_steps:
            getattr(history, str(name))(*args)
        history.wait(61)
        history.gc()  # the last one: everything noncurrent is past the retention
        history.check()
        history.end()

    run()
