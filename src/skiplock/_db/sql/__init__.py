"""All SQL skiplock runs, loaded from the named blocks of the ``.sql`` files beside this module.

Runtime code never writes SQL: it asks :class:`Queries` for a statement by name.  Table and
schema names are composed with :mod:`psycopg.sql` identifiers, so a schema name can never
change the meaning of a statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from psycopg import sql

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Statement:
    name: str
    description: str
    text: str


def parse_blocks(source: str) -> dict[str, Statement]:
    """Split a ``.sql`` file into its ``-- name:`` blocks (dropping the header before them)."""
    parts = _NAME.split(source)
    statements: dict[str, Statement] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip("\n").splitlines()
        description = " ".join(
            line.removeprefix("--").strip() for line in lines if line.startswith("--")
        )
        text = "\n".join(line for line in lines if not line.startswith("--")).strip()
        if name in statements:
            raise ValueError(f"SQL statement {name!r} is defined twice")
        statements[name] = Statement(name, description, text)
    return statements


@cache
def _load(filename: str) -> dict[str, Statement]:
    return parse_blocks(resources.files(__package__).joinpath(filename).read_text("utf-8"))


@cache
def statements() -> dict[str, Statement]:
    """Every named statement of every ``.sql`` file beside this module, by name."""
    found: dict[str, Statement] = {}
    files = sorted(
        f.name for f in resources.files(__package__).iterdir() if f.name.endswith(".sql")
    )
    for filename in files:
        for name, statement in _load(filename).items():
            if name in found:
                raise ValueError(f"SQL statement {name!r} is defined in two files")
            found[name] = statement
    return found


class Queries:
    """The named statements composed for one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.channel: str = notify_channel(schema)
        names = {
            "schema": sql.Identifier(schema),
            "jobs": sql.Identifier(schema, "jobs"),
            "archive": sql.Identifier(schema, "jobs_archive"),
            "migrations": sql.Identifier(schema, "migrations"),
            "queues": sql.Identifier(schema, "queues"),
            "leaders": sql.Identifier(schema, "leaders"),
            "ticks": sql.Identifier(schema, "periodic_ticks"),
            "held_starts": sql.Identifier(schema, "held_starts"),
            "held_key_slots": sql.Identifier(schema, "held_key_slots"),
            "held_runs": sql.Identifier(schema, "held_runs"),
            "held_key_runs": sql.Identifier(schema, "held_key_runs"),
            "progress": sql.Identifier(schema, "job_progress"),
            "workers": sql.Identifier(schema, "workers"),
            "dependencies": sql.Identifier(schema, "job_dependencies"),
            "jobs_id_seq": sql.Identifier(schema, "jobs_id_seq"),
            "channel": sql.Identifier(self.channel),
            "entity_key_running": sql.Identifier(schema, "entity_key_running"),
            "entity_key_held": sql.Identifier(schema, "entity_key_held"),
            "entity_key_hold": sql.Identifier(schema, "entity_key_hold"),
            "entity_key_locked_by_worker": sql.Identifier(schema, "entity_key_locked_by_worker"),
            "may_write_jobs": sql.Identifier(schema, "may_write_jobs"),
            "xact_running": sql.Identifier(schema, "xact_running"),
            "held_run_mark": sql.Identifier(schema, "held_run_mark"),
            "attempt_log_append": sql.Identifier(schema, "attempt_log_append"),
            "key_limited": sql.Identifier(schema, "key_limited"),
            "key_limits": sql.Identifier(schema, "key_limits"),
            "finished_wait_bucket": sql.Identifier(schema, "finished_wait_bucket"),
            "finished_counts": sql.Identifier(schema, "finished_counts"),
            "finished_counts_add": sql.Identifier(schema, "finished_counts_add"),
        }
        # Rendered once: composing identifiers on every execute costs more than the round trip
        # saves on a fast claim, and the driver caches the conversion of plain SQL text.
        self._composed = {
            name: sql.SQL(sql.SQL(statement.text).format(**names).as_string())
            for name, statement in statements().items()
        }
        for name in LITERAL_LIMIT_STATEMENTS:
            text = self._composed[name].as_string()
            for limit in range(1, SMALL_CLAIM + 1):
                literal = text.replace("%(limit)s", str(limit))
                self._composed[literal_limit_name(name, limit)] = sql.SQL(literal)

    def __getitem__(self, name: str) -> sql.SQL:
        try:
            return self._composed[name]
        except KeyError:
            raise KeyError(f"no SQL statement named {name!r}") from None


# The claims, whose LIMIT decides their plan: PostgreSQL plans them for their parameters at
# every run (a generic plan cannot know the LIMIT; see the header of jobs.sql), which is most of
# a small claim's cost.  For a claim of at most SMALL_CLAIM jobs the number is written into the
# statement instead, one statement per number: its generic plan then knows the LIMIT, costs as
# little as a custom one, and the server reuses it.  Bigger claims keep the parameter
# (docs/design.md, "Where writing the LIMIT in stops paying").
LITERAL_LIMIT_STATEMENTS = ("job_claim", "job_claim_from_queues")
SMALL_CLAIM = 16


def literal_limit_name(name: str, limit: int) -> str:
    """The name of ``name`` with its ``%(limit)s`` written in as ``limit`` (1..SMALL_CLAIM)."""
    return f"{name}_limit_{limit}"


def notify_channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema; the payload of each notification is a queue name."""
    return f"skiplock.{schema}"
