"""The conformance suite's fixture: every test runs once per backend (helpers.backends)."""

from __future__ import annotations

import pytest

from helpers.backends import HARNESSES, Harness, PostgresHarness


@pytest.fixture(params=HARNESSES)
def harness(request: pytest.FixtureRequest, pg_dsn: str) -> Harness:
    """A backend's harness on a store of the test's own (PostgreSQL: a migrated schema)."""
    if request.param == "postgres":
        return PostgresHarness(pg_dsn, request.getfixturevalue("schema"))
    raise AssertionError(f"no harness for backend {request.param!r}")
