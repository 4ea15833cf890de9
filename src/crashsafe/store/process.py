"""Run a store's methods off the event loop: on a thread, or in a process of its own.

The crawl loop hands every store call to a :class:`StoreThread` or a
:class:`StoreProcess`. A thread shares Python's interpreter lock with the loop: each
SQLite statement gives the lock up and must win it back from a busy loop, so a group
commit that takes 0.7 ms alone took 1.7 ms in a crawl, and the pages waiting on it hold
their slots (measured: ``benchmarks/RESULTS.md``). A store process has an interpreter of
its own; the loop only pickles the call and reads the answer.

The process speaks length-prefixed pickles over a socket pair and answers in the order
it got the calls. It ignores SIGINT/SIGTERM (the crawler decides when to stop and still
needs its store to commit and give leases back) and exits when its socket closes: when
the crawler is done, or killed. Its liveness lock (``register_worker``) dies with it.

:func:`serve` also answers several crawl processes at once, each on its own socket with
a store object of its own (``crashsafe crawl --workers N``: the parent serves, the
workers crawl): their calls run one at a time, so they never wait on each other's
SQLite write lock, and a worker that disappears has its store closed, which frees its
liveness lock for the others to reclaim its leases.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, Protocol, TypeVar

from crashsafe.errors import StoreError
from crashsafe.store import masked
from crashsafe.store.base import Store
from crashsafe.store.server import HEADER, serve

__all__ = ["StoreCall", "StoreProcess", "StoreThread", "how_it_ended", "serve", "store_runner"]

T = TypeVar("T")
P = ParamSpec("P")


class StoreCall(Protocol):
    """How crawl code runs a store method off its event loop: ``await call(store.lease,
    crawl, owner, 16, 60.0)``; type-checked against the method's own signature."""

    def __call__(
        self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[T]: ...


def _method_name(store: Store, fn: Callable[..., Any]) -> str:
    """The name of ``fn``, which must be one of ``store``'s bound methods."""
    if getattr(fn, "__self__", None) is not store:
        raise TypeError(f"{fn!r} is not a method of the store")
    return fn.__name__


def how_it_ended(code: int) -> str:
    """A process's exit status in words: ``killed by signal 9; out of memory?``,
    ``killed by signal 15``, ``exited with code 1``."""
    if code < 0:
        return f"killed by signal {-code}" + ("; out of memory?" if code == -9 else "")
    return f"exited with code {code}"


def store_runner(
    store: Store, in_process: bool | None = None, *, server: socket.socket | None = None
) -> StoreThread | StoreProcess:
    """How the crawl calls ``store``: through ``server`` (a socket to a :func:`serve`
    loop that is already running), in a child process (the default for a store that a
    child can open again from its URL, SQLite or PostgreSQL, on POSIX: the socket is
    passed by descriptor) or on a thread."""
    if server is not None:
        return StoreProcess(store, server)
    if in_process is None:  # (PostgreSQL too: measured 16 % faster than a thread)
        in_process = store.url.startswith(("sqlite:", "postgres")) and os.name == "posix"
    return StoreProcess(store) if in_process else StoreThread(store)


class StoreThread:
    """Store calls on one dedicated thread of this process."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crashsafe-store")

    async def start(self) -> None:
        pass

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        run = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


class _Answers(asyncio.Protocol):
    """The parent's end of the socket: each answer resolves the oldest waiting call
    straight from ``data_received``, without a task in between."""

    def __init__(self, url: str, how_it_ended: Callable[[], str]) -> None:
        self.url = url
        self.how_it_ended = how_it_ended
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.lost = False
        self._error: StoreError | None = None
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= HEADER.size:
            (size,) = HEADER.unpack_from(buffer)
            end = HEADER.size + size
            if len(buffer) < end:
                break
            ok, value = pickle.loads(buffer[HEADER.size : end])
            del buffer[:end]
            future = self.waiting.popleft()
            if future.done():  # its caller was cancelled: drop the answer
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_exception(self.error())

    def error(self) -> StoreError:
        """Why calls fail once the socket is gone (looked up when a call needs it: our
        own close waits for no answer and should not wait for the process either)."""
        if self._error is None:
            self._error = StoreError(
                f"the store process for {masked(self.url)} ended unexpectedly "
                f"({self.how_it_ended()})"
            )
        return self._error


class StoreProcess:
    """Store calls served by a child process that opens the store at ``store.url``, or
    by the :func:`serve` loop at the other end of ``server``.

    Each request goes out at once; the server answers in the order it got them.
    """

    def __init__(self, store: Store, server: socket.socket | None = None) -> None:
        self.store = store
        self._proc: subprocess.Popen[bytes] | None = None
        self._transport: asyncio.Transport | None = None
        self._answers = _Answers(store.url, self._how_it_ended)
        # Started now, not in ``start``: the child imports and opens the store while the
        # crawl is still getting ready (it exits by itself if nobody ever connects).
        self._socket = server if server is not None else self._spawn()

    def _how_it_ended(self) -> str:
        code = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self._proc.wait(0.5)
        return "its socket closed" if code is None else how_it_ended(code)

    async def start(self) -> None:
        ours = self._socket
        opened = self._expect()  # its first answer: the store opened (or why it did not)
        loop = asyncio.get_running_loop()
        # Waiting before connecting: a server already running answers as soon as it can.
        self._transport, _ = await loop.create_unix_connection(lambda: self._answers, sock=ours)
        await opened

    def _spawn(self) -> socket.socket:
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "crashsafe.store.server", str(theirs.fileno()),
                 self.store.url],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches the crawler only
            )  # fmt: skip
        return ours

    def _expect(self) -> asyncio.Future[Any]:
        if self._answers.lost:
            raise self._answers.error()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers.waiting.append(future)
        return future

    async def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        if self._transport is None:
            raise StoreError(f"the store process for {masked(self.store.url)} is not running")
        call = (_method_name(self.store, fn), args, kwargs)
        request = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        future = self._expect()
        self._transport.write(HEADER.pack(len(request)) + request)
        result: T = await future
        return result

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        else:
            self._socket.close()  # never started: the child sees it close and exits
        if self._proc is not None:
            for _ in range(500):  # it exits as soon as it sees the socket close
                if self._proc.poll() is not None:
                    break
                await asyncio.sleep(0.01)
            else:
                self._proc.kill()
                self._proc.wait()
