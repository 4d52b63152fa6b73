"""Writing rate limits: N/UNIT or N/SECONDS, 'none', and clear errors otherwise."""

from __future__ import annotations

import pytest

from skiplock import ConfigurationError
from skiplock._rate_limit import check_rate_limit, describe, parse_rate


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10/s", (10, 1.0)),
        ("100/m", (100, 60.0)),
        ("1000/h", (1000, 3600.0)),
        ("5/d", (5, 86400.0)),
        ("5/30", (5, 30.0)),
        (" 3 / 0.5 ", (3, 0.5)),
        ("none", None),
        ("NONE", None),
    ],
)
def test_parse_rate(text: str, parsed: tuple[int, float] | None) -> None:
    assert parse_rate(text) == parsed


@pytest.mark.parametrize(
    "text", ["", "10", "10/", "/s", "0/s", "-1/s", "1.5/s", "10/w", "10/0", "x/s"]
)
def test_bad_rates_are_refused_with_the_way_to_write_them(text: str) -> None:
    with pytest.raises(ConfigurationError, match=r"N/s|>= 1|> 0"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("limit", "period"), [(0, 1.0), (True, 1.0), (2.5, 1.0), (1, 0.0), (1, float("inf")), (1, -3)]
)
def test_check_rate_limit_refuses_nonsense(limit: object, period: float) -> None:
    with pytest.raises(ConfigurationError):
        check_rate_limit(limit, period)  # type: ignore[arg-type]


def test_no_limit_needs_no_period_and_describe_reads_well() -> None:
    check_rate_limit(None, 0.0)
    assert describe(100, 60.0) == "at most 100 starts per 60s"
    assert describe(3, 0.5) == "at most 3 starts per 0.5s"
