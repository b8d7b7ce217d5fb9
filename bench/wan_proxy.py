"""A TCP proxy modelling a WAN link per connection, for the download bench's ``--wan`` mode.

    .venv/bin/python bench/wan_proxy.py HOST:PORT [--rate 25] [--delay 20] [--port 0]

Listens on a loopback port (free unless ``--port``; the port is printed on the first line of
stdout once listening) and forwards every connection to ``HOST:PORT``, byte for byte.  Each
connection is modelled as its own link, in each direction:

- a bandwidth cap of ``--rate`` MiB/s: a chunk read (up to 256 KiB) occupies the link for
  ``len / rate`` seconds after the previous chunk left it (a token bucket whose bucket holds
  one read); the proxy reads no more from that side until the link is free again, so a fast
  sender is held back by TCP's own flow control, as behind a slow bottleneck;
- a one-way delay of ``--delay`` ms, applied to every chunk: a chunk is delivered ``delay``
  after it left the link.  The delay is pipelined (a queue of timestamped chunks, written by
  another task when due), so throughput stays at the rate and a round trip costs
  ``2 x delay``;
- the TCP handshake: a new connection's first bytes leave ``2 x delay`` (one round trip)
  after it was accepted.

What it leaves out: loss and retransmission, TCP's congestion control (slow start, the
window's growth and collapse; the cap is reached at once), TLS (its extra round trips and
CPU), the jitter of a real path, a link shared by the connections (each has its own cap;
there is no aggregate cap) and S3's own per-connection or per-prefix limits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

READ = 256 << 10
#: Chunks in flight per direction (beyond them the reader waits: bounds the memory, as a
#: receive window would).
QUEUE = 16


class Link:
    """One direction of one connection: *rate* bytes per second, *delay* seconds."""

    def __init__(self, rate: float, delay: float, start: float) -> None:
        self.rate, self.delay = rate, delay
        self.free_at = start  # when the link has sent the previous chunk

    def send(self, size: int, now: float) -> tuple[float, float]:
        """``(when the chunk has left the link, when it is delivered)``."""
        left = max(now, self.free_at) + size / self.rate
        self.free_at = left
        return left, left + self.delay


async def _deliver(
    queue: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter
) -> None:
    loop = asyncio.get_running_loop()
    while (item := await queue.get()) is not None:
        due, data = item
        wait = due - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: Link) -> None:
    """Forward *reader* to *writer* through *link* until EOF."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(QUEUE)
    deliver = asyncio.create_task(_deliver(queue, writer))
    try:
        while data := await reader.read(READ):
            left, due = link.send(len(data), loop.time())
            await queue.put((due, data))
            wait = left - loop.time()
            if wait > 0:  # the link is busy until then: read no more
                await asyncio.sleep(wait)
        await queue.put(None)
        await deliver
    finally:
        deliver.cancel()


class Proxy:
    def __init__(self, host: str, port: int, rate: float, delay: float) -> None:
        self.host, self.port, self.rate, self.delay = host, port, rate, delay

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        server_w: asyncio.StreamWriter | None = None
        try:
            server_r, server_w = await asyncio.open_connection(self.host, self.port, limit=READ)
            # the handshake: the client's first bytes leave one round trip after its SYN
            start = accepted + 2 * self.delay
            up = Link(self.rate, self.delay, start)
            down = Link(self.rate, self.delay, start)
            pumps = [
                asyncio.create_task(_pump(client_r, server_w, up)),
                asyncio.create_task(_pump(server_r, client_w, down)),
            ]
            try:
                await asyncio.gather(*pumps)
            finally:
                for pump in pumps:
                    pump.cancel()
        except (OSError, asyncio.IncompleteReadError):
            pass  # a reset on either side ends the connection
        finally:
            for w in (client_w, server_w):
                if w is not None:
                    w.close()
                    with contextlib.suppress(OSError):
                        await w.wait_closed()


async def run(target: str, rate_mib: float, delay_ms: float, port: int) -> None:
    host, _, target_port = target.rpartition(":")
    proxy = Proxy(host, int(target_port), rate_mib * 2**20, delay_ms / 1000)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", port, limit=READ)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", help="HOST:PORT to forward to")
    parser.add_argument("--rate", type=float, default=25.0, help="MiB/s per connection and way")
    parser.add_argument("--delay", type=float, default=20.0, help="one-way delay, ms")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: free)")
    options = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(options.target, options.rate, options.delay, options.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
