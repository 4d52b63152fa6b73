"""The settings that make both ends of skiplock's connections give up on a silent peer: the
client's (libpq keyword arguments) and the server's (``session_watch_client``), with the DSN's
own values winning one by one."""

from __future__ import annotations

from skiplock._db.connections import DEAD_PEER_PARAMS, connect_kwargs, server_watch_settings

DSN = "postgresql://app@db.example:5432/shop"


def test_every_connection_gives_up_on_a_silent_server_by_default() -> None:
    kwargs = connect_kwargs(DSN)
    assert {k: kwargs[k] for k in DEAD_PEER_PARAMS} == {
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }
    # A heartbeat stuck on a dead connection fails before the next one is due (every lease / 3,
    # 10 s by default), so that one, on a new connection, still finds the 30 s leases held.
    assert kwargs["tcp_user_timeout"] / 1000 <= 30 / 3


def test_the_dsn_keeps_each_setting_it_names() -> None:
    kwargs = connect_kwargs(DSN + "?keepalives_idle=60&tcp_user_timeout=0")
    assert "keepalives_idle" not in kwargs and "tcp_user_timeout" not in kwargs  # libpq reads it
    assert kwargs["keepalives_interval"] == 2 and kwargs["keepalives_count"] == 3
    settings = server_watch_settings(DSN + "?keepalives_idle=60&tcp_user_timeout=0")
    assert settings == {"idle": "60", "interval": "2", "count": "3", "user_timeout": "0"}


def test_the_server_side_watches_with_the_clients_values() -> None:
    assert server_watch_settings(DSN) == {
        "idle": "5",
        "interval": "2",
        "count": "3",
        "user_timeout": "10000",
    }


def test_keepalives_off_in_the_dsn_turns_the_servers_watch_off_too() -> None:
    assert server_watch_settings(DSN + "?keepalives=0") is None
    assert "keepalives" not in connect_kwargs(DSN + "?keepalives=0")
