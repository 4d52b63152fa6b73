"""The numbered schema migrations shipped in ``sql/migrations/NNNN_name.sql``.

Each file is applied once, in order, inside one transaction that holds an advisory lock, and
recorded in the schema's ``migrations`` table; ``skiplock migrate --sql`` prints them instead.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib import resources

from psycopg import sql

from skiplock._db.sql import Queries
from skiplock.errors import SchemaNotMigrated

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    def statement(self, schema: str) -> sql.Composed:
        return sql.SQL(self.text).format(schema=sql.Identifier(schema))


def all_migrations() -> list[Migration]:
    folder = resources.files("skiplock._db.sql").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


def check_migrated(schema: str, missing: Sequence[int]) -> None:
    """Refuse a schema that lacks migrations this version needs (``missing``, as the
    ``migration_pending`` statement found them): all of them means the tables are not there."""
    if missing:
        every = [m.version for m in all_migrations()]
        raise SchemaNotMigrated(schema, [] if list(missing) == every else missing)


def render_sql(schema: str, versions: Collection[int] | None = None) -> str:
    """The migrations numbered ``versions`` (default: every one) as one SQL script a DBA can
    review and run by hand."""
    queries = Queries(schema)
    chosen = [m for m in all_migrations() if versions is None or m.version in versions]
    numbers = ", ".join(f"{m.version:04d}" for m in chosen)
    parts = [
        f"-- skiplock schema migrations {numbers} for schema {schema}; run in one transaction.",
        "BEGIN;",
        queries["migration_prepare"].as_string().rstrip().rstrip(";") + ";",
    ]
    for m in chosen:
        parts.append(f"\n-- migration {m.version:04d}_{m.name}")
        parts.append(m.statement(schema).as_string())
        record = sql.SQL(
            "INSERT INTO {} (version, name) VALUES ({}, {}) ON CONFLICT (version) DO NOTHING;"
        ).format(sql.Identifier(schema, "migrations"), m.version, m.name)
        parts.append(record.as_string())
    parts.append("COMMIT;")
    return "\n".join(parts) + "\n"
