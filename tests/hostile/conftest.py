"""The hostile suite's generators live next to it (fuzz_inputs): make them importable (pytest
runs with --import-mode=importlib, which adds no test folder to sys.path)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import json  # noqa: E402
import os  # noqa: E402
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def tally_file() -> Iterator[None]:
    """With ``SKIPLOCK_FUZZ_TALLY`` set, what the suite tried (fuzz_inputs.TALLY) is written
    there as JSON at the end (tests/hostile/run.py reads it)."""
    yield
    path = os.environ.get("SKIPLOCK_FUZZ_TALLY")
    if path:
        from fuzz_inputs import TALLY

        with open(path, "w", encoding="utf-8") as out:
            json.dump(dict(TALLY), out, indent=1, sort_keys=True)
