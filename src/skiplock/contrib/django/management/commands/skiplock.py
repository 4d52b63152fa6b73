"""``manage.py skiplock worker|status|jobs|migrate|...``: see :mod:`skiplock.contrib.django.cli`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from skiplock.contrib.django.cli import run


class Command(BaseCommand):  # type: ignore[misc]  # Django is untyped
    help = (
        "skiplock's command line (worker, status, jobs, ...) on the database of DATABASES; "
        "`manage.py skiplock --help` lists the commands."
    )

    def run_from_argv(self, argv: list[str]) -> None:
        # Every argument is skiplock's (click's), not Django's.
        run(argv[2:], f"{os.path.basename(argv[0])} {argv[1]}")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def handle(self, *args: str, **options: Any) -> None:
        """``call_command("skiplock", "status")``: raises ``CommandError`` unless it exits 0."""
        try:
            run(args, "skiplock")
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise CommandError(f"skiplock {' '.join(args)} exited {exc.code}") from None
