"""A delaying TCP proxy: every chunk read from one side is written to the other a fixed time
after it was read, in order, as a link with that one-way latency would deliver it.  Used
where the kernel has no ``sch_netem`` (``tc qdisc add ... netem`` answers "Specified qdisc
kind is unknown"), between a "host" (a network namespace) and the PostgreSQL server.

    python bench/delay_proxy.py --listen 10.231.0.1:6001 --target 127.0.0.1:5432 \\
        --delay-ms 2.5

prints ``ready`` once it listens.  ``--delay-ms`` is one way: a round trip through it costs
twice that, plus the proxy's own cost (measured at zero delay by tests/network/test_hosts.py
and ``python -m bench.rtt``).  With zero delay a chunk is written as soon as it is read.
Each chunk's last millisecond of
delay is slept blocking (see ``_pipe``): a busy proxy may then deliver up to a millisecond
late, but an idle one is precise to ~0.1 ms where the event loop's timers alone came 1.5 ms
late on a loaded 2-core box.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import deque

CHUNK = 65536
TIMER_GRAIN = 0.0012  # seconds: how late the event loop's timers may fire, and then some


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    if delay <= 0:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    else:
        loop = asyncio.get_running_loop()
        pending: deque[tuple[float, bytes]] = deque()
        ready = asyncio.Event()
        done = False

        async def send() -> None:
            while True:
                while not pending:
                    if done:
                        return
                    ready.clear()
                    await ready.wait()
                due, data = pending.popleft()
                wait = due - loop.time()
                if wait > TIMER_GRAIN:
                    await asyncio.sleep(wait - TIMER_GRAIN)
                # The last stretch blocking: the loop's timers wake up to a millisecond late
                # (epoll's timeout is whole milliseconds, rounded up), nanosleep does not.
                wait = due - loop.time()
                if wait > 0:
                    time.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        try:
            while data := await reader.read(CHUNK):
                pending.append((loop.time() + delay, data))
                ready.set()
        finally:
            done = True
            ready.set()
            with contextlib.suppress(ConnectionError):
                await sender
    with contextlib.suppress(OSError):
        writer.write_eof()


async def _serve_one(
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    target: tuple[str, int],
    delay: float,
) -> None:
    try:
        if target[0].startswith("/"):  # a Unix socket's folder (the embedded server), libpq's name
            server_r, server_w = await asyncio.open_unix_connection(
                f"{target[0]}/.s.PGSQL.{target[1]}"
            )
        else:
            server_r, server_w = await asyncio.open_connection(*target)
    except OSError:
        client_w.close()
        return
    pipes = [
        asyncio.create_task(_pipe(client_r, server_w, delay)),
        asyncio.create_task(_pipe(server_r, client_w, delay)),
    ]
    # One side gone: the connection is over, both ways (a reset or a close either way).
    _, others = await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
    with contextlib.suppress(Exception):
        await asyncio.wait_for(asyncio.gather(*others, return_exceptions=True), 5)
    for task in others:
        task.cancel()
    for w in (client_w, server_w):
        w.close()


async def serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve_one(r, w, target, delay), listen[0], listen[1]
    )
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=_address, required=True)
    parser.add_argument("--target", type=_address, required=True)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="one way")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen, args.target, args.delay_ms / 1000))
    sys.exit(0)


if __name__ == "__main__":
    main()
