"""A hostile site on 127.0.0.1: every route misbehaves in one way, and every loop of it
is bounded (it stops sending by itself, whatever the client does)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from crashsafe.demo.server import AppThread

PAGE = "<html><body><span class='v'>{}</span>{}</body></html>"
BAD_LINKS = [
    "http://[::1",  # unparseable IPv6 literal
    "http://127.0.0.1:99999/x",  # port out of range
    "http://127.0.0.1:8a/x",  # port not a number
    "ftp://127.0.0.1/file",  # unsupported scheme
]
HOSTILE = [
    "/ok",
    "/bad-redirect",
    "/redirect-loop",
    "/huge-declared",
    "/endless-chunked",
    "/slow-body",
    "/retry-after-long",
    "/retry-after-garbage",
    "/surrogate",
    "/surrogate-key",
    "/odd-links",
    "/system-exit",
    "/keyboard-interrupt",
    "/generator-exit",
    "/nan",
    "/dup",
    "/with-bad-link",
]
ROBOTS_MODES = ("404", "loop", "huge", "503", "reset", "slow")
CAP = 64 * 2**20  # the most any route sends


class HostileSite:
    """``hits[path]`` counts requests, ``times[path]`` their arrival (monotonic)."""

    def __init__(self, robots: str = "404") -> None:
        assert robots in ROBOTS_MODES
        self.robots = robots
        self.hits: Counter[str] = Counter()
        self.times: defaultdict[str, list[float]] = defaultdict(list)
        self.agents: Counter[str] = Counter()  # User-Agents of the page requests
        # "slow": robots.txt is answered once this is set (or after 60 s), so that a test
        # can hold it until every worker it starts needs it
        self.robots_gate = threading.Event()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] += 1
        self.times[path].append(time.monotonic())
        if path.startswith("/robots"):
            return await self.robots_txt(request)
        self.agents[request.headers.get("User-Agent", "")] += 1
        if path == "/start":
            links = "".join(f'<a href="{u}">x</a>' for u in HOSTILE + BAD_LINKS)
            return web.Response(text=PAGE.format("start", links), content_type="text/html")
        if path == "/bad-redirect":
            return web.Response(status=302, headers={"Location": "http://[::1"})
        if path == "/redirect-loop":
            return web.Response(status=302, headers={"Location": "/redirect-loop"})
        if path == "/huge-declared":
            return await self.stream(request, size=CAP, chunk=2**16, declared=True)
        if path == "/endless-chunked":
            return await self.stream(request, size=CAP, chunk=2**16, declared=False)
        if path == "/slow-body":
            return await self.stream(request, size=200, chunk=1, pause=0.05, declared=True)
        if path == "/retry-after-long":
            return web.Response(status=429, headers={"Retry-After": "999999"})
        if path == "/retry-after-garbage":
            return web.Response(status=503, headers={"Retry-After": "soon, maybe"})
        return web.Response(text=PAGE.format(path, ""), content_type="text/html")

    async def robots_txt(self, request: web.Request) -> web.StreamResponse:
        mode = self.robots
        if mode == "loop":
            n = self.hits[request.path]
            return web.Response(status=302, headers={"Location": f"/robots-{n}.txt"})
        if mode == "huge":  # a rule first, then 17 MB, then a rule past 500 KiB
            head = b"User-agent: *\nDisallow: /private\n"
            filler = b"# " + b"x" * 1000 + b"\n"
            body = head + filler * 17_000 + b"Disallow: /late\n"
            return web.Response(body=body, content_type="text/plain")
        if mode == "503":
            return web.Response(status=503)
        if mode == "reset":
            assert request.transport is not None
            request.transport.abort()  # the connection drops: a network error
            return web.Response()
        if mode == "slow":  # held until the test lets it go
            await asyncio.get_running_loop().run_in_executor(None, self.robots_gate.wait, 60)
            return web.Response(text="User-agent: *\nDisallow: /private\n")
        return web.Response(status=404)

    async def stream(
        self,
        request: web.Request,
        *,
        size: int,
        chunk: int,
        declared: bool,
        pause: float = 0.0,
    ) -> web.StreamResponse:
        resp = web.StreamResponse()
        if declared:
            resp.content_length = size
        else:
            resp.enable_chunked_encoding()
        await resp.prepare(request)
        sent = 0
        try:
            while sent < size:  # bounded: CAP at most, and it stops when the client goes
                await resp.write(b"x" * chunk)
                sent += chunk
                if pause:
                    await asyncio.sleep(pause)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        return resp


@contextmanager
def hostile_site(robots: str = "404") -> Iterator[tuple[HostileSite, str]]:
    site = HostileSite(robots)
    with AppThread(site.app()) as thread:
        yield site, thread.url
