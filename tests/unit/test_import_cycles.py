"""No import cycles among the modules of ``src/skiplock`` and of ``bench``.

Every ``import`` and ``from ... import`` of a module is read with :mod:`ast` and resolved to
the module of the package it names (``from skiplock._doctor import locks`` is an edge to
``skiplock._doctor.locks``; ``from skiplock.app import App`` to ``skiplock.app``; relative
imports resolved from the importing module).  The graph takes all three kinds of import:

- module-level ones, which run when the module loads;
- imports inside a function, which run later: moving an import into a function is the usual
  way to dodge a cycle at load time, and it leaves the two modules depending on each other;
- imports under ``if TYPE_CHECKING:``, which never run: the same dodge for annotations.

So a cycle is reported whichever kind of import closes it, each edge named with its kind and
line.  The implicit import of a parent package (importing ``a.b.c`` runs ``a/__init__`` and
``a/b/__init__``) is not an edge: the root package re-exports the user's vocabulary, and every
module under it would otherwise be in one cycle with it.  A module importing the root package
by name (``from skiplock import __version__``) is an edge, and the root imports nearly
everything, so the internals take what they need from the module that defines it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "src" / "skiplock", ROOT / "bench")

# Edges allowed to close a cycle while work on both ends is under way (none today); each
# names who removes it.  A known edge that is gone must be deleted from here (see the test).
KNOWN: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "module", "function" or "TYPE_CHECKING"
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.kind} import, line {self.line})"


def modules(package: Path) -> dict[str, Path]:
    """Every module of the package folder, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> Iterator[str]:
    """The dotted names an import statement may reach (a module, or a name in one)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    for alias in node.names:
        yield f"{module}.{alias.name}"


def imports(name: str, path: Path, known: Iterable[str]) -> list[Edge]:
    """The module's imports of modules in ``known``, each with its kind and line."""
    known = set(known)
    is_package = path.name == "__init__.py"
    edges: list[Edge] = []

    def resolve(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    def visit(nodes: Iterable[ast.AST], kind: str) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for dotted in _targets(node, name, is_package):
                    target = resolve(dotted)
                    edge = Edge(name, target or "", kind, node.lineno)
                    if target is not None and target != name and edge not in edges:
                        edges.append(edge)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.body, "TYPE_CHECKING")
                visit(node.orelse, kind)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                inner = "TYPE_CHECKING" if kind == "TYPE_CHECKING" else "function"
                visit(ast.iter_child_nodes(node), inner)
            else:
                visit(ast.iter_child_nodes(node), kind)

    visit(ast.parse(path.read_text(), str(path)).body, "module")
    return edges


def import_graph(packages: Iterable[Path]) -> dict[str, list[Edge]]:
    found: dict[str, Path] = {}
    for package in packages:
        found.update(modules(package))
    return {name: imports(name, path, found) for name, path in found.items()}


def cycles(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted; a module importing itself is not an edge."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for edge in edges:
                if edge.target not in index:
                    index[edge.target] = low[edge.target] = len(index)
                    stack.append(edge.target)
                    on_stack.add(edge.target)
                    work.append((edge.target, iter(graph[edge.target])))
                    break
                if edge.target in on_stack:
                    low[node] = min(low[node], index[edge.target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def without(
    graph: dict[str, list[Edge]], dropped: Iterable[tuple[str, str]]
) -> dict[str, list[Edge]]:
    drop = set(dropped)
    return {n: [e for e in edges if (e.source, e.target) not in drop] for n, edges in graph.items()}


def describe(graph: dict[str, list[Edge]], component: list[str]) -> str:
    inside = set(component)
    lines = [f"cycle among {', '.join(component)}:"]
    lines += [f"    {e}" for name in component for e in graph[name] if e.target in inside]
    return "\n".join(lines)


def test_no_module_of_the_package_or_the_benchmarks_is_in_an_import_cycle() -> None:
    graph = without(import_graph(PACKAGES), KNOWN)
    found = cycles(graph)
    assert not found, (
        "import cycles (move the shared piece to the module it belongs to, or have the lower "
        "module declare what it needs as a Protocol):\n"
        + "\n".join(describe(graph, c) for c in found)
    )


def test_each_known_exception_is_still_an_edge_and_still_closes_a_cycle() -> None:
    """A known exception that was fixed is taken off the list, so that it cannot come back."""
    graph = import_graph(PACKAGES)
    for source, target in KNOWN:
        assert any(e.target == target for e in graph.get(source, [])), (
            f"{source} no longer imports {target}: delete it from KNOWN"
        )
        assert any(source in c and target in c for c in cycles(graph)), (
            f"{source} -> {target} closes no cycle any more: delete it from KNOWN"
        )


def test_the_graph_sees_every_kind_of_import() -> None:
    graph = import_graph(PACKAGES)
    kinds = {(e.source, e.target): e.kind for edges in graph.values() for e in edges}
    assert kinds[("skiplock.app", "skiplock.task")] == "module"
    assert kinds[("skiplock.task", "skiplock._db.client_sync")] == "TYPE_CHECKING"
    assert kinds[("bench.ceiling", "bench.seed")] == "module"  # relative, in bench
    assert kinds[("skiplock._doctor.runner", "skiplock._doctor.locks")] == "module"  # from pkg


@pytest.mark.parametrize("kind", ["module", "function", "TYPE_CHECKING"])
def test_a_cycle_closed_by_any_kind_of_import_is_found(tmp_path: Path, kind: str) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import B\n")
    closing = {
        "module": "from pkg import a\n",
        "function": "def f():\n    from .a import x\n",
        "TYPE_CHECKING": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n",
    }[kind]
    (package / "b.py").write_text(closing + "B = 1\n")
    (package / "c.py").write_text("import pkg.a\nimport pkg.b\n")  # reaches the cycle, not in it
    graph = import_graph([package])
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
    (edge,) = graph["pkg.b"]
    assert (edge.target, edge.kind) == ("pkg.a", kind)
