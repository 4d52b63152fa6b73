"""Every fenced code block in README.md and docs/*.md runs as written.

Each document's blocks run in order, like a reader following it, in a temporary directory and
against a database of their own (``SKIPLOCK_DATABASE_URL``, created on the test server and
dropped afterwards), with ``skiplock`` on the ``PATH`` running this checkout:

- ``python``: executed in one Python process per document, in one namespace (top-level
  ``await`` allowed).  A block whose first line is ``# name.py`` is written to that file
  instead and imported, so later blocks and commands can import it (the tutorial's
  ``shop.py``).  The docs build on the tutorial: each docs/*.md runs where the README's files
  are written and ``skiplock migrate`` has run.
- A Django project: once there is a ``manage.py`` (``startproject`` wrote it), the ``# name.py``
  blocks are only written (Django imports them), and the other Python blocks run as in
  ``manage.py shell``: Django set up with the settings ``manage.py`` names.
- ``bash``: each command must exit 0, or 3 for a skiplock command that found nothing to act on
  (a fresh database has no job 42).  ``skiplock worker`` without ``--burst`` and ``skiplock
  dashboard`` run until they say they started, then get SIGTERM and must exit 0 (so does
  ``python manage.py skiplock worker``).  ``pip install`` lines install nothing: the extras
  they name must exist in pyproject.toml.  ``python`` is the Python running these tests, and
  libpq's ``PG*`` variables name the document's database too.
- ``console``: the ``$ `` lines run as above, and the output shown under each must appear in
  what the command printed, line by line in order (``...`` stands for lines left out).
- ``sql``: executed on the document's database.
- ``text``: output or log lines, shown and not run.
- ``mermaid``: a diagram (docs/architecture.md's), drawn by GitHub, shown and not run; its
  state machine is checked against the SQL by tests/unit/test_architecture_doc.py.

A block that cannot run as written is marked by ``<!-- snippet: skip REASON -->`` on the line
before it; the reason is required, and the skipped blocks are counted and listed below.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psycopg
import pytest
from markdown_it import MarkdownIt
from psycopg import conninfo, sql

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]
RUN = {"python", "bash", "console", "sql"}
SHOWN = {"text", "mermaid"}
# Blocks marked to skip, at most: each needs a reason, and raising this is a visible decision.
SKIPPED_AT_MOST = 4
ANNOTATION = re.compile(r"<!--\s*snippet:(.*?)-->", re.S)
FILE_LINE = re.compile(r"#\s*([\w/]+\.py)\s*")
DJANGO_SETTINGS = re.compile(r"DJANGO_SETTINGS_MODULE['\"],\s*['\"]([\w.]+)['\"]")
NOTHING_TO_ACT_ON = 3  # skiplock's exit status when nothing matched (no such job, no jobs)
STARTED = {"worker": " started: queues=", "dashboard": "open http://"}
COMMAND_TIMEOUT = 120.0
START_TIMEOUT = 60.0


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    skip: str | None  # the reason given by a skip annotation

    def __str__(self) -> str:
        shown = (
            self.document.relative_to(ROOT) if self.document.is_relative_to(ROOT) else self.document
        )
        return f"{shown}:{self.line} ({self.lang})"


def blocks_of(document: Path) -> list[Block]:
    """The fenced code blocks of ``document``, with the skip annotation before each."""
    tokens = MarkdownIt("commonmark").parse(document.read_text())
    blocks: list[Block] = []
    pending: tuple[int, str] | None = None
    for token in tokens:
        if token.type == "html_block" and (found := ANNOTATION.search(token.content)):
            assert pending is None, f"{document.name}: two snippet annotations in a row"
            assert token.map is not None
            pending = (token.map[0] + 1, found.group(1).strip())
            continue
        if token.type == "fence":
            assert token.map is not None
            skip = None
            if pending is not None:
                words = pending[1].split(maxsplit=1)
                assert words[:1] == ["skip"], f"{document.name}:{pending[0]}: unknown annotation"
                assert len(words) == 2, f"{document.name}:{pending[0]}: a skip needs a reason"
                skip = words[1]
            lang = token.info.split(maxsplit=1)[0] if token.info.strip() else ""
            blocks.append(Block(document, token.map[0] + 1, lang, token.content, skip))
        elif pending is not None and token.type != "html_block":
            raise AssertionError(f"{document.name}:{pending[0]}: annotation not before a block")
        if token.type != "html_block":
            pending = None
    assert pending is None, f"{document.name}:{pending[0]}: annotation not before a block"
    return blocks


ALL_BLOCKS = [block for document in DOCUMENTS for block in blocks_of(document)]


def test_every_block_is_run_shown_or_skipped_with_a_reason() -> None:
    untagged = [str(b) for b in ALL_BLOCKS if b.lang not in RUN | SHOWN]
    assert not untagged, f"blocks without a known language (python, bash, ...): {untagged}"
    skipped = [f"{b}: {b.skip}" for b in ALL_BLOCKS if b.skip is not None]
    listing = "\n".join(skipped)
    print(f"{len(skipped)} blocks skipped:\n{listing}")
    assert len(skipped) <= SKIPPED_AT_MOST, f"{len(skipped)} blocks skipped:\n{listing}"
    assert all(b.lang in RUN for b in ALL_BLOCKS if b.skip is not None), "skip marks a shown block"
    assert sum(b.lang in RUN and b.skip is None for b in ALL_BLOCKS) > 10


def test_the_parser_finds_the_blocks_and_their_annotations(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Text\n\n```python\n# shop.py\nx = 1\n```\n\n<!-- snippet: skip needs a GPU -->\n"
        "```bash\nnvidia-smi\n```\n\n```text\nout\n```\n"
    )
    found = [(b.lang, b.line, b.skip, b.text) for b in blocks_of(page)]
    assert found == [
        ("python", 3, None, "# shop.py\nx = 1\n"),
        ("bash", 9, "needs a GPU", "nvidia-smi\n"),
        ("text", 13, None, "out\n"),
    ]
    page.write_text("<!-- snippet: skip -->\n```bash\ntrue\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        blocks_of(page)


# -- running a document ----------------------------------------------------------------------

RUNNER = textwrap.dedent(
    """
    import ast, asyncio, importlib, json, os, sys, traceback

    results = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    sys.path.insert(0, os.getcwd())
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request.get("django"):  # as manage.py shell: Django set up first
                import django
                from django.apps import apps

                os.environ.setdefault("DJANGO_SETTINGS_MODULE", request["django"])
                if not apps.ready:
                    django.setup()
            if request.get("module") in sys.modules:  # a later block rewrote the file
                importlib.reload(sys.modules[request["module"]])
            elif request.get("module"):
                importlib.import_module(request["module"])
            else:
                with open(request["path"]) as source:
                    code = compile(
                        source.read(), request["path"], "exec",
                        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                    )
                result = eval(code, namespace)
                if asyncio.iscoroutine(result):
                    asyncio.run(result)
            answer = {"ok": True}
        except BaseException:
            answer = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.flush()
        sys.stderr.flush()
        results.write(json.dumps(answer) + "\\n")
    """
)


class PythonSession:
    """One Python process that runs a document's blocks, one after the other."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        runner = folder / ".snippet_runner.py"
        runner.write_text(RUNNER)
        self.log_path = folder / ".python.log"
        self._log = self.log_path.open("w")
        read_fd, write_fd = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-u", str(runner), str(write_fd)],
            cwd=folder,
            env=env,
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            pass_fds=(write_fd,),
        )
        os.close(write_fd)
        self._results: IO[str] = os.fdopen(read_fd)

    def run(self, request: dict[str, str], what: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self._results.readline()
        assert answer, f"{what}: the Python process died\n{tail(self.log_path)}"
        result = json.loads(answer)
        assert result["ok"], f"{what} raised:\n{result['error']}\noutput:\n{tail(self.log_path)}"

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._results.close()
        self._log.close()


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def fresh_database(pg_dsn: str) -> Iterator[str]:
    """A new, empty database on the test server; its DSN."""
    name = f"snippets_{secrets.token_hex(5)}"
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield conninfo.make_conninfo(pg_dsn, dbname=name)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def environment(folder: Path, dsn: str) -> dict[str, str]:
    """The environment of a reader's shell: ``skiplock`` on the PATH runs this checkout, the
    database is the document's own, and no other skiplock setting leaks in from the test run."""
    bin_dir = folder / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "skiplock"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m skiplock "$@"\n')
    shim.chmod(0o755)
    python = bin_dir / "python"  # a script, not a link: a venv's python finds it by its path
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKIPLOCK_")}
    env.pop("DATABASE_URL", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(folder)])
    env["SKIPLOCK_DATABASE_URL"] = dsn
    params = conninfo.conninfo_to_dict(dsn)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"),
                     ("password", "PGPASSWORD"), ("dbname", "PGDATABASE")):  # fmt: skip
        if params.get(key):
            env[var] = str(params[key])
    return env


def commands_of(script: str) -> list[str]:
    """The commands of a shell block: continued lines joined, comment lines left out."""
    commands: list[str] = []
    current = ""
    for line in script.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip() and not current.strip().startswith("#"):
            commands.append(current.strip())
        current = ""
    return commands


def check_pip_install(command: str, what: str) -> None:
    """``pip install 'skiplock[x]'`` or ``-e '.[x,y]'``: the extras must exist."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    named = [
        extra.strip()
        for word in shlex.split(command, comments=True)
        if (found := re.fullmatch(r"(?:skiplock|\.)\[(.*)\]", word))
        for extra in found.group(1).split(",")
    ]
    assert named, f"{what}: `{command}` installs no skiplock extra"
    assert set(named) <= extras, f"{what}: `{command}`: no extra {sorted(set(named) - extras)}"


def is_long_running(command: str) -> str | None:
    """The kind of a command that serves until stopped (``worker`` or ``dashboard``)."""
    words = shlex.split(command, comments=True)
    if words[:2] in (["python", "manage.py"], ["./manage.py"]):
        words = words[2:] if words[0] == "python" else words[1:]
    if words[:2] == ["skiplock", "dashboard"]:
        return "dashboard"
    if words[:2] == ["skiplock", "worker"] and "--burst" not in words:
        return "worker"
    return None


def run_until_started(command: str, kind: str, folder: Path, env: dict[str, str], what: str) -> str:
    """Start a serving command, wait until it says it started, stop it with SIGTERM."""
    log_path = folder / f".serve-{secrets.token_hex(3)}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while STARTED[kind] not in log_path.read_text(errors="replace"):
                assert process.poll() is None, (
                    f"{what}: `{command}` exited {process.returncode} before it started:\n"
                    f"{tail(log_path)}"
                )
                assert time.monotonic() < deadline, f"{what}: `{command}` never started"
                time.sleep(0.1)
            if kind == "dashboard":
                wait_until_served(log_path.read_text(errors="replace"), deadline, what)
            os.killpg(process.pid, signal.SIGTERM)
            returncode = process.wait(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    output = log_path.read_text(errors="replace")
    # uvicorn shuts the dashboard down gracefully, then dies of the signal it caught
    stopped = {0, -signal.SIGTERM} if kind == "dashboard" else {0}
    assert returncode in stopped, f"{what}: `{command}` exited {returncode} on SIGTERM:\n{output}"
    return output


def wait_until_served(output: str, deadline: float, what: str) -> None:
    """Wait until the dashboard whose address ``output`` shows answers its JSON API."""
    found = re.search(r"open (http://[^/\s]+)/\?token=(\S+)", output)
    assert found, f"{what}: no address in the dashboard's output:\n{output}"
    request = urllib.request.Request(
        f"{found.group(1)}/api/queues", headers={"Authorization": f"Bearer {found.group(2)}"}
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                assert response.status == 200
                return
        except OSError:
            assert time.monotonic() < deadline, f"{what}: the dashboard never answered"
            time.sleep(0.1)


def run_command(command: str, folder: Path, env: dict[str, str], what: str) -> str:
    """Run one shell command as a reader would; its output (stdout and stderr)."""
    if re.match(r"(\S*/)?pip install ", command):
        check_pip_install(command, what)
        return ""
    kind = is_long_running(command)
    if kind is not None:
        return run_until_started(command, kind, folder, env, what)
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=folder,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    output = done.stdout + done.stderr
    allowed = {0, NOTHING_TO_ACT_ON} if command.startswith("skiplock ") else {0}
    assert done.returncode in allowed, f"{what}: `{command}` exited {done.returncode}:\n{output}"
    return output


def check_console(block: Block, folder: Path, env: dict[str, str]) -> None:
    """Run each ``$ `` line; the lines shown under it must appear in its output, in order."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:].strip(), []))
        else:
            assert steps, f"{block}: output before the first `$ ` command"
            steps[-1][1].append(line.rstrip())
    for command, shown in steps:
        printed = iter(run_command(command, folder, env, str(block)).splitlines())
        for expected in (line for line in shown if line.strip() and line.strip() != "..."):
            assert any(line.rstrip() == expected for line in printed), (
                f"{block}: `{command}` did not print, at its place:\n{expected}"
            )


def file_of(block: Block) -> str | None:
    """The file a Python block is, when its first line names one (``# shop.py``)."""
    first = block.text.split("\n", 1)[0]
    found = FILE_LINE.fullmatch(first)
    return found.group(1) if found else None


def write_file(block: Block, name: str, folder: Path) -> str:
    """Write a ``# name.py`` block to its file; the module name to import."""
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(block.text)
    return name.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def run_blocks(blocks: list[Block], folder: Path, env: dict[str, str], dsn: str) -> None:
    python = PythonSession(folder, env)
    try:
        for index, block in enumerate(blocks):
            if block.lang == "python":
                name = file_of(block)
                django_settings = django_settings_of(folder)
                if name is not None and django_settings is not None:
                    write_file(block, name, folder)  # Django imports it
                elif name is not None:
                    python.run({"module": write_file(block, name, folder)}, str(block))
                else:
                    path = folder / f".block_{index:02d}.py"
                    path.write_text(block.text)
                    request = {"path": str(path)}
                    if django_settings is not None:
                        request["django"] = django_settings
                    python.run(request, str(block))
            elif block.lang == "bash":
                for command in commands_of(block.text):
                    run_command(command, folder, env, str(block))
            elif block.lang == "console":
                check_console(block, folder, env)
            elif block.lang == "sql":
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(block.text.encode())
    finally:
        python.close()


def django_settings_of(folder: Path) -> str | None:
    """The settings module of the Django project in ``folder`` (its manage.py names it)."""
    manage = folder / "manage.py"
    if not manage.exists():
        return None
    found = DJANGO_SETTINGS.search(manage.read_text())
    assert found, f"{manage}: no DJANGO_SETTINGS_MODULE"
    return found.group(1)


def tutorial_files(folder: Path) -> None:
    """What the docs build on: the README's files (``shop.py``) written into ``folder``."""
    for block in blocks_of(README):
        name = file_of(block) if block.lang == "python" and block.skip is None else None
        if name is not None:
            write_file(block, name, folder)


RUNNABLE = [
    document
    for document in DOCUMENTS
    if any(b.lang in RUN and b.skip is None for b in blocks_of(document))
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("document", RUNNABLE, ids=lambda d: str(d.relative_to(ROOT)))
def test_the_blocks_of_a_document_run_as_written(
    document: Path, pg_dsn: str, tmp_path: Path
) -> None:
    blocks = [b for b in blocks_of(document) if b.lang in RUN and b.skip is None]
    with fresh_database(pg_dsn) as dsn:
        env = environment(tmp_path, dsn)
        if document != README:
            tutorial_files(tmp_path)
            run_command("skiplock migrate", tmp_path, env, f"{document.name}'s setup")
        run_blocks(blocks, tmp_path, env, dsn)


def test_a_block_that_does_not_run_as_written_fails(pg_dsn: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        textwrap.dedent(
            """\
            ```python
            # mod.py
            VALUE = 1
            ```

            ```python
            from mod import VALUE
            assert VALUE == 2, "wrong value"
            ```

            ```bash
            false
            ```

            ```bash
            skiplock worker nosuch:app
            ```

            ```console
            $ printf 'one\\ntwo\\nthree\\n'
            one
            ...
            three
            $ echo two
            one
            ```
            """
        )
    )
    _, false, worker, console = blocks_of(page)[1:]
    with fresh_database(pg_dsn) as dsn:
        env = environment(tmp_path, dsn)
        with pytest.raises(AssertionError, match="wrong value"):
            run_blocks(blocks_of(page)[:2], tmp_path, env, dsn)
        with pytest.raises(AssertionError, match="`false` exited 1"):
            run_blocks([false], tmp_path, env, dsn)
        with pytest.raises(AssertionError, match="exited 2 before it started"):
            run_blocks([worker], tmp_path, env, dsn)
        with pytest.raises(AssertionError, match="`echo two` did not print, at its place"):
            run_blocks([console], tmp_path, env, dsn)
