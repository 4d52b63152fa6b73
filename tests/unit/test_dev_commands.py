"""The development commands lead somewhere: the Makefile's targets and the pre-commit hooks run
programs, modules and files that exist, and CONTRIBUTING.md and the README point at them.

Each Makefile target is expanded with ``make -n`` (nothing runs) and every command it prints is
checked: a ``python -m`` module must be importable and answer ``--version``, a script must
exist, any other program must be on the PATH.  pre-commit itself need not be installed: its
config is read with the small YAML reader below, which takes only the block style the file uses
and fails on anything else, and each hook's ``entry`` is checked the same way.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
PRE_COMMIT = ROOT / ".pre-commit-config.yaml"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
REQUIRED_TARGETS = {"generate", "lint", "typecheck", "test", "test-quick"}
TARGET = re.compile(r"^([a-z][a-z-]*):(?!=)", re.M)


def targets() -> list[str]:
    return TARGET.findall(MAKEFILE.read_text())


@cache
def answers_version(module: str) -> bool:
    ran = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, timeout=120, check=False
    )
    return ran.returncode == 0


def check_command(tokens: list[str], where: str) -> list[str]:
    """What is wrong with one command line: a module, script or program that is not there."""
    problems = []
    program, args = tokens[0], tokens[1:]
    # The dev venv's interpreter (CONTRIBUTING: `.venv`), here the one running the tests; a bare
    # `python` must be on the PATH like any program (Debian has none).
    if program in (".venv/bin/python", sys.executable):
        if args[:1] == ["-m"]:
            module = args[1]
            if importlib.util.find_spec(module) is None:
                problems.append(f"{where}: no module {module!r}")
            elif not answers_version(module):
                problems.append(f"{where}: python -m {module} --version failed")
        elif not (ROOT / args[0]).is_file():
            problems.append(f"{where}: no script {args[0]!r}")
    elif shutil.which(program) is None:
        problems.append(f"{where}: no program {program!r} on the PATH")
    for arg in args:
        if (
            re.fullmatch(r"(src|tests|tools|bench|docs)(/[\w.-]+)*", arg)
            and not (ROOT / arg).exists()
        ):
            problems.append(f"{where}: no path {arg!r}")
    return problems


def test_the_makefile_has_the_everyday_targets_all_phony() -> None:
    found = targets()
    assert set(found) >= REQUIRED_TARGETS, sorted(REQUIRED_TARGETS - set(found))
    phony = re.search(r"^\.PHONY:(.*)$", MAKEFILE.read_text(), re.M)
    assert phony is not None and set(phony.group(1).split()) == set(found)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_every_makefile_target_runs_commands_that_exist() -> None:
    problems = []
    for target in targets():
        dry = subprocess.run(
            ["make", "-n", "-C", str(ROOT), f"PY={sys.executable}", target],
            capture_output=True,
            text=True,
            check=False,
        )
        assert dry.returncode == 0, (target, dry.stderr)
        lines = [line for line in dry.stdout.splitlines() if line.strip()]
        assert lines or target == "check", f"make -n {target} prints no command"
        for line in lines:
            if line.startswith("make"):  # "make[1]: Entering directory ..."
                continue
            tokens = shlex.split(line.split("|")[0])  # help: grep ... | sed ...
            problems += check_command(tokens, f"make {target}: {line}")
    assert not problems, "\n".join(problems)


def _scalar(text: str) -> Any:
    assert text[0] not in "\"'&*!|>{%@`", f"beyond this reader: {text!r}"
    if text.startswith("[") and text.endswith("]"):
        return [_scalar(item.strip()) for item in text[1:-1].split(",") if item.strip()]
    return {"true": True, "false": False}.get(text, text)


def read_yaml(text: str) -> Any:
    """Block-style YAML of mappings, sequences of mappings and plain scalars (flow lists of
    plain scalars too); anything else raises."""
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if line.strip():
            lines.append((len(line) - len(line.lstrip()), line.strip()))

    def block(i: int, indent: int) -> tuple[Any, int]:
        if lines[i][1].startswith("- "):
            items = []
            while i < len(lines) and lines[i] and lines[i][0] == indent:
                assert lines[i][1].startswith("- "), f"expected an item: {lines[i]}"
                lines[i] = (indent + 2, lines[i][1][2:])
                item, i = block(i, indent + 2)
                items.append(item)
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and lines[i][0] == indent and not lines[i][1].startswith("- "):
            key, colon, rest = lines[i][1].partition(": ")
            if not colon:
                assert lines[i][1].endswith(":"), f"expected 'key: value': {lines[i]}"
                key, rest = lines[i][1][:-1], ""
            assert key not in mapping, f"key {key!r} twice"
            if rest.strip():
                mapping[key], i = _scalar(rest.strip()), i + 1
            else:
                assert i + 1 < len(lines) and lines[i + 1][0] > indent, f"{key!r} has no value"
                mapping[key], i = block(i + 1, lines[i + 1][0])
        assert i == len(lines) or lines[i][0] < indent, f"unexpected indentation: {lines[i]}"
        return mapping, i

    value, end = block(0, lines[0][0])
    assert end == len(lines)
    return value


def test_the_yaml_reader_reads_what_it_takes_and_refuses_the_rest() -> None:
    text = "repos:\n  - repo: local\n    hooks:\n      - id: a  # note\n        types: [python]\n"
    text += "      - id: b\n        pass_filenames: false\n"
    assert read_yaml(text) == {
        "repos": [
            {
                "repo": "local",
                "hooks": [{"id": "a", "types": ["python"]}, {"id": "b", "pass_filenames": False}],
            }
        ]
    }
    with pytest.raises(AssertionError):
        read_yaml("a: 'quoted'\n")
    with pytest.raises(AssertionError):
        read_yaml("a:\n  b: 1\n c: 2\n")


def test_the_pre_commit_hooks_format_lint_and_check_the_sync_twins_with_what_exists() -> None:
    config = read_yaml(PRE_COMMIT.read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    assert {"ruff-format", "ruff-check", "sync-twins"} <= set(hooks), sorted(hooks)
    assert hooks["sync-twins"]["entry"] == ".venv/bin/python tools/async_to_sync.py --check"
    problems = []
    for repo in config["repos"]:
        assert repo["repo"] == "local", "hooks from elsewhere: pin them and check them here"
        for hook in repo["hooks"]:
            assert hook["language"] == "system", hook  # the dev venv's own programs
            problems += check_command(shlex.split(hook["entry"]), f"hook {hook['id']}")
            if "files" in hook:
                pattern = re.compile(hook["files"])
                files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "src").rglob("*.py")]
                assert any(pattern.search(f) for f in files), (hook["id"], hook["files"])
    assert not problems, "\n".join(problems)
    helped = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "async_to_sync.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--check" in helped.stdout


def test_contributing_names_only_targets_that_exist_and_the_readme_links_it() -> None:
    text = CONTRIBUTING.read_text()
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", text))
    assert named >= REQUIRED_TARGETS, sorted(REQUIRED_TARGETS - named)
    assert named <= set(targets()), sorted(named - set(targets()))
    for link in re.findall(r"\]\(([^)#]+)", text):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), f"CONTRIBUTING.md links {link}, which is not there"
    readme = (ROOT / "README.md").read_text()
    assert "(CONTRIBUTING.md)" in readme and "(docs/architecture.md)" in readme
