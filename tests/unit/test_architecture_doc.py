"""docs/architecture.md stays true: its job state machine against the SQL, its modules against
the source tree.

The statuses are those of the ``jobs`` table's CHECK constraint, as the last migration that
sets it leaves it.  A statement *sets* a status when it inserts into ``{jobs}`` (the status
column's CASE, or the column's default) or updates ``{jobs}`` with ``SET ... status = ...``
(the literal, or the literals of the CASE).  The doc must draw every status, every status
each statement sets (as a transition into it naming the statement), and every statement that
deletes from ``{jobs}`` (a transition into ``[*]``); and each transition it draws must be one
its statements make (into its target status, from a status it names or takes as a parameter).
``demo.sql`` writes the demo's own table and is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from skiplock._db.sql import Statement, parse_blocks

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SQL = ROOT / "src" / "skiplock" / "_db" / "sql"
NOT_THE_QUEUE = {"demo.sql"}  # skiplock demo's own table
START = "[*]"  # the insert on the left of an arrow; the row leaving the table on the right

TRANSITION = re.compile(r"^\s*(\[\*\]|\w+)\s*-->\s*(\[\*\]|\w+)\s*:\s*(.+?)\s*$")
STATUS_CHECK = re.compile(r"CHECK\s*\(\s*status\s+IN\s*\(([^)]*)\)", re.I)
STATUS_DEFAULT = re.compile(r"\bstatus\s+text\s+NOT NULL\s+DEFAULT\s+'(\w+)'", re.I)
SET_STATUS = re.compile(r"(?:\bSET|,)\s*status\s*=\s*('\w+'|CASE\b.*?\bEND\b)", re.I | re.S)
CASE_RESULT = re.compile(r"\b(?:THEN|ELSE)\s+'(\w+)'", re.I)
LITERAL = re.compile(r"'(\w+)'")
INSERT_COLUMNS = re.compile(r"INSERT INTO \{jobs\}\s*(?:AS \w+\s*)?\(([^)]*)\)", re.I)


@dataclass(frozen=True)
class Transition:
    source: str
    target: str
    statements: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.source} --> {self.target}: {', '.join(self.statements)}"


def migrations() -> list[str]:
    return [p.read_text() for p in sorted((SQL / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))]


@cache
def statuses() -> frozenset[str]:
    """The jobs table's statuses, as the last migration that constrains them leaves them."""
    checks = [m for text in migrations() for m in STATUS_CHECK.findall(text)]
    assert checks, "no CHECK (status IN (...)) in the migrations"
    return frozenset(LITERAL.findall(checks[-1]))


def default_status() -> str:
    defaults = [m for text in migrations() for m in STATUS_DEFAULT.findall(text)]
    assert defaults, "no default status in the migrations"
    return defaults[-1]


@cache
def queue_statements() -> dict[str, Statement]:
    found: dict[str, Statement] = {}
    for path in sorted(SQL.glob("*.sql")):
        if path.name not in NOT_THE_QUEUE:
            found.update(parse_blocks(path.read_text()))
    return found


def inserts(statement: Statement) -> bool:
    return bool(re.search(r"INSERT INTO \{jobs\}", statement.text, re.I))


def deletes(statement: Statement) -> bool:
    return bool(re.search(r"DELETE FROM \{jobs\}", statement.text, re.I))


def statuses_set(statement: Statement) -> set[str]:
    """The statuses the statement may give a row of ``{jobs}``."""
    found: set[str] = set()
    for expression in SET_STATUS.findall(statement.text):
        if re.search(r"UPDATE \{jobs\}", statement.text, re.I):
            found |= set(LITERAL.findall(expression))
    columns = INSERT_COLUMNS.search(statement.text)
    if columns:
        if re.search(r"\bstatus\b", columns.group(1)):
            found |= set(CASE_RESULT.findall(statement.text))
        else:
            found.add(default_status())
    return found & statuses()


def mentions(statement: Statement, status: str) -> bool:
    """Whether the statement names the status it moves jobs from, or takes it as a parameter
    (``%(status)s``, ``%(statuses)s``: the caller says which)."""
    said = f"{statement.text} {statement.description}"
    return bool(re.search(rf"\b{status}\b|%\(status(?:es)?\)s", said))


def doc_text() -> str:
    return DOC.read_text()


def state_diagram() -> list[Transition]:
    """The transitions of the doc's ``stateDiagram-v2`` block."""
    blocks = re.findall(r"^```mermaid\n(.*?)^```", doc_text(), re.M | re.S)
    diagrams = [b for b in blocks if b.lstrip().startswith("stateDiagram")]
    assert len(diagrams) == 1, "docs/architecture.md has one mermaid stateDiagram block"
    transitions = []
    for line in diagrams[0].splitlines()[1:]:
        if not line.strip() or line.strip().startswith("%%"):
            continue
        match = TRANSITION.match(line)
        assert match, f"not a transition 'a --> b: statement, ...': {line!r}"
        names = tuple(n.strip() for n in match.group(3).split(","))
        transitions.append(Transition(match.group(1), match.group(2), names))
    return transitions


def test_the_diagram_draws_exactly_the_statuses_of_the_jobs_table() -> None:
    drawn = {s for t in state_diagram() for s in (t.source, t.target)} - {START}
    assert drawn == statuses(), (
        f"statuses in the SQL but not drawn: {sorted(statuses() - drawn)}; "
        f"drawn but not in the SQL: {sorted(drawn - statuses())}"
    )


def test_every_drawn_transition_is_made_by_the_statements_it_names() -> None:
    statements = queue_statements()
    wrong = []
    for transition in state_diagram():
        for name in transition.statements:
            statement = statements.get(name)
            if statement is None:
                wrong.append(f"{transition}: no statement {name!r} in src/skiplock/_db/sql")
                continue
            if transition.source == START and not inserts(statement):
                wrong.append(f"{transition}: {name} inserts no job")
            if transition.source != START and not mentions(statement, transition.source):
                wrong.append(f"{transition}: {name} never mentions {transition.source!r}")
            if transition.target == START and not deletes(statement):
                wrong.append(f"{transition}: {name} deletes no job")
            if transition.target != START and transition.target not in statuses_set(statement):
                wrong.append(f"{transition}: {name} sets only {sorted(statuses_set(statement))}")
    assert not wrong, "\n".join(wrong)


def test_every_statement_that_sets_a_status_or_deletes_a_job_is_drawn() -> None:
    drawn = {(name, t.target) for t in state_diagram() for name in t.statements}
    inserted = {name for t in state_diagram() if t.source == START for name in t.statements}
    missing = []
    for name, statement in queue_statements().items():
        missing += [
            f"{name} --> {s}" for s in sorted(statuses_set(statement)) if (name, s) not in drawn
        ]
        if deletes(statement) and (name, START) not in drawn:
            missing.append(f"{name} --> [*] (it deletes jobs)")
        if inserts(statement) and name not in inserted:
            missing.append(f"[*] --> ...: {name} (it inserts jobs)")
    assert not missing, "statements the state diagram of docs/architecture.md lacks:\n" + "\n".join(
        missing
    )


def test_the_rules_see_what_they_are_meant_to() -> None:
    """The heuristics above, on statements whose effect is known."""
    statements = queue_statements()
    assert statuses() >= {"waiting", "pending", "running", "done", "failed", "cancelled"}
    assert statuses_set(statements["job_fail_many"]) == {"failed", "scheduled", "pending"}
    assert statuses_set(statements["job_claim"]) == {"running"}
    assert statuses_set(statements["job_insert_dependent"]) == {"waiting", "scheduled", "pending"}
    assert statuses_set(statements["job_request_cancel"]) == set()  # a flag, not a status
    assert deletes(statements["job_prune_finished"]) and not deletes(statements["job_claim"])


def test_every_module_the_doc_names_exists() -> None:
    named = set(re.findall(r"\bskiplock(?:\.\w+)+", doc_text()))
    assert len(named) > 10
    src = ROOT / "src"
    missing = [
        name
        for name in sorted(named)
        if not (src / (name.replace(".", "/") + ".py")).exists()
        and not (src / name.replace(".", "/") / "__init__.py").exists()
    ]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
