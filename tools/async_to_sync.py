"""Generate the sync twins of skiplock's async modules.

    python tools/async_to_sync.py          # rewrite the generated files
    python tools/async_to_sync.py --check  # exit 1 if a generated file is out of date (CI)

The async module is the source of truth; the sync one is the same code with ``await``,
``async`` and the async names removed or swapped, then formatted with ruff.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "skiplock" / "_db"

PAIRS = {
    "seam_async.py": "seam_sync.py",
    "queues_async.py": "queues_sync.py",
    "admin_async.py": "admin_sync.py",
    "statements_async.py": "statements_sync.py",
    "dependencies_async.py": "dependencies_sync.py",
    "held_async.py": "held_sync.py",
    "store_async.py": "store_sync.py",
    "client_part_async.py": "client_part_sync.py",
    "client_settings_async.py": "client_settings_sync.py",
    "client_jobsets_async.py": "client_jobsets_sync.py",
    "client_async.py": "client_sync.py",
}

NAMES = {
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncStatements": "SyncStatements",
    "AsyncSeam": "SyncSeam",
    "AsyncSchemaStatements": "SyncSchemaStatements",
    "AsyncChannelStatements": "SyncChannelStatements",
    "AsyncQueueStatements": "SyncQueueStatements",
    "AsyncLeadershipStatements": "SyncLeadershipStatements",
    "AsyncPresenceStatements": "SyncPresenceStatements",
    "AsyncAdminStatements": "SyncAdminStatements",
    "AsyncJobStatements": "SyncJobStatements",
    "AsyncDependencyStatements": "SyncDependencyStatements",
    "AsyncHeldStatements": "SyncHeldStatements",
    "AsyncStore": "SyncStore",
    "AsyncClient": "SyncClient",
    "AsyncSettingsClient": "SyncSettingsClient",
    "AsyncClientPart": "SyncClientPart",
    "AsyncJobSetsClient": "SyncJobSetsClient",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "seam_async": "seam_sync",
    "queues_async": "queues_sync",
    "admin_async": "admin_sync",
    "statements_async": "statements_sync",
    "dependencies_async": "dependencies_sync",
    "held_async": "held_sync",
    "store_async": "store_sync",
    "client_async": "client_sync",
    "client_settings_async": "client_settings_sync",
    "client_part_async": "client_part_sync",
    "client_jobsets_async": "client_jobsets_sync",
    "AsyncCallerConnection": "CallerConnection",
    "caller_connection_async": "caller_connection",
}

REWRITES = [
    (re.compile(r"\bawait\s+"), ""),
    (re.compile(r"^import asyncio$", re.MULTILINE), "import time"),  # only for asyncio.sleep
    (re.compile(r"\basyncio\.sleep\b"), "time.sleep"),
    (re.compile(r"^from asyncio import Lock as", re.MULTILINE), "from threading import Lock as"),
    (re.compile(r"\basync\s+(def|with|for)\b"), r"\1"),
    *((re.compile(rf"\b{old}\b"), new) for old, new in NAMES.items()),
]


def header(source_name: str) -> str:
    return f"# Generated from {source_name} by tools/async_to_sync.py: do not edit.\n"


def convert(source: str, source_name: str) -> str:
    text = source
    for pattern, replacement in REWRITES:
        text = pattern.sub(replacement, text)
    text = header(source_name) + text
    for command in (["check", "--fix", "--select", "I", "--quiet"], ["format"]):
        text = subprocess.run(
            [sys.executable, "-m", "ruff", *command, "--stdin-filename", "generated.py", "-"],
            input=text,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, write nothing")
    args = parser.parse_args()
    stale = []
    for source_name, target_name in PAIRS.items():
        wanted = convert((PACKAGE / source_name).read_text(), source_name)
        target = PACKAGE / target_name
        if target.exists() and target.read_text() == wanted:
            continue
        stale.append(target_name)
        if not args.check:
            target.write_text(wanted)
    if args.check and stale:
        print(
            f"out of date: {', '.join(stale)}; run python tools/async_to_sync.py", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
