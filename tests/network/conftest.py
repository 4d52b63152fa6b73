"""The chaos suite's helpers (its ledger app and checker) are imported from their folder
(pytest runs with --import-mode=importlib, which adds no test folder to sys.path); the network
harness itself is bench/hosts.py, shared with ``python -m bench.rtt``."""

from __future__ import annotations

import sys
from pathlib import Path

for folder in (Path(__file__).resolve().parent, Path(__file__).resolve().parent.parent / "chaos"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
