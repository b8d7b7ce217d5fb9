"""The sign-in flow's cookie (pure): what the archive signed comes back whole; anything
forged, altered, stale or garbage is refused."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from zarrchive.web.oidc_flow import (
    FLOW_MAX_AGE,
    MAX_FLOW_COOKIE,
    SignInFlow,
    decode_flow,
    encode_flow,
    flow_key,
)

KEY = flow_key("the archive's secret")
NOW = 1_800_000_000


def _flow() -> SignInFlow:
    return SignInFlow.start("orcid", "https://archive.example/signin/oidc/callback", NOW)


@given(
    provider=st.text(max_size=40),
    redirect=st.text(max_size=200),
    age=st.integers(min_value=0, max_value=FLOW_MAX_AGE),
)
def test_a_flow_comes_back_whole_within_its_age(provider: str, redirect: str, age: int) -> None:
    flow = SignInFlow.start(provider, redirect, NOW)
    assert decode_flow(encode_flow(flow, KEY), KEY, NOW + age) == flow


def test_fresh_secrets_for_each_flow() -> None:
    a, b = _flow(), _flow()
    assert len({a.state, b.state, a.nonce, b.nonce, a.code_verifier, b.code_verifier}) == 6
    assert 43 <= len(a.code_verifier) <= 128  # RFC 7636


def test_stale_or_future_flows_are_refused() -> None:
    value = encode_flow(_flow(), KEY)
    assert decode_flow(value, KEY, NOW + FLOW_MAX_AGE + 1) is None
    assert decode_flow(value, KEY, NOW - 1) is None


def test_another_archives_flow_is_refused() -> None:
    assert decode_flow(encode_flow(_flow(), flow_key("another")), KEY, NOW) is None


@given(position=st.integers(min_value=0), char=st.characters(codec="ascii"))
def test_an_altered_cookie_is_refused(position: int, char: str) -> None:
    value = encode_flow(_flow(), KEY)
    position %= len(value)
    altered = value[:position] + char + value[position + 1 :]
    if altered != value:
        assert decode_flow(altered, KEY, NOW) is None


def test_a_forged_state_signed_with_the_right_fields_but_no_key_is_refused() -> None:
    honest = _flow()
    forged = encode_flow(replace(honest, state="attacker"), flow_key(""))
    assert decode_flow(forged, KEY, NOW) is None


@given(st.text(max_size=MAX_FLOW_COOKIE + 10))
def test_garbage_is_refused_without_error(value: str) -> None:
    assert decode_flow(value, KEY, NOW) is None
