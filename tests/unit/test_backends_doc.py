"""docs/backends.md lists the backend contract's semantics, each with its test: every test of
the conformance suite is listed, and every test listed exists.  Pure: the sources are read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "backends.md"
SUITE = ROOT / "tests" / "conformance" / "test_contract.py"


def suite_tests() -> set[str]:
    tree = ast.parse(SUITE.read_text("utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def listed_tests() -> set[str]:
    """The test named in the last column of each row of the doc's tables."""
    rows = re.findall(r"^\|.*\| `(test_\w+)` \|$", DOC.read_text("utf-8"), re.MULTILINE)
    return set(rows)


def test_every_test_of_the_conformance_suite_is_listed_with_its_semantic() -> None:
    tests = suite_tests()
    assert len(tests) >= 20
    # The adapter's own check is named in the text, not the table: it is no semantic.
    assert listed_tests() == tests - {"test_the_postgres_backend_is_a_backend"}
