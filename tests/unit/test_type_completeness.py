"""The public API is typed for users: ``pyright --verifytypes skiplock --ignoreexternal`` scores
at least 95 % (the symbols with a known type, of those it counts), outside
``skiplock.contrib.django``: its classes derive from Django's (an app config, a model, an admin,
migrations, a management command, a task backend), which pyright cannot know without
django-stubs, and Django finds them by dotted path in the settings, not in typed code.  Those
are counted apart, and nothing else may be incomplete."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
FLOOR = 0.95
DJANGO = "skiplock.contrib.django."


@pytest.mark.skipif(
    shutil.which("node") is None and not os.environ.get("SKIPLOCK_REQUIRE_NODE"),
    reason="pyright needs Node.js (node); SKIPLOCK_REQUIRE_NODE=1 makes its absence fail",
)
def test_the_public_api_is_typed_for_pyright() -> None:
    # This checkout's src first, whatever an editable install elsewhere points at.
    path = os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable,
         "--verifytypes", "skiplock", "--ignoreexternal"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": path},
    )  # fmt: skip
    assert result.stdout.strip().startswith("{"), result.stdout[-2000:] + result.stderr[-2000:]
    report = json.loads(result.stdout)["typeCompleteness"]
    assert Path(report["packageRootDirectory"]) == SRC / "skiplock"
    exported = [s for s in report["symbols"] if s["isExported"]]
    counted = [s for s in exported if not s["name"].startswith(DJANGO)]
    known = [s for s in counted if s["isTypeKnown"] and not s["isTypeAmbiguous"]]
    errors = sorted(s["name"] for s in counted if s not in known)
    score = len(known) / len(counted)
    assert len(counted) > 300 and len(exported) > len(counted)  # the report is the one meant
    assert score >= FLOOR, f"type completeness {score:.1%} < {FLOOR:.0%}; not known: {errors}"
