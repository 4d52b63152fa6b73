"""A tasks module imported under two names (a Django app's ``tasks.py`` reached as
``tasks`` and as ``shop.tasks`` because both folders are on ``sys.path``) registers each task
twice, under two names: jobs enqueued under one name fail in a worker that imported the other,
and a periodic task gets two jobs per tick. Registration warns, naming both."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

APP = """
from skiplock import App

app = App("postgresql://unused@127.0.0.1/none")
"""

TASKS = """
from twice_app import app

@app.periodic(every=60.0)
@app.task(queue="cron")
def sweep() -> None: ...
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "twice_app.py").write_text(APP)
    (tmp_path / "twice_shop").mkdir()
    (tmp_path / "twice_shop" / "__init__.py").write_text("")
    (tmp_path / "twice_shop" / "tasks.py").write_text(TASKS)
    sys.path[:0] = [str(tmp_path), str(tmp_path / "twice_shop")]
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        sys.path.remove(str(tmp_path / "twice_shop"))
        for name in ("twice_app", "twice_shop", "twice_shop.tasks", "tasks"):
            sys.modules.pop(name, None)


def test_a_task_module_imported_under_two_names_warns(project: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        importlib.import_module("twice_shop.tasks")  # the first import is silent
    with pytest.warns(RuntimeWarning) as caught:
        importlib.import_module("tasks")
    (warning,) = caught
    message = str(warning.message)
    assert "'tasks.sweep'" in message and "'twice_shop.tasks.sweep'" in message, message
    assert "imported under two names" in message and "name=" in message, message
