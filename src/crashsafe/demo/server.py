"""Serve an aiohttp application on 127.0.0.1, on the running loop or on its own thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from aiohttp import web


async def serve(
    app: web.Application, *, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Start ``app`` on the running loop; return the runner and the bound port."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, backlog=1024).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


class AppThread:
    """An aiohttp app served from a background thread. Use as a context manager.

    ``url`` is ``http://HOST:PORT`` once entered (HOST: 127.0.0.1 unless given).
    """

    def __init__(self, app: web.Application, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            serve(self.app, host=self.host, port=self.port), self._loop
        )
        try:
            self._runner, self.port = future.result(10)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
