"""The per-use settings of the outbound client: a retry policy's waits stay within its backoff
and jitter, honour a bounded Retry-After, and retry the statuses it names; bad numbers are
refused when a policy is made, naming the field."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from extractor.net.policies import Limits, RetryPolicy


@pytest.mark.parametrize(
    ("policy", "retries", "low", "high"),
    [
        (RetryPolicy(backoff_base=0.5, backoff_max=10.0, jitter=0.5), 0, 0.25, 0.5),
        (RetryPolicy(backoff_base=0.5, backoff_max=10.0, jitter=0.5), 3, 2.0, 4.0),
        (RetryPolicy(backoff_base=0.5, backoff_max=10.0, jitter=0.5), 9, 5.0, 10.0),
        (RetryPolicy(backoff_base=1.0, backoff_max=300.0, jitter=0.25), 2, 3.0, 4.0),
        (RetryPolicy(backoff_base=1.0, backoff_max=300.0, jitter=0.25), 12, 225.0, 300.0),
        (RetryPolicy(backoff_base=1.0, backoff_max=8.0, jitter=0.0), 5, 8.0, 8.0),
    ],
)
def test_a_wait_is_the_doubled_backoff_less_its_jitter(
    policy: RetryPolicy, retries: int, low: float, high: float
) -> None:
    for _ in range(200):
        assert low <= policy.wait(retries) <= high


def test_a_retry_after_is_waited_up_to_its_cap() -> None:
    policy = RetryPolicy(retry_after_max=60.0)
    assert policy.wait(0, retry_after=3.0) == 3.0
    assert policy.wait(0, retry_after=3600.0) == 60.0


def test_every_5xx_and_the_named_statuses_are_retried() -> None:
    policy = RetryPolicy(statuses=frozenset({408, 429}))
    assert [s for s in (200, 302, 404, 408, 429, 500, 503) if policy.retries_status(s)] == [
        408,
        429,
        500,
        503,
    ]


def test_only_transient_failures_are_retried_unless_every_one_is() -> None:
    assert RetryPolicy().retries_failure(transient=True)
    assert not RetryPolicy().retries_failure(transient=False)
    assert RetryPolicy(any_failure=True).retries_failure(transient=False)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Limits(read_timeout=0), "read_timeout"),
        (lambda: Limits(total_timeout=float("inf")), "total_timeout"),
        (lambda: Limits(max_reply_bytes=0), "max_reply_bytes"),
        (lambda: Limits(max_redirects=-1), "max_redirects"),
        (lambda: RetryPolicy(attempts=0), "attempts"),
        (lambda: RetryPolicy(backoff_base=-1), "backoff_base"),
        (lambda: RetryPolicy(jitter=1.5), "jitter"),
    ],
)
def test_bad_numbers_are_refused_naming_the_field(make: Callable[[], object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()
