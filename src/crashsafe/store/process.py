"""Run a store's methods off the event loop: on a thread, or in a process of its own.

The crawl loop hands every store call to a :class:`StoreThread` or a
:class:`StoreProcess`. A thread shares Python's interpreter lock with the loop: each
SQLite statement gives the lock up and must win it back from a busy loop, so a group
commit that takes 0.7 ms alone took 1.7 ms in a crawl, and the pages waiting on it hold
their slots (measured: ``benchmarks/RESULTS.md``). A store process has an interpreter of
its own; the loop only pickles the call and reads the answer.

The process speaks length-prefixed pickles over a socket pair, one call at a time. It
ignores SIGINT/SIGTERM (the crawler decides when to stop and still needs its store to
commit and give leases back) and exits when its socket closes: when the crawler is done,
or killed. Its liveness lock (``register_worker``) dies with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from crashsafe.errors import StoreError
from crashsafe.store.base import Store

T = TypeVar("T")
_HEADER = struct.Struct("!I")


def _split(
    store: Store, fn: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """``(method name, args, kwargs)`` of a call to one of ``store``'s methods, given as a
    bound method or a ``functools.partial`` of one."""
    kwargs: dict[str, Any] = {}
    if isinstance(fn, functools.partial):
        args = fn.args + args
        kwargs = dict(fn.keywords)
        fn = fn.func
    if getattr(fn, "__self__", None) is not store:
        raise TypeError(f"{fn!r} is not a method of the store")
    return fn.__name__, args, kwargs


class StoreThread:
    """Store calls on one dedicated thread of this process."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crashsafe-store")

    async def start(self) -> None:
        pass

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def close(self) -> None:
        self._pool.shutdown(wait=True)


class StoreProcess:
    """Store calls served by a child process that opens the store at ``store.url``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "crashsafe.store.process", str(theirs.fileno()),
                 self.store.url],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches the crawler only
            )  # fmt: skip
        self._reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        await self._answer()  # the store opened (or why it did not)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        request = pickle.dumps(_split(self.store, fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        # Shielded: a cancelled caller must not leave an answer unread on the socket.
        result: T = await asyncio.shield(self._exchange(request))
        return result

    async def _exchange(self, request: bytes) -> Any:
        async with self._lock:
            if self._writer is None:
                raise StoreError("the store process is closed")
            self._writer.write(_HEADER.pack(len(request)) + request)
            return await self._answer()

    async def _answer(self) -> Any:
        assert self._reader is not None
        try:
            (size,) = _HEADER.unpack(await self._reader.readexactly(_HEADER.size))
            ok, value = pickle.loads(await self._reader.readexactly(size))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            code = self._proc.poll() if self._proc else None
            raise StoreError(
                f"the store process for {self.store.url} ended unexpectedly (exit code {code})"
            ) from exc
        if not ok:
            raise value
        return value

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(ConnectionError):
                await self._writer.wait_closed()
            self._writer = None
        if self._proc is not None:
            for _ in range(500):  # it exits as soon as it sees the socket close
                if self._proc.poll() is not None:
                    break
                await asyncio.sleep(0.01)
            else:
                self._proc.kill()
                self._proc.wait()


def _recv_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _send(sock: socket.socket, ok: bool, value: Any) -> None:
    try:
        data = pickle.dumps((ok, value), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an exception that does not pickle
        data = pickle.dumps((False, StoreError(f"{type(value).__name__}: {value} ({exc})")))
    sock.sendall(_HEADER.pack(len(data)) + data)


def serve(fd: int, url: str) -> None:
    """The child's main loop: answer calls until the socket closes."""
    from crashsafe.store import open_store

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=fd)
    try:
        store = open_store(url, create=False)
    except Exception as exc:
        _send(sock, False, exc)
        return
    try:
        _send(sock, True, None)
        while (header := _recv_exact(sock, _HEADER.size)) is not None:
            body = _recv_exact(sock, _HEADER.unpack(header)[0])
            if body is None:
                break
            name, args, kwargs = pickle.loads(body)
            try:
                value = getattr(store, name)(*args, **kwargs)
            except Exception as exc:
                _send(sock, False, exc)
            else:
                _send(sock, True, value)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the crawler is gone
    finally:
        store.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
