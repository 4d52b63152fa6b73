"""A delaying TCP proxy: every chunk read from one side is written to the other a fixed time
after it was read, in order, as a link with that one-way latency would deliver it.  Used
where the kernel has no ``sch_netem`` (``tc qdisc add ... netem`` answers "Specified qdisc
kind is unknown"), between a "host" (a network namespace) and the PostgreSQL server.

    python bench/delay_proxy.py --listen 10.231.0.1:6001 --target 127.0.0.1:5432 \\
        --delay-ms 2.5

prints ``ready`` once it listens.  ``--delay-ms`` is one way: a round trip through it costs
twice that, plus the proxy's own cost (measured at zero delay by tests/network/test_hosts.py
and ``python -m bench.rtt``).  With zero delay a chunk is written as soon as it is read.
Otherwise each direction of each connection has a thread that sleeps until each chunk is due
(``_pipe``): the event loop's timers alone fire up to a millisecond late (docs/design.md,
"The delaying proxy sleeps in a thread per direction").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import queue
import sys
import threading
import time

CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay`` seconds after it was read."""
    if delay <= 0:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    else:
        loop = asyncio.get_running_loop()
        pending: queue.SimpleQueue[tuple[float, bytes] | None] = queue.SimpleQueue()

        def write(data: bytes) -> None:
            with contextlib.suppress(Exception):  # the other side is gone: nothing to do
                writer.write(data)

        def send() -> None:
            # A thread per direction of each connection: its blocking sleep (precise, where the
            # loop's timers fire up to a millisecond late) holds up no other connection.
            while (item := pending.get()) is not None:
                due, data = item
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                loop.call_soon_threadsafe(write, data)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            while data := await reader.read(CHUNK):
                pending.put((time.monotonic() + delay, data))
        finally:
            pending.put(None)
            await asyncio.to_thread(sender.join)  # its writes are queued on the loop before this
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
