"""skiplock's own connections give up on a silent peer at both ends: the client's socket carries
TCP keepalives and a user timeout (read back from the kernel), and the server's session has the
same values (read back from the server).  What they do when the network goes silent is
``tests/chaos`` (the ``blackhole`` scenario): there the packets of live connections are dropped.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from skiplock import App

WATCHED = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
           "tcp_user_timeout")  # fmt: skip


def socket_options(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> dict[str, int]:
    sock = socket.socket(fileno=os.dup(conn.fileno()))
    try:
        assert sock.family in (socket.AF_INET, socket.AF_INET6), "not a TCP connection"
        return {
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.close()


SERVER_SQL = "SELECT name, setting FROM pg_settings WHERE name = ANY(%s) ORDER BY name"
EXPECTED_SOCKET = {"keepalive": 1, "idle": 5, "interval": 2, "count": 3, "user_timeout_ms": 10_000}
EXPECTED_SERVER = [("tcp_keepalives_count", "3"), ("tcp_keepalives_idle", "5"),
                   ("tcp_keepalives_interval", "2"), ("tcp_user_timeout", "10000")]  # fmt: skip


@pytest.fixture
def tcp_schema(tcp_pg_dsn: str) -> Iterator[str]:
    """A migrated schema on a server reached over TCP (see tcp_pg_dsn in conftest.py)."""
    name = f"t_{secrets.token_hex(5)}"
    owner = App(tcp_pg_dsn, name)
    owner.migrate()
    try:
        yield name
    finally:
        owner.sync_client.drop_schema()
        owner.close()


@pytest.fixture
def app(tcp_pg_dsn: str, tcp_schema: str) -> Iterator[App]:
    application = App(tcp_pg_dsn, tcp_schema)
    try:
        yield application
    finally:
        application.close()


def test_pooled_connections_watch_for_a_silent_peer_at_both_ends(app: App) -> None:
    with app.sync_client.connection() as conn:
        assert socket_options(conn) == EXPECTED_SOCKET
        assert conn.execute(SERVER_SQL, (list(WATCHED),)).fetchall() == EXPECTED_SERVER

    async def async_side() -> tuple[dict[str, int], list[Any]]:
        try:
            async with app.async_client.connection() as conn:
                cur = await conn.execute(SERVER_SQL, (list(WATCHED),))
                return socket_options(conn), await cur.fetchall()
        finally:
            await app.close_async()

    assert asyncio.run(async_side()) == (EXPECTED_SOCKET, EXPECTED_SERVER)


def test_the_dsn_sets_both_ends_and_a_transaction_pooler_setup_sets_no_session(
    tcp_pg_dsn: str, tcp_schema: str
) -> None:
    pg_dsn, schema = tcp_pg_dsn, tcp_schema
    own = App(make_conninfo(pg_dsn, keepalives_idle=42), schema)
    try:
        with own.sync_client.connection() as conn:
            assert socket_options(conn)["idle"] == 42
            rows = dict(conn.execute(SERVER_SQL, (list(WATCHED),)).fetchall())
            assert rows["tcp_keepalives_idle"] == "42"
    finally:
        own.close()

    with psycopg.connect(pg_dsn, autocommit=True) as plain:  # the server's own defaults
        defaults = plain.execute(SERVER_SQL, (list(WATCHED),)).fetchall()
    pooled = App(pg_dsn, schema, prepared_statements=False)
    try:
        with pooled.sync_client.connection() as conn:
            assert socket_options(conn) == EXPECTED_SOCKET  # the client's side is its own
            assert conn.execute(SERVER_SQL, (list(WATCHED),)).fetchall() == defaults
    finally:
        pooled.close()
    assert defaults != EXPECTED_SERVER
