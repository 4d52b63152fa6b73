"""When a worker treats its sync tasks as Django requests: only once ``django.setup()`` ran,
and skiplock never imports Django itself (each case in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CASES = {
    "without django": ("", "False False"),
    "django imported, not set up": ("import django.db", "False True"),
    "django set up": (
        "from django.conf import settings; settings.configure(); import django; django.setup()",
        "True True",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_django_counts_as_set_up_only_after_setup(case: str) -> None:
    before, expected = CASES[case]
    script = textwrap.dedent(f"""
        import sys
        {before}
        import skiplock
        from skiplock._runtime.task_threads import TaskThreads, django_is_set_up

        with TaskThreads(2) as threads:
            assert threads.submit(lambda a, b: a + b, 2, b=3).result() == 5
        print(django_is_set_up(), "django" in sys.modules)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == expected


def test_a_failure_to_close_connections_after_a_task_does_not_change_its_outcome() -> None:
    """Before the task it fails the task (which has not run); after, it is only logged."""
    script = textwrap.dedent("""
        import logging
        from django.conf import settings; settings.configure()
        import django; django.setup()
        import django.db
        from skiplock._runtime.task_threads import TaskThreads

        logging.basicConfig(level="WARNING", format="%(message)s")
        calls = []

        def failing_close(fail_on):
            def close():
                calls.append(1)
                if len(calls) == fail_on:
                    raise django.db.OperationalError("server closed the connection")
            return close

        ran = []
        with TaskThreads(1) as threads:
            django.db.close_old_connections = failing_close(fail_on=2)
            print(threads.submit(lambda: ran.append(1) or "result").result())
            calls.clear()
            django.db.close_old_connections = failing_close(fail_on=1)
            try:
                threads.submit(lambda: ran.append(2)).result()
            except django.db.OperationalError as exc:
                print("raised:", exc)
        print("ran:", ran)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "result",
        "raised: server closed the connection",
        "ran: [1]",
    ]
    assert "closing Django's connections after a task failed" in result.stderr
