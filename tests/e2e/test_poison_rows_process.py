"""``skiplock worker --burst`` as a real process, on a queue holding rows no worker can run
beside good jobs: it runs the good ones, fails each bad one alone, and exits 0.
(The cases one by one, in process, are in tests/integration/test_poison_rows.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers.bad_rows import UNDECODABLE_DEPTH, insert_row, job_state, nested
from skiplock import App

pytestmark = pytest.mark.slow

MODULE = """
import os
from pathlib import Path

from skiplock import App

app = App(os.environ["DSN"], os.environ["SCHEMA"])
RAN = Path(os.environ["RAN"])


@app.task(name="work", queue="q", max_attempts=3)
def work(n: int) -> None:
    with RAN.open("a") as f:
        f.write(f"{n}\\n")
"""

BAD = {  # columns of each bad row -> what its last_error says
    "deep payload": ({"payload": nested(UNDECODABLE_DEPTH)}, "payload could not be decoded"),
    "long integer": ({"payload": '{"n": ' + "7" * 5000 + "}"}, "payload could not be decoded"),
    "run_at -infinity": ({"payload": '{"n": 0}', "run_at": "-infinity"}, "run_at is -infinity"),
    "unknown task": ({"payload": "{}", "task": "ghost"}, "unknown task 'ghost'"),
    "unbound arguments": ({"payload": '{"m": 1}'}, "does not match the parameters"),
}


@pytest.mark.parametrize("model", ["lease", "held"])
def test_burst_fails_each_bad_row_alone_runs_the_rest_and_exits_0(
    tmp_path: Path, app: App, db: psycopg.Connection[Any], model: str
) -> None:
    (tmp_path / "jobsmod.py").write_text(textwrap.dedent(MODULE))
    ran = tmp_path / "ran"
    bad = {}
    for kind, (columns, _) in BAD.items():
        columns = dict(columns)
        task, payload = columns.pop("task", "work"), columns.pop("payload")
        bad[kind] = insert_row(db, app.schema, task, payload, **columns)
    good = [insert_row(db, app.schema, "work", f'{{"n": {n}}}') for n in range(1, 10)]

    env = {**os.environ, "DSN": app.dsn, "SCHEMA": app.schema, "RAN": str(ran)}
    env.pop("SKIPLOCK_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", "worker", "jobsmod:app", "--dsn", app.dsn,
         "--burst", "--concurrency", "4", "--model", model],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert sorted(int(n) for n in ran.read_text().split()) == list(range(1, 10))
    assert {job_state(db, app.schema, i)[0] for i in good} == {"done"}
    for kind, (_, says) in BAD.items():
        status, attempts, error = job_state(db, app.schema, bad[kind])
        assert (status, attempts) == ("failed", 1), kind
        assert says in error, kind
