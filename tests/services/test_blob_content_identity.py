"""Blob content identity (issue #25): the same bytes only by an equal digest, never by two
unknown (NULL) ones; a digest collision is never taken for the same content."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from zarrchive.services.dandi.blobs import ContentMatch, Digests, compare_content

MD5S = (None, "a" * 32, "b" * 32)
ETAGS = (None, "c" * 32 + "-1", "d" * 32 + "-1")


def _expected(a: Digests, b: Digests) -> ContentMatch:
    """The rule, spelled out: known on both sides, every digest agrees and one at least."""
    if a.size != b.size:
        return ContentMatch.DIFFERENT
    pairs = [(x, y) for x, y in ((a.md5, b.md5), (a.etag, b.etag)) if None not in (x, y)]
    if not any(x == y for x, y in pairs):
        return ContentMatch.DIFFERENT
    return ContentMatch.SAME if all(x == y for x, y in pairs) else ContentMatch.CONFLICT


def test_every_combination_of_known_and_unknown_digests() -> None:
    blobs = [Digests(s, m, e) for s, m, e in itertools.product((0, 1000), MD5S, ETAGS)]
    for a, b in itertools.product(blobs, repeat=2):
        assert compare_content(a, b) == _expected(a, b), (a, b)
        assert compare_content(a, b) == compare_content(b, a)


def test_unknown_digests_match_nothing() -> None:
    # two blobs uploaded DANDI's way (no md5) of the same size but other bytes
    assert compare_content(Digests(1000, None, ETAGS[1]), Digests(1000, None, ETAGS[2])) == (
        ContentMatch.DIFFERENT
    )
    assert compare_content(Digests(1000, None, None), Digests(1000, None, None)) == (
        ContentMatch.DIFFERENT
    )
    # equal in one column, unknown in the other: the same bytes
    assert compare_content(Digests(5, MD5S[1], ETAGS[1]), Digests(5, None, ETAGS[1])) == (
        ContentMatch.SAME
    )
    assert compare_content(Digests(5, MD5S[1], None), Digests(5, MD5S[1], ETAGS[1])) == (
        ContentMatch.SAME
    )
    # equal in one column, different in the other: a collision
    assert compare_content(Digests(5, MD5S[1], ETAGS[1]), Digests(5, MD5S[1], ETAGS[2])) == (
        ContentMatch.CONFLICT
    )


@given(
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from(MD5S),
    st.sampled_from(MD5S),
    st.sampled_from(ETAGS),
    st.sampled_from(ETAGS),
)
def test_same_means_an_equal_digest_and_size(
    s1: int, s2: int, m1: str | None, m2: str | None, e1: str | None, e2: str | None
) -> None:
    a, b = Digests(s1, m1, e1), Digests(s2, m2, e2)
    if compare_content(a, b) == ContentMatch.SAME:
        assert s1 == s2
        assert (m1 is not None and m1 == m2) or (e1 is not None and e1 == e2)
        assert None in (m1, m2) or m1 == m2
        assert None in (e1, e2) or e1 == e2
