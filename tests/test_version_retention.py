"""The pure decision of ``admin gc`` over noncurrent versions (:mod:`zarrchive.version_retention`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from zarrchive.storage.objects import ObjectVersion
from zarrchive.version_retention import (
    ExpiredVersion,
    Freed,
    KeepReason,
    ManifestRecord,
    ZarrHolds,
    expired_versions,
    freed,
    keep_reasons,
    plan_manifests,
    removable_versions,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def day(n: int) -> datetime:
    return T0 + n * DAY


# one key's history: (day written, is a delete marker, size), oldest first
histories = st.dictionaries(
    st.sampled_from(["a", "b/c", "b/d", "e"]),
    st.lists(st.tuples(st.booleans(), st.integers(0, 100)), min_size=1, max_size=6),
    max_size=4,
)


def listing(spec: dict[str, list[tuple[bool, int]]], start: int = 0) -> list[ObjectVersion]:
    """S3's listing of *spec* (by key; newest first), the i-th write of a key on day
    ``start + 3 * i`` (+1 per key, so keys differ)."""
    out: list[ObjectVersion] = []
    for k, (key, writes) in enumerate(sorted(spec.items())):
        entries = [
            ObjectVersion(
                key,
                f"{key}#{i}",
                i == len(writes) - 1,
                marker,
                None if marker else "e",
                0 if marker else size,
                day(start + 3 * i + k),
            )
            for i, (marker, size) in enumerate(writes)
        ]
        out += reversed(entries)
    return out


@given(histories, st.integers(-2, 25), st.booleans())
def test_expired_versions_are_those_noncurrent_since_the_cutoff(
    spec: dict[str, list[tuple[bool, int]]], cut: int, spare: bool
) -> None:
    cutoff = day(cut)
    got = list(expired_versions(listing(spec), cutoff=cutoff, keep_content_under_marker=spare))
    want = []
    for k, (key, writes) in enumerate(sorted(spec.items())):
        spared = None
        if spare and writes[-1][0]:
            content = [i for i, (marker, _) in enumerate(writes) if not marker]
            spared = content[-1] if content else None
        for i, (marker, size) in enumerate(writes[:-1]):
            successor = day(3 * (i + 1) + k)
            if successor <= cutoff and i != spared:
                want.append(
                    ExpiredVersion(key, f"{key}#{i}", 0 if marker else size, marker, successor)
                )
    assert sorted(got, key=lambda v: v.ref) == sorted(want, key=lambda v: v.ref)
    assert all(not v.version_id.endswith(f"#{len(spec[v.key]) - 1}") for v in got)


def test_the_current_entry_never_expires_and_a_version_expires_at_its_successor() -> None:
    spec = {"k": [(False, 5), (False, 7), (True, 0)]}  # days 0, 3, 6
    assert [v.version_id for v in expired_versions(listing(spec), cutoff=day(2))] == []
    assert [v.version_id for v in expired_versions(listing(spec), cutoff=day(3))] == ["k#0"]
    everything = list(expired_versions(listing(spec), cutoff=day(100)))
    assert [v.version_id for v in everything] == ["k#0", "k#1"]
    # a blob's content under a delete marker stays: the newest content only
    kept = list(expired_versions(listing(spec), cutoff=day(100), keep_content_under_marker=True))
    assert [v.version_id for v in kept] == ["k#0"]


refs = st.sets(st.tuples(st.sampled_from("abc"), st.sampled_from("xyz")), max_size=9)


@given(refs, st.lists(refs, max_size=4))
def test_removable_versions_are_the_expired_no_stream_names(
    expired: set[tuple[str, str]], needed: list[set[tuple[str, str]]]
) -> None:
    candidates = [ExpiredVersion(k, v, 1, False, T0) for k, v in sorted(expired)]
    got = removable_versions(candidates, (iter(n) for n in needed))
    named = set().union(*needed) if needed else set()
    assert got == [c for c in candidates if c.ref not in named]
    assert freed(got) == Freed(len(got), len(got))


def test_removable_versions_stops_reading_once_nothing_is_left() -> None:
    read: list[int] = []

    def stream(n: int) -> Iterator[tuple[str, str]]:
        read.append(n)
        yield ("a", "x")

    candidates = [ExpiredVersion("a", "x", 1, False, T0)]
    assert removable_versions(candidates, (stream(n) for n in range(3))) == []
    assert read == [0]


def test_keep_reasons_each() -> None:
    now, retention = day(40), 30 * DAY
    old, young = ManifestRecord("c1", day(5)), ManifestRecord("c1", day(11))
    none = ZarrHolds("c9", {})
    assert keep_reasons(old, none, now=now, retention=retention) == frozenset()
    assert keep_reasons(young, none, now=now, retention=retention) == {KeepReason.RECENT}
    assert keep_reasons(ManifestRecord("c1", day(10)), none, now=now, retention=retention) == (
        frozenset()  # exactly the retention old: it expires
    )
    for holds, reason in [
        (ZarrHolds("c9", {"c1": False}), KeepReason.PINNED),
        (ZarrHolds("c9", {"c1": True}), KeepReason.PINNED),
        (ZarrHolds("c1", {}), KeepReason.CURRENT),
        (ZarrHolds("c9", {}, trashed=True), KeepReason.TRASHED),
        (ZarrHolds("c9", {}, rollback_targets=frozenset({"c1"})), KeepReason.ROLLBACK),
    ]:
        assert keep_reasons(old, holds, now=now, retention=retention) == {reason}


checksums = st.sampled_from(["c1", "c2", "c3", "c4"])


@given(
    st.dictionaries(checksums, st.integers(0, 60)),
    st.dictionaries(checksums, st.booleans()),
    checksums,
    st.booleans(),
    st.frozensets(checksums),
)
def test_plan_manifests_keeps_exactly_what_a_reason_holds(
    manifests: dict[str, int],
    pins: dict[str, bool],
    current: str,
    trashed: bool,
    rollback: frozenset[str],
) -> None:
    now, retention = day(60), 30 * DAY
    holds = ZarrHolds(current, pins, trashed=trashed, rollback_targets=rollback)
    records = [ManifestRecord(c, day(d)) for c, d in manifests.items()]
    plan = plan_manifests(records, holds, now=now, retention=retention)
    unmanifested = [c for c, frozen in pins.items() if not frozen and c not in manifests]
    if unmanifested:
        assert plan.refusal is not None and plan.kept == {}
        return
    assert plan.refusal is None
    for checksum, made in manifests.items():
        expected = (
            checksum in pins
            or checksum == current
            or day(made) > now - retention
            or trashed
            or checksum in rollback
        )
        assert (checksum in plan.kept) == expected
        assert plan.kept.get(checksum, frozenset()) == keep_reasons(
            ManifestRecord(checksum, day(made)), holds, now=now, retention=retention
        )


# -- the decision over a Zarr's whole history -------------------------------------------------
steps = st.lists(
    st.tuples(st.sampled_from(["write", "delete", "manifest"]), st.sampled_from("pqr")),
    max_size=25,
)


@settings(max_examples=300)
@given(steps, st.integers(0, 30), st.integers(1, 10), st.sets(st.integers(0, 24)))
def test_nothing_a_kept_manifest_or_the_retention_holds_is_removable(
    history: list[tuple[str, str]], horizon: int, retention_days: int, pinned_steps: set[int]
) -> None:
    """A Zarr written one step a day; manifests name the current versions; gc at
    *horizon* days after the last step: what it removes is noncurrent for the retention and
    named by no kept manifest; and every kept manifest's versions survive."""
    current: dict[str, tuple[str, bool]] = {}  # key -> (version id, is marker)
    versions: dict[str, list[tuple[str, bool, int]]] = {}  # key -> (id, marker, day)
    manifests: dict[str, tuple[int, set[tuple[str, str]]]] = {}
    pins: dict[str, bool] = {}
    for n, (op, key) in enumerate(history):
        if op == "manifest":
            state = {(k, v) for k, (v, marker) in current.items() if not marker}
            checksum = f"s{hash(frozenset(state)) & 0xFFFF}"
            manifests.setdefault(checksum, (n, state))
            if n in pinned_steps:
                pins[checksum] = False
            continue
        vid = f"{key}@{n}"
        versions.setdefault(key, []).append((vid, op == "delete", n))
        current[key] = (vid, op == "delete")
    now = day(len(history) + horizon)
    retention = retention_days * DAY
    listed = [
        ObjectVersion(key, vid, i == len(vs) - 1, marker, None, 1, day(n))
        for key, vs in sorted(versions.items())
        for i, (vid, marker, n) in reversed(list(enumerate(vs)))
    ]
    current_checksum = (
        f"s{hash(frozenset((k, v) for k, (v, m) in current.items() if not m)) & 0xFFFF}"
    )
    holds = ZarrHolds(current_checksum, pins)
    plan = plan_manifests(
        [ManifestRecord(c, day(n)) for c, (n, _) in manifests.items()],
        holds,
        now=now,
        retention=retention,
    )
    assert plan.refusal is None
    expired = list(expired_versions(listed, cutoff=now - retention))
    removed = removable_versions(expired, (manifests[c][1] for c in plan.kept))
    removed_refs = {v.ref for v in removed}
    for checksum in plan.kept:
        assert not manifests[checksum][1] & removed_refs
    for checksum, (n, _) in manifests.items():
        if checksum in pins or day(n) > now - retention:
            assert checksum in plan.kept
    for key, (vid, _) in current.items():
        assert (key, vid) not in removed_refs
    for version in removed:
        assert version.noncurrent_since <= now - retention
    # and nothing more is kept than needed: every expired version no kept manifest names goes
    needed = set().union(*(manifests[c][1] for c in plan.kept)) if plan.kept else set()
    assert {v.ref for v in expired} - needed == removed_refs
    assert removed == [v for v in expired if v.ref in removed_refs]
