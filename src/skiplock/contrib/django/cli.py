"""``manage.py skiplock ...``: the ``skiplock`` command line in a Django project.

Django is set up first (by ``manage.py``), then each command gets, unless given on its command
line, the database of ``DATABASES[SKIPLOCK_DATABASE]`` (``--dsn``), ``SKIPLOCK_SCHEMA``
(``--schema``) and ``SKIPLOCK_APP`` (the worker's APP), through the ``SKIPLOCK_*`` variables the
command line reads.  ``worker --processes N`` starts its processes as ``python -m
skiplock.contrib.django worker ...``, which set Django up the same way.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from skiplock._cli.main import main
from skiplock.contrib.django import settings

# The command a worker supervisor starts its processes with.
CHILD_PROGRAM = [sys.executable, "-m", "skiplock.contrib.django"]


def run(args: Sequence[str], prog_name: str) -> None:
    """Run ``skiplock ARGS``; exits (``SystemExit``) with the command's status."""
    os.environ["SKIPLOCK_DATABASE_URL"] = settings.dsn()
    os.environ["SKIPLOCK_SCHEMA"] = settings.schema()
    spec = settings.app_spec()
    if spec is not None:
        os.environ["SKIPLOCK_APP"] = spec
    if settings.uses_tasks_backend():
        # The worker's app runs the jobs of Django's task framework: their tasks registered.
        from skiplock.contrib.django.tasks_backend import register_tasks

        register_tasks()
    # The project's folder (manage.py's), for the worker processes to import it from anywhere.
    paths = [sys.path[0], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    main.main(list(args), prog_name=prog_name, obj={"worker_program": CHILD_PROGRAM})
