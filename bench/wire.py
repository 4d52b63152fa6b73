"""Counting the statements a system's workers send: a pass-through proxy that reads the
PostgreSQL frontend protocol's message headers.

The server cannot count statements without ``pg_stat_statements``, a preload library (a server
restart).  So one extra drain per setting connects its workers through :class:`CountingProxy`
instead: it forwards every byte unchanged in both directions and counts, per connection, the
type byte of each message the client sends.  One statement is a ``Q`` (simple query) or an
``E`` (execute, the extended protocol; asyncpg and psycopg with parameters); one round trip ends
with a ``Q`` or an ``S`` (sync).  ``BEGIN``/``COMMIT`` count as statements, as the server runs
them.  Only the headers are read (type, length), never the bodies.

Encryption would hide the headers: the proxy answers an ``SSLRequest`` or ``GSSENCRequest``
itself with ``N`` (not supported), and clients that merely prefer encryption (libpq's and
asyncpg's default) go on in plain text, as they do on a server without SSL.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from psycopg import conninfo

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


@dataclass
class WireCounts:
    messages: Counter[str] = field(default_factory=Counter)  # client messages by type byte
    to_server: int = 0  # bytes
    to_client: int = 0
    connections: int = 0

    @property
    def statements(self) -> int:
        return self.messages["Q"] + self.messages["E"]

    @property
    def round_trips(self) -> int:
        return self.messages["Q"] + self.messages["S"]

    def plus(self, other: WireCounts) -> WireCounts:
        return WireCounts(
            self.messages + other.messages,
            self.to_server + other.to_server,
            self.to_client + other.to_client,
            self.connections + other.connections,
        )

    def minus(self, other: WireCounts) -> WireCounts:
        return WireCounts(
            self.messages - other.messages,
            self.to_server - other.to_server,
            self.to_client - other.to_client,
            self.connections - other.connections,
        )


class FrontendStream:
    """One client's byte stream, split into messages as it arrives in arbitrary pieces.

    The first message (startup, or a request for encryption first) has no type byte; every
    later one is a type byte and a 4-byte length that counts itself but not the type."""

    def __init__(self, counts: WireCounts) -> None:
        self.counts = counts
        self.started = False
        self._pending = bytearray()  # an incomplete header (or startup message)
        self._skip = 0  # bytes of the current message's body still to come

    def feed(self, data: bytes) -> tuple[bytes, bytes]:
        """``data`` from the client: (bytes to forward to the server, reply to the client)."""
        self.counts.to_server += len(data)
        if not self.started:
            return self._startup(data)
        self._walk(data)
        return data, b""

    def _startup(self, data: bytes) -> tuple[bytes, bytes]:
        self._pending += data
        if len(self._pending) < 8:
            return b"", b""
        length = int.from_bytes(self._pending[:4], "big")
        code = int.from_bytes(self._pending[4:8], "big")
        if length == 8 and code in (SSL_REQUEST, GSSENC_REQUEST):
            rest = bytes(self._pending[8:])
            self._pending.clear()
            forward, reply = self._startup(rest) if rest else (b"", b"")
            return forward, b"N" + reply
        if len(self._pending) < length:
            return b"", b""
        # The startup message (or a cancel request): forward it, then typed messages follow.
        buffered = bytes(self._pending)
        self._pending.clear()
        self.started = True
        self._walk(buffered[length:])
        return buffered, b""

    def _walk(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n:
            if self._skip:
                step = min(self._skip, n - i)
                self._skip -= step
                i += step
                continue
            take = 5 - len(self._pending)
            self._pending += data[i : i + take]
            i += take
            if len(self._pending) == 5:
                self.counts.messages[chr(self._pending[0])] += 1
                self._skip = int.from_bytes(self._pending[1:5], "big") - 4
                self._pending.clear()


class CountingProxy:
    """A proxy on 127.0.0.1 (an ephemeral port) to the server ``dsn`` names, run by a thread of
    its own; :meth:`counts` totals every connection so far."""

    def __init__(self, dsn: str) -> None:
        params = conninfo.conninfo_to_dict(dsn)
        host = str(params.get("host") or "/var/run/postgresql").split(",")[0]
        self.target_port = int(str(params.get("port") or 5432).split(",")[0])
        self.target_host = host
        self.port = 0
        self._totals = WireCounts()
        self._open = 0  # connections not yet closed (their counts are added when they close)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = future.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def dsn_through(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the proxy's (no encryption)."""
        params: dict[str, Any] = {
            k: v for k, v in conninfo.conninfo_to_dict(dsn).items() if v is not None
        }
        params.update(host="127.0.0.1", port=str(self.port), sslmode="disable")
        params.pop("hostaddr", None)
        return conninfo.make_conninfo("", **params)

    def counts(self, settle: float = 5.0) -> WireCounts:
        """The totals of the connections closed so far, once none is open (or after
        ``settle`` seconds: then the open ones are missing)."""
        deadline = time.monotonic() + settle
        while self._open and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            return WireCounts().plus(self._totals)  # a copy

    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.target_host.startswith("/"):
            path = f"{self.target_host}/.s.PGSQL.{self.target_port}"
            return await asyncio.open_unix_connection(path)
        return await asyncio.open_connection(self.target_host, self.target_port)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._open += 1  # (this thread only)
        counts = WireCounts(connections=1)
        stream = FrontendStream(counts)
        try:
            server_r, server_w = await self._connect()
        except OSError:
            client_w.close()
            self._open -= 1
            return

        async def upstream() -> None:
            while data := await client_r.read(65536):
                forward, reply = stream.feed(data)
                if reply:
                    client_w.write(reply)
                if forward:
                    server_w.write(forward)
                    await server_w.drain()
            server_w.close()

        async def downstream() -> None:
            while data := await server_r.read(65536):
                counts.to_client += len(data)
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in (client_w, server_w):
                writer.close()
            with self._lock:
                self._totals = self._totals.plus(counts)
            self._open -= 1
