"""The bench's scale workload times the cases' claims in turn, statement by statement, so that
a drift in the machine's speed falls on every case alike."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest
from bench.scale import explain_in_turn


@pytest.fixture
def sequences(pg_dsn: str) -> Iterator[str]:
    """A schema with one shared sequence ("clock") and a "last_<i>" sequence per target."""
    schema = f"bench_scale_{secrets.token_hex(5)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE SEQUENCE {schema}.clock")
        for i in range(3):
            conn.execute(f"CREATE SEQUENCE {schema}.last_{i}")
    try:
        yield schema
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def test_the_claims_take_turns_one_statement_at_a_time(pg_dsn: str, sequences: str) -> None:
    # Sequences are not rolled back: each target's statement records, in last_<i>, the tick of
    # the shared clock at which it ran last, and the clock counts every statement run.
    targets = [
        (pg_dsn, f"SELECT setval('{sequences}.last_{i}', nextval('{sequences}.clock'))", {})
        for i in range(3)
    ]
    runs = 5
    measured = explain_in_turn(targets, runs)

    assert len(measured) == 3
    for figures in measured:
        assert figures["claim_exec_ms"] > 0
        assert figures["claim_buffers"] >= 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        ticks = conn.execute(f"SELECT last_value FROM {sequences}.clock").fetchone()
        last = [
            conn.execute(f"SELECT last_value FROM {sequences}.last_{i}").fetchone()
            for i in range(3)
        ]
    assert ticks is not None and all(row is not None for row in last)
    # A warm-up round, then `runs` measured rounds, each running every target once...
    assert ticks[0] == 3 * (runs + 1)
    # ... in turn: the last round ran the three targets one after the other (one target's
    # statements all in a row would leave them `runs + 1` ticks apart).
    final = sorted(row[0] for row in last if row is not None)
    assert final == [ticks[0] - 2, ticks[0] - 1, ticks[0]]
