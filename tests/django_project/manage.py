"""The fixture project's manage.py (tests/e2e/test_django_project.py runs it)."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
