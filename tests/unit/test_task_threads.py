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
        from skiplock.task_threads import TaskThreads, django_is_set_up

        with TaskThreads(2) as threads:
            assert threads.submit(lambda a, b: a + b, 2, b=3).result() == 5
        print(django_is_set_up(), "django" in sys.modules)
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == expected
