"""The pure parts of :mod:`zarrchive.services.zarr_engine.recorded_listing`: the merge of a manifest's
entries with the changes since, and the range of keys a page may hold (properties, against
plain models)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from zarrchive.services.zarr_engine.recorded_listing import (
    KeyRange,
    ObjectEntry,
    ParsedEntries,
    _merged,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: Keys from few characters, some below "/" and some above it, some not ASCII (their byte
#: order is the code points' order: UTF-8 keeps it).
keys = st.text(alphabet="ab/.-0\u00e9\u4e2d", min_size=1, max_size=5)


def _entry(key: str, n: int) -> ObjectEntry:
    return ObjectEntry(key, T0, f"{n:032x}", n)


@given(
    st.dictionaries(keys, st.integers(0, 100), max_size=30),
    st.dictionaries(keys, st.one_of(st.none(), st.integers(0, 100)), max_size=30),
)
def test_the_merge_is_the_base_with_the_changes_applied(
    base: dict[str, int], changes: dict[str, int | None]
) -> None:
    expected = dict(base)
    for key, value in changes.items():
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    merged = list(
        _merged(
            iter([_entry(k, base[k]) for k in sorted(base)]),
            iter(
                [
                    (k, None if changes[k] is None else _entry(k, changes[k] or 0))
                    for k in sorted(changes)
                ]
            ),
        )
    )
    assert merged == [_entry(k, expected[k]) for k in sorted(expected)]


@given(st.lists(keys, unique=True, max_size=40), keys | st.just(""), keys | st.just(""))
def test_a_range_from_its_lower_bound_holds_exactly_the_keys_it_admits(
    names: list[str], prefix: str, after: str
) -> None:
    wanted = KeyRange(prefix, after)
    ordered = sorted(names, key=lambda k: k.encode("utf-8"))
    assert ordered == sorted(names)  # str order is UTF-8 byte order
    parsed = ParsedEntries()
    for i, name in enumerate(ordered):
        assert parsed.append(name, T0, i, f"{i:032x}" if i % 3 else f"odd-{i}")
    assert not parsed.append(ordered[-1], T0, 0, "") if ordered else True
    assert [parsed.entry(i) for i in range(len(ordered))] == [
        ObjectEntry(name, T0, f"{i:032x}" if i % 3 else f"odd-{i}", i)
        for i, name in enumerate(ordered)
    ]
    lower, inclusive = wanted.lower
    found = []
    for entry in parsed.from_key(lower, inclusive):
        if wanted.is_past(entry.key):
            break
        if wanted.admits(entry.key):
            found.append(entry.key)
    assert found == [k for k in ordered if k.startswith(prefix) and k > after]
