"""bench/db.py's ``as_url``: the URL given to PGQueuer (asyncpg) and Procrastinate (psycopg)
names the same server and database as the DSN it came from, a unix socket's directory too."""

from __future__ import annotations

from bench.db import as_url
from psycopg import conninfo


def parsed(url: str) -> dict[str, str]:
    return {k: str(v) for k, v in conninfo.conninfo_to_dict(url).items() if v is not None}


def test_a_socket_directory_stays_the_host_and_the_database_its_name() -> None:
    url = as_url("postgresql://postgres:@/postgres?host=/tmp/skiplock-test-pg-0")
    got = parsed(url)
    assert got["host"] == "/tmp/skiplock-test-pg-0"
    assert got["dbname"] == "postgres"
    assert got["port"] == "5432" and got["user"] == "postgres"


def test_a_tcp_host_port_password_and_sslmode_come_through() -> None:
    url = as_url("host=db.example port=6543 dbname=jobs user=app password=p@ss/w sslmode=require")
    assert parsed(url) == {
        "host": "db.example",
        "port": "6543",
        "dbname": "jobs",
        "user": "app",
        "password": "p@ss/w",
        "sslmode": "require",
    }
