"""The chaos suite's helpers live next to it (chaos_app, chaos_harness, chaos_scenarios): make
them importable (pytest runs with --import-mode=importlib, which adds no test folder to
sys.path).  The worker processes import chaos_app from this folder too."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
