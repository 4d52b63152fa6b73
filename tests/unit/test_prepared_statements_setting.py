"""The prepared-statements switch (for transaction-mode poolers) and the errors it explains."""

from __future__ import annotations

import psycopg
import pytest

from skiplock import App, ConfigurationError
from skiplock._db.connections import connect_kwargs, prepared_statements_setting, translate

DSN = "postgresql://u@db.example:5432/app"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        *[(None, True), ("", True), ("on", True), ("1", True), ("TRUE", True), ("yes", True)],
        *[("off", False), ("0", False), ("False", False), (" no ", False)],
    ],
)
def test_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("SKIPLOCK_PREPARED_STATEMENTS", raising=False)
    else:
        monkeypatch.setenv("SKIPLOCK_PREPARED_STATEMENTS", value)
    assert prepared_statements_setting() is expected
    assert App(DSN).prepared_statements is expected
    # An explicit choice wins over the environment.
    assert App(DSN, prepared_statements=not expected).prepared_statements is (not expected)


def test_a_bad_value_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKIPLOCK_PREPARED_STATEMENTS", "sometimes")
    with pytest.raises(ConfigurationError, match="SKIPLOCK_PREPARED_STATEMENTS must be one of"):
        App(DSN)


def test_connections_without_prepared_statements() -> None:
    assert "prepare_threshold" not in connect_kwargs(DSN)
    assert connect_kwargs(DSN, prepare=False)["prepare_threshold"] is None


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
        psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_2" does not exist'),
        psycopg.errors.ProtocolViolation(
            'bind message supplies 3 parameters, but prepared statement "_pg3_0" requires 8'
        ),
    ],
)
def test_prepared_statement_mixups_name_the_pooler_and_the_fix(error: psycopg.Error) -> None:
    translated = translate(error, "skiplock")
    assert isinstance(translated, ConfigurationError)
    assert str(translated).startswith(str(error))
    assert "transaction-mode connection pooler" in str(translated)
    assert "SKIPLOCK_PREPARED_STATEMENTS=off" in str(translated)


def test_other_protocol_violations_stay_connection_errors() -> None:
    translated = translate(psycopg.errors.ProtocolViolation("invalid frontend message"), "s")
    assert not isinstance(translated, ConfigurationError)
    assert "lost the connection" in str(translated)
