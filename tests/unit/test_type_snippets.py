"""The snippets of tests/type_snippets under mypy (strict) and pyright (strict), one run of
each over all of them: a ``pass_*.py`` file must type-check, a ``fail_*.py`` file must be
flagged on exactly its lines that end with ``# error`` (misused enqueue arguments, missing
ones, results used as the wrong type, wrong options).  A checker that stopped reading the
public API's types would flag nothing, and this fails."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SNIPPETS = Path(__file__).resolve().parents[1] / "type_snippets"
SRC = Path(__file__).resolve().parents[2] / "src"
MARK = "# error"


def snippet_files() -> list[Path]:
    files = sorted(SNIPPETS.glob("*.py"))
    assert {f.name.split("_")[0] for f in files} == {"pass", "fail"}, files
    return files


def expected() -> dict[str, set[int]]:
    """Per snippet file, the lines a checker must flag (none for a pass_ file)."""
    wanted: dict[str, set[int]] = {}
    for path in snippet_files():
        lines = path.read_text().splitlines()
        marked = {n for n, text in enumerate(lines, 1) if text.rstrip().endswith(MARK)}
        assert bool(marked) == path.name.startswith("fail_"), f"{path.name}: {sorted(marked)}"
        wanted[path.name] = marked
    return wanted


def test_mypy_flags_exactly_the_marked_lines(tmp_path: Path) -> None:
    for path in snippet_files():
        shutil.copy(path, tmp_path / path.name)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull,
         "--config-file", os.devnull, "--follow-imports", "silent",
         *[p.name for p in snippet_files()]],
        cwd=tmp_path, env={**os.environ, "MYPYPATH": str(SRC)}, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    flagged: dict[str, set[int]] = defaultdict(set)
    for line in result.stdout.splitlines():
        if ": error:" in line:
            name, number = line.split(":")[:2]
            flagged[name].add(int(number))
    wanted = expected()
    assert {name: flagged.get(name, set()) for name in wanted} == wanted, result.stdout


@pytest.mark.skipif(
    shutil.which("node") is None and not os.environ.get("SKIPLOCK_REQUIRE_NODE"),
    reason="pyright needs Node.js (node); SKIPLOCK_REQUIRE_NODE=1 makes its absence fail",
)
def test_pyright_flags_exactly_the_marked_lines(tmp_path: Path) -> None:
    for path in snippet_files():
        shutil.copy(path, tmp_path / path.name)
    names = [p.name for p in snippet_files()]
    config = {"typeCheckingMode": "strict", "extraPaths": [str(SRC)], "include": names}
    (tmp_path / "pyrightconfig.json").write_text(json.dumps(config))
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.stdout.strip().startswith("{"), result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)
    flagged: dict[str, set[int]] = defaultdict(set)
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] == "error":
            name = Path(diagnostic["file"]).name
            flagged[name].add(diagnostic["range"]["start"]["line"] + 1)
    wanted = expected()
    shown = json.dumps(report["generalDiagnostics"], indent=1)[:4000]
    assert {name: flagged.get(name, set()) for name in wanted} == wanted, shown
