"""The named SQL statements and the migrations script (skiplock._db.sql, skiplock._db.migrations).

Pure: parsing and composing only, no database (the server-side check that every statement
is valid SQL is in tests/integration/test_migrations.py).
"""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

import pytest

import skiplock
from skiplock._db import migrations
from skiplock._db.sql import Queries, Statement, notify_channel, parse_blocks, statements

PACKAGE = Path(skiplock.__file__).parent
SQL_FILES = sorted((PACKAGE / "_db" / "sql").glob("*.sql"))
PLACEHOLDER = re.compile(r"\{(\w+)\}")
NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _strip_literals(text: str) -> str:
    """The SQL with its quoted literals and identifiers blanked out."""
    return re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", text)


def test_there_are_sql_files_with_statements() -> None:
    assert {p.name for p in SQL_FILES} >= {"jobs.sql", "migrations.sql"}
    assert len(statements()) >= 15


def test_statement_names_are_unique_across_all_files() -> None:
    names: list[str] = []
    for path in SQL_FILES:
        names += NAME_LINE.findall(path.read_text("utf-8"))
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert set(names) == set(statements())


@pytest.mark.parametrize("name", sorted(statements()))
def test_every_statement_parses_has_a_description_and_well_formed_sql(name: str) -> None:
    statement = statements()[name]
    assert statement.name == name
    assert re.fullmatch(r"[a-z]+(_[a-z]+)+", name), "names are <noun>_<verb...>"
    assert len(statement.description) >= 15, f"{name} needs a one-line description"
    text = statement.text
    assert text and not text.startswith("--")
    assert text.rstrip().endswith(";")
    # Braces only as {identifier} placeholders (Queries checks each is known by composing).
    fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    assert all(re.fullmatch(r"[a-z_]+", f) for f in fields), fields
    # Bound parameters are %(name)s; a lone % must be doubled.
    bare = re.sub(r"%\(\w+\)s|%%", "", text)
    assert "%" not in bare, f"{name}: stray % (write %% or %(param)s)"
    # Balanced parentheses and closed quotes outside literals.
    code = _strip_literals(text)
    assert "'" not in code.replace("''", "") and '"' not in code
    depth = 0
    for char in code:
        depth += {"(": 1, ")": -1}.get(char, 0)
        assert depth >= 0, f"{name}: ')' before '('"
    assert depth == 0, f"{name}: unbalanced parentheses"


def _composed(queries: Queries, name: str) -> str:
    return queries[name].as_string(None)


@pytest.mark.parametrize("schema", ["skiplock", "my_app_2"])
def test_queries_compose_every_statement_with_the_schema_quoted(schema: str) -> None:
    queries = Queries(schema)
    for name, statement in statements().items():
        text = _composed(queries, name)
        placeholders = set(PLACEHOLDER.findall(statement.text))
        if placeholders:
            assert f'"{schema}"' in text or f'"skiplock.{schema}"' in text, name
            # Every mention of the schema is inside double quotes.
            unquoted = re.sub(r'"(?:[^"]|"")*"', "", text)
            assert not re.search(rf"\b{schema}\b", unquoted), f"{name}: bare {schema}"
        assert not PLACEHOLDER.search(text), f"{name}: placeholder left over"
    assert _composed(queries, "job_get").count(f'"{schema}"."jobs"') == 1


def test_a_hostile_schema_name_stays_one_quoted_identifier() -> None:
    # Queries itself does not validate (App does); the identifiers must still be safe.
    queries = Queries('x"; DROP TABLE y; --')
    text = _composed(queries, "job_get")
    assert '"x""; DROP TABLE y; --"."jobs"' in text
    assert _composed(queries, "channel_listen") == 'LISTEN "skiplock.x""; DROP TABLE y; --";'


def test_unknown_statement_name_is_a_key_error_naming_it() -> None:
    with pytest.raises(KeyError, match="no SQL statement named 'job_nope'"):
        Queries("s")["job_nope"]


def test_notify_channel_is_per_schema() -> None:
    assert notify_channel("a") != notify_channel("b")
    assert Queries("a").channel == notify_channel("a")


# -- statement names used by the code ----------------------------------------------------


def _referenced_statement_names() -> dict[str, list[str]]:
    """String literals the code passes as statement names, with where they occur.

    Explicit uses: ``self._rows|_jobs|_fetch(conn, "x", ...)``,
    ``<...>queries["x"]``; plus every literal named like a statement (``job_*``,
    ``migration_*`` ...: the first words of the statement names), which catches names picked
    through a dict or a tuple assignment before being passed on.
    """
    nouns = sorted({name.split("_")[0] for name in statements()})
    looks_like_statement = re.compile(rf"({'|'.join(nouns)})_[a-z_]+")
    found: dict[str, list[str]] = {}
    explicit = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
        # Table names handed to sql.Identifier("schema", "periodic_ticks"), CLI parameter
        # names (click.argument("job_id")) and the dashboard's route parameters
        # (request.path_params["job_id"]) are not statements.
        identifiers = {
            id(arg)
            for call in ast.walk(tree)
            if isinstance(call, ast.Call)
            and (
                getattr(call.func, "attr", getattr(call.func, "id", "")) == "Identifier"
                or getattr(getattr(call.func, "value", None), "id", "") == "click"
            )
            for arg in call.args
        } | {
            id(item.slice)
            for item in ast.walk(tree)
            if isinstance(item, ast.Subscript) and getattr(item.value, "attr", "") == "path_params"
        }
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("_rows", "_jobs", "_fetch") and len(node.args) >= 2:
                    arg = node.args[1]
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        names.append(arg.value)
                        explicit += 1
            elif isinstance(node, ast.Subscript):
                target = node.value
                label = (
                    target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                )
                if label.endswith("queries") and isinstance(node.slice, ast.Constant):
                    names.append(node.slice.value)
                    explicit += 1
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and looks_like_statement.fullmatch(node.value)
                and id(node) not in identifiers
            ):
                names.append(node.value)
            for name in names:
                found.setdefault(name, []).append(f"{path.name}:{node.lineno}")
    assert explicit >= 20, "the scan found too few explicit uses: has the store changed shape?"
    return found


def test_every_statement_name_used_in_the_code_exists() -> None:
    used = _referenced_statement_names()
    known = set(statements())
    missing = {name: where for name, where in used.items() if name not in known}
    assert not missing, f"code asks for SQL statements that do not exist: {missing}"


def test_every_statement_is_used_by_the_code() -> None:
    unused = set(statements()) - set(_referenced_statement_names())
    assert not unused, f"SQL statements nothing runs: {sorted(unused)}"


# -- parse_blocks ------------------------------------------------------------------------


def test_parse_blocks_splits_names_descriptions_and_text() -> None:
    source = (
        "-- header comment, dropped\n\n"
        "-- name: thing_get\n-- Get a thing.\n-- Second line.\nSELECT 1;\n\n"
        "-- name: thing_put\n-- Put it.\nINSERT INTO {jobs}\n-- inline note\nVALUES (1);\n"
    )
    blocks = parse_blocks(source)
    assert list(blocks) == ["thing_get", "thing_put"]
    assert blocks["thing_get"] == Statement("thing_get", "Get a thing. Second line.", "SELECT 1;")
    assert blocks["thing_put"].text == "INSERT INTO {jobs}\nVALUES (1);"


def test_parse_blocks_rejects_duplicate_names() -> None:
    source = "-- name: a_b\n-- One.\nSELECT 1;\n-- name: a_b\n-- Two.\nSELECT 2;\n"
    with pytest.raises(ValueError, match="'a_b' is defined twice"):
        parse_blocks(source)


def test_parse_blocks_of_a_file_without_names_is_empty() -> None:
    assert parse_blocks("-- just a comment\nSELECT 1;\n") == {}


# -- migrations --------------------------------------------------------------------------


def test_migrations_are_numbered_one_to_n_with_names_and_sql() -> None:
    found = migrations.all_migrations()
    assert [m.version for m in found] == list(range(1, len(found) + 1))
    assert found[0].name == "initial"
    for m in found:
        assert re.fullmatch(r"\w+", m.name)
        assert any(ddl in m.text.upper() for ddl in ("CREATE", "ALTER", "COMMENT ON"))
        # Migrations only use {schema}; the rest is plain SQL.
        fields = {f for _, f, _, _ in string.Formatter().parse(m.text) if f is not None}
        assert fields == {"schema"}


def test_migration_files_on_disk_match_all_migrations() -> None:
    files = sorted(p.name for p in (PACKAGE / "_db" / "sql" / "migrations").glob("*.sql"))
    assert files == [f"{m.version:04d}_{m.name}.sql" for m in migrations.all_migrations()]


def test_migration_statement_quotes_the_schema() -> None:
    first = migrations.all_migrations()[0]
    text = first.statement("my_schema").as_string(None)
    assert 'CREATE TABLE "my_schema".jobs' in text
    assert "{schema}" not in text


@pytest.mark.parametrize("schema", ["skiplock", "app_jobs"])
def test_render_sql_is_one_transaction_with_every_migration(schema: str) -> None:
    script = migrations.render_sql(schema)
    lines = [line for line in script.splitlines() if line.strip()]
    begin = lines.index("BEGIN;")
    assert lines[-1] == "COMMIT;"
    assert script.count("BEGIN;") == 1 and script.count("COMMIT;") == 1
    assert all(line.startswith("--") for line in lines[:begin])
    assert f'CREATE SCHEMA IF NOT EXISTS "{schema}";' in script
    assert f'CREATE TABLE IF NOT EXISTS "{schema}"."migrations"' in script
    position = 0
    for m in migrations.all_migrations():
        header = f"-- migration {m.version:04d}_{m.name}"
        assert header in script
        assert script.index(header) > position
        position = script.index(header)
        body = m.statement(schema).as_string(None)
        assert body in script
        record = (
            f'INSERT INTO "{schema}"."migrations" (version, name) '
            f"VALUES ({m.version}, '{m.name}') ON CONFLICT (version) DO NOTHING;"
        )
        assert record in script
    assert f'CREATE TABLE "{schema}".jobs' in script
    unquoted = re.sub(r'"(?:[^"]|"")*"', "", script)
    assert not re.search(rf"\b{schema}\b", re.sub(r"--[^\n]*", "", unquoted))
    # No placeholder left unformatted (regex quantifiers and jsonpath levels have braces).
    assert not re.search(r"\{(?:[A-Za-z_]\w*)?\}", re.sub(r"--[^\n]*", "", script))
