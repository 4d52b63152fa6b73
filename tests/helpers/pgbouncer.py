"""A real PgBouncer in front of the test server, for the pooler tests.

``running_pgbouncer(pg_dsn)`` starts one (Debian's ``pgbouncer`` package; ``.ci/run``
installs it) on a free port, in the given pool mode, and yields a DSN that goes through it.
Without the program the tests that need it are skipped, unless ``SKIPLOCK_REQUIRE_PGBOUNCER``
is set (CI sets it), which makes its absence a failure instead.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

REQUIRE_VAR = "SKIPLOCK_REQUIRE_PGBOUNCER"


def pgbouncer_program() -> str:
    """The pgbouncer executable; skips the test (or fails it, under CI) when there is none."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    if found:
        return found
    if os.environ.get(REQUIRE_VAR):
        pytest.fail(f"{REQUIRE_VAR} is set but pgbouncer is not installed")
    pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_pgbouncer(
    pg_dsn: str, *, pool_mode: str = "transaction", pool_size: int = 1
) -> Iterator[str]:
    """PgBouncer on 127.0.0.1 in ``pool_mode`` with ``pool_size`` server connections per
    database and user; yields ``pg_dsn`` pointed at it.  Clients need no password (trust)."""
    program = pgbouncer_program()
    # Not under pytest's tmp_path: its parents are private to us, and pgbouncer run by root
    # drops to another user, who must read its files.
    folder = Path(tempfile.mkdtemp(prefix="skiplock-pgbouncer-"))
    target = conninfo.conninfo_to_dict(pg_dsn)
    user = str(target.get("user") or pwd.getpwuid(os.getuid()).pw_name)
    server = " ".join(
        f"{key}={target[key]}" for key in ("host", "port", "password") if target.get(key)
    )
    port = _free_port()
    folder.chmod(0o777)  # pgbouncer drops root for the user below and writes its log here
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    lines = [
        "[databases]",
        f"* = {server}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {folder / 'users.txt'}",
        f"pool_mode = {pool_mode}",
        f"default_pool_size = {pool_size}",
        "max_client_conn = 500",
        "ignore_startup_parameters = extra_float_digits,options",
        f"logfile = {folder / 'pgbouncer.log'}",
    ]
    if os.getuid() == 0:  # pgbouncer refuses to run as root
        lines.append(f"user = {_unprivileged_user(str(target.get('host') or ''))}")
    config = folder / "pgbouncer.ini"
    config.write_text("\n".join(lines) + "\n")
    for path in folder.iterdir():
        path.chmod(0o666)
    with (folder / "stderr.txt").open("wb") as stderr:
        process = subprocess.Popen([program, str(config)], stdout=stderr, stderr=stderr)
    dsn = conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=str(port))
    try:
        _wait_until_it_answers(dsn, process, folder)
        yield dsn
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _unprivileged_user(host: str) -> str:
    """Whom pgbouncer, started by root, runs as.  A server on a unix socket is reached as the
    owner of the socket's directory, who can always open it (the embedded server's is its data
    directory, mode 0700, owned by the user it runs as); over TCP any unprivileged user will do."""
    if host.startswith("/"):
        with contextlib.suppress(OSError, KeyError):
            owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
            if owner != "root":
                return owner
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    pytest.skip("running as root with neither a postgres nor a nobody user for pgbouncer")


def _wait_until_it_answers(dsn: str, process: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 15
    while True:
        if process.poll() is not None:
            logs = (folder / "stderr.txt", folder / "pgbouncer.log")
            said = [p.read_text() for p in logs if p.exists()]
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {''.join(said)}")
        try:
            with psycopg.connect(dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
