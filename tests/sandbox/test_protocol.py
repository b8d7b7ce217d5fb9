"""The pure parts of the sandbox: what the parent and the child say, and which trees a walled
child may still read."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zarrchive.errors import InvalidInput
from zarrchive.sandbox.protocol import Header, Limits, Request, Status, readable_roots

_names = st.sampled_from(["a", "b", "data", "venv", "lib"])
_paths = st.lists(_names, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@given(candidates=st.lists(_paths, max_size=6), forbidden=st.lists(_paths, max_size=3))
def test_a_kept_root_neither_holds_nor_lies_in_a_forbidden_path(
    candidates: list[str], forbidden: list[str]
) -> None:
    kept, dropped = readable_roots(candidates, forbidden)
    assert sorted(set(kept) | set(dropped)) == sorted(set(candidates))
    for root in kept:
        for banned in forbidden:
            r, b = PurePosixPath(root), PurePosixPath(banned)
            assert not (b.is_relative_to(r) or r.is_relative_to(b))


def test_requests_and_headers_round_trip() -> None:
    request = Request("zarrchive.x", {"a": [1, "b"]}, Limits(seconds=2.5), ("/data",))
    assert Request.decode(request.encode()) == request
    header = Header(Status.REFUSED, 0, "no", {"landlock": 7, "uid": 65534})
    assert Header.decode(header.encode()) == header
    long = Header(Status.LIMIT, reason="x" * 10_000)
    assert len(Header.decode(long.encode()).reason or "") == 500


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"task": "os.system", "args": {}, "limits": {"seconds": 1}, "forbidden": []}'],
)
def test_a_request_names_an_archive_module_or_is_refused(data: bytes) -> None:
    with pytest.raises(InvalidInput):
        Request.decode(data)


def test_malformed_answers_and_limits_are_refused() -> None:
    for line in (b"", b"{}", b'{"status": "maybe", "size": 0, "reason": null, "walls": {}}'):
        with pytest.raises(InvalidInput):
            Header.decode(line)
    with pytest.raises(InvalidInput):
        Limits(seconds=0)
    with pytest.raises(InvalidInput):
        Limits(seconds=1, memory_bytes=1024)
    assert Limits(seconds=2.5).cpu_seconds == 3
