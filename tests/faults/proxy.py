"""A forward HTTP proxy on 127.0.0.1 for tests: plain http targets in absolute form, basic
auth, every request line logged. Bounded: one request per connection."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit


class ForwardProxy:
    """``log`` holds every request line it was asked, as sent (``GET http://h:p/x``)."""

    def __init__(self, user: str = "u", password: str = "p") -> None:
        self.log: list[str] = []
        self.credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.port = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            self.log.append(f"{method} {target}")
            headers = [h for h in lines[1:] if h]
            auth = [h for h in headers if h.lower().startswith("proxy-authorization:")]
            if not auth or auth[0].split(" ", 2)[-1] != self.credentials:
                writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                             b"Proxy-Authenticate: Basic\r\nContent-Length: 0\r\n\r\n")  # fmt: skip
                return
            url = urlsplit(target)
            length = next((int(h.split(":", 1)[1]) for h in headers
                           if h.lower().startswith("content-length:")), 0)  # fmt: skip
            body = await reader.readexactly(length) if length else b""
            up_reader, up_writer = await asyncio.open_connection(url.hostname, url.port or 80)
            kept = [h for h in headers if not h.lower().startswith(("proxy-", "connection"))]
            path = url.path + (f"?{url.query}" if url.query else "")
            up_writer.write(f"{method} {path or '/'} HTTP/1.1\r\n".encode()
                            + "".join(f"{h}\r\n" for h in kept).encode()
                            + b"Connection: close\r\n\r\n" + body)  # fmt: skip
            await up_writer.drain()
            answer = await asyncio.wait_for(up_reader.read(2**24), 10)
            up_writer.close()
            writer.write(answer.replace(b"Connection: keep-alive", b"Connection: close"))
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()


@contextmanager
def forward_proxy(user: str = "u", password: str = "p") -> Iterator[ForwardProxy]:
    proxy = ForwardProxy(user, password)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    server: list[asyncio.base_events.Server] = []

    async def serve() -> None:
        srv = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        proxy.port = srv.sockets[0].getsockname()[1]
        server.append(srv)
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop).result(10)
    started.wait(10)
    try:
        yield proxy
    finally:

        async def stop() -> None:
            server[0].close()
            await server[0].wait_closed()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
