"""Many "hosts" on one machine: Linux network namespaces on a bridge, each reaching the
PostgreSQL server through a delaying TCP proxy of its own (delay_proxy.py), so that its round
trips cost what a host some milliseconds away would see.  Root only (``ip netns``).  Used by
the network tests (tests/network/) and the round-trip benchmark (``python -m bench.rtt``).

:class:`Hosts` creates a bridge with the address 10.231.N.1/24 (a /24 no other run uses) in
the root namespace and, per host, a namespace with a veth pair (10.231.N.10+i, routed through
the bridge) and a proxy process in the root namespace listening on 10.231.N.1 (one port per
host) and forwarding to
the server.  :meth:`Hosts.close` removes all of it; namespaces, links and proxies left by a run
that died (its pid is in their names) are removed by the next one.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from psycopg import conninfo

HERE = Path(__file__).resolve().parent
PREFIX = "skl"  # every namespace and link this harness makes starts with it
SUBNET = "10.231"  # each run's bridge takes a /24 of its own in it (runs may overlap)


def unavailable() -> str | None:
    """None when this harness can run here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip program (apt-get install iproute2)"
    probe = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add fails here: {made.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def purge_orphans() -> None:
    """Remove the namespaces and links of runs whose process is gone."""
    names = _ip("netns", "list", check=False).stdout.split()
    names += re.findall(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)
    for name in names:
        found = re.fullmatch(rf"{PREFIX}[a-z]?(\d+)[a-z]\w*", name)
        if found is None:
            continue
        with contextlib.suppress(OSError):
            os.kill(int(found[1]), 0)
            continue  # its run is still going
        if name in _ip("netns", "list", check=False).stdout.split():
            _ip("netns", "del", name, check=False)
        else:
            _ip("link", "del", name, check=False)


def _free_subnet() -> str:
    """A /24 of 10.231.0.0/16 that no interface here has an address in."""
    taken = _ip("-o", "addr", "show", check=False).stdout
    start = os.getpid() % 250
    for k in range(250):
        subnet = f"{SUBNET}.{(start + k) % 250}"
        if f" {subnet}." not in taken:
            return subnet
    raise RuntimeError("no free /24 left in 10.231.0.0/16")


@dataclass
class Host:
    name: str  # the namespace
    address: str
    proxy_port: int
    proxy: subprocess.Popen[bytes]
    dsn: str  # the server's DSN as seen from this host: through its proxy
    rtt_ms: float = 0.0

    def command(self, *args: str) -> list[str]:
        """``args`` run in this host's namespace."""
        return ["ip", "netns", "exec", self.name, *args]

    def cut(self) -> None:
        """Drop every packet into and out of this host (iptables in its namespace): its
        connections hear nothing, with no reset, until :meth:`restore`."""
        for chain in ("INPUT", "OUTPUT"):
            subprocess.run(self.command(_iptables(), "-w", "-I", chain, "-j", "DROP"), check=True,
                           capture_output=True)  # fmt: skip

    def restore(self) -> None:
        for chain in ("INPUT", "OUTPUT"):
            subprocess.run(self.command(_iptables(), "-w", "-D", chain, "-j", "DROP"),
                           capture_output=True)  # fmt: skip


def _iptables() -> str:
    return shutil.which("iptables") or "/usr/sbin/iptables"


def cut_unavailable() -> str | None:
    """None when :meth:`Host.cut` can work here, else why not."""
    if unavailable() is not None:
        return unavailable()
    if not os.path.exists(_iptables()):
        return "no iptables program (apt-get install iptables)"
    return None


class Hosts:
    """``count`` hosts, each ``rtt_ms`` (round trip) from the server of ``dsn``; or, with a
    sequence of round trips, one host per item, each that far."""

    def __init__(self, dsn: str, count: int, rtt_ms: float | Sequence[float]) -> None:
        rtts = [float(rtt_ms)] * count if isinstance(rtt_ms, int | float) else list(rtt_ms)
        assert len(rtts) == count, (count, rtts)
        purge_orphans()
        params = conninfo.conninfo_to_dict(dsn)
        self.target = (str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
        self.dsn = dsn
        # Names fit IFNAMSIZ (15): prefix, pid, a kind letter, a run tag of 2 hex digits.
        self.tag = f"{os.getpid()}{secrets.token_hex(1)}"
        self.bridge = f"{PREFIX}{os.getpid()}b{self.tag[-2:]}"
        self.hosts: list[Host] = []
        self._links: list[str] = []
        self.subnet = _free_subnet()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, rtt in enumerate(rtts):
                self.hosts.append(self._add(i, rtt))
        except BaseException:
            self.close()
            raise

    def _add(self, i: int, rtt_ms: float) -> Host:
        ns = f"{PREFIX}{os.getpid()}n{self.tag[-2:]}{i}"
        outer, inner = f"{PREFIX}{os.getpid()}v{self.tag[-2:]}{i}", f"eth{i}"
        _ip("netns", "add", ns)
        self._links.append(ns)
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        address = f"{self.subnet}.{10 + i}"
        for args in (
            ["addr", "add", f"{address}/24", "dev", inner],
            ["link", "set", inner, "up"],
            ["link", "set", "lo", "up"],
            ["route", "add", "default", "via", f"{self.subnet}.1"],
        ):
            _ip("-n", ns, *args)
        port = 6100 + (os.getpid() % 500) * 10 + i  # the proxies listen on the bridge only
        proxy = subprocess.Popen(
            [sys.executable, str(HERE / "delay_proxy.py"), "--listen", f"{self.subnet}.1:{port}",
             "--target", f"{self.target[0]}:{self.target[1]}", "--delay-ms", str(rtt_ms / 2)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        assert proxy.stdout is not None
        line = proxy.stdout.readline()
        if line.strip() != b"ready":
            proxy.kill()
            rest = proxy.communicate(timeout=30)[0]
            raise RuntimeError(f"the proxy did not start: {(line + rest).decode()[-2000:]}")
        dsn = conninfo.make_conninfo(self.dsn, host=f"{self.subnet}.1", port=str(port))
        return Host(ns, address, port, proxy, dsn, rtt_ms)

    def close(self) -> None:
        for host in self.hosts:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(host.proxy.pid, signal.SIGKILL)
            host.proxy.wait(timeout=30)
            if host.proxy.stdout is not None:
                host.proxy.stdout.close()
        for ns in self._links:
            # Deleting the namespace deletes its end of the veth, and so the pair.
            _ip("netns", "del", ns, check=False)
        _ip("link", "del", self.bridge, check=False)
        self.hosts.clear()
        self._links.clear()
