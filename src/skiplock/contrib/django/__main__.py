"""``python -m skiplock.contrib.django ARGS``: ``manage.py skiplock ARGS`` without manage.py
(``DJANGO_SETTINGS_MODULE`` names the settings); a worker supervisor's processes run this."""

from __future__ import annotations

import sys

import django

from skiplock.contrib.django.cli import run

django.setup()
run(sys.argv[1:], "python -m skiplock.contrib.django")
