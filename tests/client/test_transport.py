"""The client's HTTP layer, its pure parts: delays, ``Retry-After``, what is retried, how often."""

from __future__ import annotations

import email.utils

import httpx
import pytest

import zarrchive
from zarrchive.errors import InvalidInput, NetworkError
from zarrchive.transport import (
    USER_AGENT,
    RetryEvent,
    RetryPolicy,
    TryAgain,
    check,
    is_retryable_error,
    is_retryable_status,
    parse_retry_after,
    run,
)

NO_WAIT = RetryPolicy(attempts=4, base_delay=0.0, max_delay=0.0)


def test_backoff_doubles_with_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=0.25, max_delay=3.0)
    for attempt, ceiling in ((1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (5, 3.0), (30, 3.0)):
        delays = {policy.delay(attempt) for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1  # jitter: not the same wait for every client


def test_retry_after_wins_over_backoff_and_is_capped() -> None:
    policy = RetryPolicy(base_delay=0.25, max_delay=3.0, max_retry_after=10.0)
    assert policy.delay(1, retry_after=7.5) == 7.5
    assert policy.delay(5, retry_after=0.0) == 0.0
    assert policy.delay(1, retry_after=3600.0) == 10.0
    assert policy.delay(1, retry_after=-4.0) == 0.0


def test_a_policy_needs_an_attempt_and_no_negative_delays() -> None:
    with pytest.raises(InvalidInput, match="at least 1 attempt, got 0"):
        RetryPolicy(attempts=0)
    with pytest.raises(InvalidInput, match="cannot be negative"):
        RetryPolicy(base_delay=-1.0)


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    in_ninety = email.utils.formatdate(now + 90, usegmt=True)
    an_hour_ago = email.utils.formatdate(now - 3600, usegmt=True)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(" 2 ") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after(in_ninety, now=now) == 90.0
    assert parse_retry_after(an_hour_ago, now=now) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 -0000", now=1445412475.0) == 5.0
    for unreadable in (None, "", "soon", "Wed, 99 Foo"):
        assert parse_retry_after(unreadable) is None


def test_which_statuses_and_errors_are_retried() -> None:
    assert [s for s in range(100, 600) if is_retryable_status(s)] == [429, 500, 502, 503, 504]
    request = httpx.Request("GET", "http://example.invalid/")
    for retried in (
        httpx.ConnectError("refused", request=request),
        httpx.ReadTimeout("slow", request=request),
        httpx.RemoteProtocolError("cut", request=request),
        TryAgain("503"),
    ):
        assert is_retryable_error(retried)
    for final in (
        httpx.DecodingError("bad gzip", request=request),
        httpx.TooManyRedirects("loop", request=request),
        ValueError("x"),
        NetworkError("x"),
    ):
        assert not is_retryable_error(final)


def test_check_turns_a_retryable_answer_into_try_again() -> None:
    ok = httpx.Response(404)
    assert check(ok) is ok
    busy = httpx.Response(503, headers={"Retry-After": "7"}, content=b"later")
    with pytest.raises(TryAgain) as caught:
        check(busy)
    assert caught.value.retry_after == 7.0
    assert caught.value.response is busy
    assert caught.value.reason == "503 Service Unavailable"
    with pytest.raises(TryAgain) as caught:
        check(httpx.Response(429))
    assert caught.value.retry_after is None


class Attempts:
    """An attempt that fails with *errors* in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def test_run_retries_then_returns() -> None:
    request = httpx.Request("GET", "http://example.invalid/")
    attempt = Attempts(httpx.ConnectError("refused", request=request), TryAgain("503 busy"))
    events: list[RetryEvent] = []
    assert run(NO_WAIT, attempt, what="GET x", on_retry=events.append) == "done"
    assert attempt.calls == 3
    assert [(e.attempt, e.attempts, e.reason, e.status) for e in events] == [
        (1, 4, "refused", None),
        (2, 4, "503 busy", None),
    ]
    assert str(events[1]) == "GET x: 503 busy; retrying in 0.0 s (attempt 3 of 4)"


def test_run_gives_up_after_the_attempts_with_the_last_error() -> None:
    attempt = Attempts(*(TryAgain(f"try {i}") for i in range(10)))
    with pytest.raises(TryAgain, match=r"^try 3$"):
        run(NO_WAIT, attempt, what="GET x")
    assert attempt.calls == 4
    single = Attempts(TryAgain("once"))
    with pytest.raises(TryAgain):
        run(RetryPolicy(attempts=1), single, what="GET x")
    assert single.calls == 1


def test_run_raises_other_errors_at_once_unless_asked() -> None:
    attempt = Attempts(NetworkError("cut"), NetworkError("cut"))
    with pytest.raises(NetworkError):
        run(NO_WAIT, attempt, what="GET x")
    assert attempt.calls == 1
    assert run(NO_WAIT, attempt, what="GET x", retry_on=(NetworkError,)) == "done"
    assert attempt.calls == 3


def test_run_waits_what_the_server_said() -> None:
    events: list[RetryEvent] = []
    answer = httpx.Response(429)
    attempt = Attempts(TryAgain("429", retry_after=0.05, response=answer))
    policy = RetryPolicy(attempts=2, base_delay=30.0, max_delay=30.0)
    assert run(policy, attempt, what="PUT y", on_retry=events.append) == "done"
    assert [(e.wait, e.status) for e in events] == [(0.05, 429)]


def test_user_agent_names_the_version() -> None:
    assert f"zarrchive/{zarrchive.__version__}" == USER_AGENT
