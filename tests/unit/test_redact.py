"""Secret payload fields never reach stored error text."""

from __future__ import annotations

from datetime import UTC, datetime

from skiplock._runtime.execution import failure, redact
from skiplock.job import Job, JobStatus
from skiplock.retry import FixedDelay


def make_job(payload: dict[str, object]) -> Job:
    now = datetime.now(UTC)
    return Job(
        1, "q", "t", payload, JobStatus.RUNNING, 0, now, 1, 3, "w", None, None, None, None, now
    )


def test_secret_values_are_replaced_in_headline_and_traceback() -> None:
    job = make_job({"user": "ann", "password": "hunter2-pw", "pin": 123456})

    def handler(password: str) -> None:
        raise ValueError(f"login failed for password {password!r}")

    try:
        handler("hunter2-pw")
    except ValueError as exc:
        outcome = failure(job, exc, FixedDelay(1), secret={"password", "pin"})
    assert outcome.error is not None
    assert "hunter2-pw" not in outcome.error
    assert "login failed for password '***'" in outcome.error
    assert outcome.kind == "retry"


def test_without_secret_fields_the_error_is_unchanged() -> None:
    job = make_job({"password": "hunter2-pw"})
    try:
        raise RuntimeError("hunter2-pw")
    except RuntimeError as exc:
        outcome = failure(job, exc, FixedDelay(1))
    assert outcome.error is not None and "hunter2-pw" in outcome.error


def test_redact_handles_numbers_short_values_and_missing_fields() -> None:
    payload = {"token": 987654, "short": "ab", "flag": True}
    text = "token=987654 short=ab flag=True"
    assert (
        redact(text, payload, {"token", "short", "flag", "absent"})
        == "token=*** short=ab flag=True"
    )


def test_dsn_passwords_are_hidden_in_connection_errors() -> None:
    """Both libpq passwords: the server's and the one that decrypts the client's TLS key."""
    from skiplock._db.connections import redact as redact_dsn
    from skiplock._db.connections import unavailable

    dsn = "postgresql://ann:pw-canary-1@127.0.0.1:1/db?sslpassword=pw-canary-2&sslmode=disable"
    shown = str(unavailable(OSError("connection refused"), dsn))
    assert "pw-canary" not in shown and "127.0.0.1" in shown
    assert "pw-canary" not in redact_dsn(dsn)
    assert "sslpassword=***" in redact_dsn(dsn) and "password=***" in redact_dsn(dsn)


def test_an_unparseable_dsn_shows_no_word_of_its_password() -> None:
    """libpq names the word it stopped at, which may be part of a password: one with a space,
    unquoted, in a key=value DSN, or a URL's badly %-encoded password."""
    import pytest

    from skiplock._db.connections import check_dsn
    from skiplock.errors import ConfigurationError

    for dsn in (
        "host=db user=app password=hunter2 pw-canary-1",
        "host=db user=app password=hunter2 pw-canary-2=x",
        "postgresql://app:pw%zzcanary-3@db/x",
    ):
        with pytest.raises(ConfigurationError) as refused:
            check_dsn(dsn)
        assert "canary" not in str(refused.value), str(refused.value)
    # The problem is still named (the word too, when it is one of libpq's own option names).
    with pytest.raises(ConfigurationError, match="invalid URI query parameter"):
        check_dsn("postgresql://app@db/x?bogus=1")
