"""Comments and docstrings in src say what the code does and why in a sentence or two; the
figures behind a decision (timings, percentages, speed-ups) live in docs/design.md, linked as
``docs/design.md, "Its title"``.  This test reads every comment and docstring of src's Python
files and every ``--`` comment of its .sql files, and fails on one that carries a measurement."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "skiplock"

NUMBER = r"\d+(?:[.,]\d+)?"
SPAN = rf"{NUMBER}(?:\s*(?:-|\u2013|to|vs\.?|->|→)\s*{NUMBER})?"
MEASUREMENT = re.compile(
    "|".join(
        (
            rf"(?<![\w.]){SPAN}\s*(?:us|µs|ms)\b",  # sub-second timings
            rf"(?<![\w.]){SPAN}\s*%",  # percentages (%% in a statement's body)
            rf"(?<![\w.]){NUMBER}\s*x\s+(?:faster|slower|more|less|fewer)\b",  # speed-ups
            r"(?<![\w.])\d+\.\d{2,}\s*s\b",  # seconds to the hundredth
            rf"(?<![\w.]){NUMBER}\s*jobs/s\b",  # rates
            r"\bmeasured\b|\bpgbench\b|\bEXPLAIN ANALYZE\b|\bmedian\b",  # where figures come from
        )
    ),
    re.I,
)
# Figures in comments that are settings or limits, not measurements: (file, text).
ALLOWED = {
    # A bound of the rate estimate, not a timing.
    ("_runtime/capacity.py", "10 ms"),
    # The jitter of the default backoff, a setting.
    ("retry.py", "25 %"),
}


def python_comments(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        # Docstrings, and the strings that document an attribute (a string statement after it).
        for stmt in body:
            value = stmt.value if isinstance(stmt, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((stmt.lineno, value.value))
    return found


def sql_comments(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        # A comment starts at the first -- outside a string literal.
        quoted = False
        for i, char in enumerate(line):
            if char == "'":
                quoted = not quoted
            elif not quoted and line.startswith("--", i):
                found.append((number, line[i + 2 :]))
                break
    return found


def blocks(comments: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Comments on consecutive lines joined into one, so that a figure may wrap."""
    joined: list[tuple[int, str]] = []
    last = -1
    for line, text in sorted(comments):
        if joined and line == last + 1:
            joined[-1] = (joined[-1][0], f"{joined[-1][1]} {text}")
        else:
            joined.append((line, text))
        last = line + text.count("\n")
    return [(line, re.sub(r"\s+", " ", text)) for line, text in joined]


def measurements(path: Path) -> list[str]:
    comments = sql_comments(path) if path.suffix == ".sql" else python_comments(path)
    relative = path.relative_to(SRC).as_posix()
    hits = []
    for line, text in blocks(comments):
        for match in MEASUREMENT.finditer(text):
            if (relative, match.group(0)) not in ALLOWED:
                hits.append(f"{relative}:{line}: {match.group(0)!r}")
    return hits


def sources() -> list[Path]:
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".py", ".sql"))


def test_the_pattern_catches_the_figures_that_were_moved() -> None:
    for figure in (
        "took 1.3 us more per job",
        "cost a held-lock drain 5-18% of its jobs/s",
        "the claim of 100 took 8-12%% longer, EXPLAIN ANALYZE",
        "0.68 -> 0.39 ms back to back",
        "from 0.31 to 0.59 s on a million jobs",
        "about 3x faster",
        "12,200 jobs/s",
        "(measured 2026-12-05)",
    ):
        assert MEASUREMENT.search(figure), figure
    for setting in ("every 0.1 s", "at most 2 s on a lock", "integers of at most 4300 digits"):
        assert not MEASUREMENT.search(setting), setting


def test_both_kinds_of_comment_are_read() -> None:
    jobs = sql_comments(SRC / "_db" / "sql" / "jobs.sql")
    assert any("name: job_claim" in text for _, text in jobs)
    assert not any("set_config" in text for _, text in jobs)  # code is not a comment
    comments = python_comments(SRC / "_runtime" / "capacity.py")
    assert any("10 ms" in text for _, text in comments)  # the allowed one is seen
    assert blocks([(1, "took 1.3"), (2, "us more"), (4, "x")]) == [
        (1, "took 1.3 us more"),
        (4, "x"),
    ]


def test_no_comment_or_docstring_in_src_carries_a_measurement() -> None:
    paths = sources()
    assert any(p.suffix == ".sql" for p in paths) and any(p.suffix == ".py" for p in paths)
    hits = [hit for path in paths for hit in measurements(path)]
    assert not hits, (
        "measurements belong in docs/design.md (a section per decision), linked from the code "
        f'as docs/design.md, "Its title": {hits}'
    )
