"""The database seam (skiplock._db) read as source: its methods are named after the statements
they run, it depends on nothing of the worker runtime or the faces, and it is the only package
that runs SQL (the doctor, the demo and ``skiplock roles`` too run theirs through it).  Pure:
the source is parsed, nothing runs."""

from __future__ import annotations

import ast
from pathlib import Path

import skiplock
from skiplock._db.seam_async import AsyncSeam
from skiplock._db.sql import statements
from skiplock._db.statements_async import AsyncStatements
from skiplock._db.store_async import AsyncStore

PACKAGE = Path(skiplock.__file__).parent
DB = PACKAGE / "_db"
# The async sources of the store's statements (the sync twins are generated from them; the
# client, client_*async.py, runs none itself: it passes its calls on to the store).
STORE_SOURCES = sorted(p for p in DB.glob("*_async.py") if not p.name.startswith("client_"))
# The rooms of the package that use the seam; the seam may use none of them.
ABOVE_THE_SEAM = (
    "skiplock._runtime",
    "skiplock._cli",
    "skiplock._doctor",
    "skiplock._demo",
    "skiplock.dashboard",
    "skiplock.observability",
    "skiplock.worker",
    "skiplock.app",
    "skiplock.testing",
)
# A method whose statement is chosen by a helper (claim_statement), not written as a literal.
NAMED_THROUGH_A_HELPER = {"job_claim"}


def _methods(path: Path) -> list[tuple[str, set[str]]]:
    """(name, statement names written in its body) of each public method of each class."""
    names = set(statements())
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not (
                item.name.startswith("_")
            ):
                literals = {
                    n.value
                    for n in ast.walk(item)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                found.append((item.name, literals & names))
    return found


def test_the_store_sources_are_found() -> None:
    assert {p.name for p in STORE_SOURCES} >= {"statements_async.py", "store_async.py"}
    assert sum(len(_methods(p)) for p in STORE_SOURCES) > 50


def test_a_method_that_runs_one_statement_is_named_after_it() -> None:
    wrong = [
        f"{path.name}: {name} runs {ran.pop()}"
        for path in STORE_SOURCES
        for name, ran in _methods(path)
        if len(ran) == 1 and name not in ran
    ]
    assert not wrong, wrong


def test_a_method_named_after_a_statement_runs_it() -> None:
    """No method takes a statement's name for another one's work (as ``job_extend_leases``
    once wrapped a ``job_heartbeat`` that ran the statement ``job_extend_leases``)."""
    names = set(statements())
    wrong = [
        f"{path.name}: {name} does not run {name}"
        for path in STORE_SOURCES
        for name, ran in _methods(path)
        if name in names and name not in ran and name not in NAMED_THROUGH_A_HELPER
    ]
    assert not wrong, wrong


def _imports(path: Path) -> list[str]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
    return modules


def test_the_seam_imports_nothing_from_the_runtime_or_the_faces() -> None:
    wrong = [
        f"{path.relative_to(PACKAGE)} imports {module}"
        for path in sorted(DB.rglob("*.py"))
        for module in _imports(path)
        if module.startswith(ABOVE_THE_SEAM)
    ]
    assert not wrong, wrong


def test_a_module_importing_the_runtime_would_be_caught(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text("from skiplock._runtime.presence import SILENT_AFTER\n", "utf-8")
    assert [m for m in _imports(source) if m.startswith(ABOVE_THE_SEAM)]


def _sql_calls(path: Path, root: Path = PACKAGE) -> list[str]:
    """Where a module runs SQL itself: a call of ``.execute``, ``.executemany`` or ``.cursor``,
    or a statement looked up by name (``queries["..."]``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in {"execute", "executemany", "cursor"}:
                found.append(f"{where} .{node.func.attr}(")
        elif isinstance(node, ast.Subscript):
            target = node.value
            label = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if label == "queries":
                found.append(f"{where} queries[...]")
    return found


def test_only_the_seam_runs_sql() -> None:
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if DB not in p.parents]
    assert len(outside) > 30
    wrong = [where for path in outside for where in _sql_calls(path)]
    assert not wrong, wrong


def test_sql_run_outside_the_seam_would_be_caught(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        'conn.execute(app.queries["demo_job_done"], {"id": 1})\n'
        "with conn.cursor() as cur:\n    pass\n",
        "utf-8",
    )
    found = sorted(_sql_calls(source, tmp_path))
    assert found == ["x.py:1 .execute(", "x.py:1 queries[...]", "x.py:2 .cursor("]


def test_the_store_composes_groups_of_statements_over_one_seam() -> None:
    groups = [c for c in AsyncStore.__mro__[1:] if c not in (AsyncSeam, AsyncStatements, object)]
    assert len(groups) >= 8
    for group in groups:
        # A group derives from the seam, or from the one or two groups whose statements it uses.
        assert AsyncSeam in group.__mro__ and len(group.__mro__) <= 5, group.__mro__
    assert all(base.__name__.endswith("Statements") for base in AsyncStore.__bases__)
    own = [name for name, value in vars(AsyncStore).items() if callable(value)]
    assert not own, f"the store composes its groups and defines no statement itself: {own}"
