"""The store's side of :mod:`crashsafe.store.process`: a loop that answers store calls
from crawlers over sockets, run as ``python -m crashsafe.store.server FD URL`` (a crawl's
own store process) or by ``crawl --workers N`` for its workers.

Kept apart from the crawler's side, which needs asyncio: a store process starts on every
run, after every kill, and imports only what serving takes (0.14 s to its first answer
here, against 0.22 s with asyncio).
"""

from __future__ import annotations

import contextlib
import pickle
import selectors
import signal
import socket
import struct
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from crashsafe.errors import StoreError

if TYPE_CHECKING:
    from crashsafe.store.base import Store

HEADER = struct.Struct("!I")  # the length of the pickle that follows


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
    sock.sendall(HEADER.pack(len(data)) + data)


def _run_call(sock: socket.socket, store: Store, body: bytes) -> None:
    name, args, kwargs = pickle.loads(body)
    try:
        value = getattr(store, name)(*args, **kwargs)
    except Exception as exc:
        _send(sock, False, exc)
    else:
        _send(sock, True, value)


def _answer(sock: socket.socket, store: Store) -> bool:
    """Read one call from ``sock`` (blocking), run it on ``store``, send the answer; False
    once the crawler at the other end is gone."""
    try:
        header = _recv_exact(sock, HEADER.size)
        body = None if header is None else _recv_exact(sock, HEADER.unpack(header)[0])
        if body is None:
            return False
        _run_call(sock, store, body)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


def _answer_ready(sock: socket.socket, store: Store, buffer: bytearray) -> bool:
    """Read what ``sock`` has (without waiting for more), answer every whole call in it;
    False once the crawler at the other end is gone. A crawler paused half-way through a
    call (SIGSTOP, a full pipe) leaves its part in ``buffer``: the others are served on."""
    try:
        data = sock.recv(1 << 20)
    except BlockingIOError:
        return True
    except (ConnectionResetError, OSError):
        return False
    if not data:
        return False
    buffer += data
    try:
        while len(buffer) >= HEADER.size:
            end = HEADER.size + HEADER.unpack_from(buffer)[0]
            if len(buffer) < end:
                break
            body = bytes(buffer[HEADER.size : end])
            del buffer[:end]
            sock.setblocking(True)  # answers are sent whole
            try:
                _run_call(sock, store, body)
            finally:
                sock.setblocking(False)
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


def serve(socks: Sequence[socket.socket], url: str) -> None:
    """Answer the crawlers at the other end of ``socks``, each with a store of its own
    opened at ``url``, until every socket has closed. A crawler that goes away has its
    store closed at once (its liveness lock with it); the others are served on."""
    from crashsafe.store import open_store

    stores: dict[socket.socket, Store] = {}
    try:
        for sock in socks:
            try:
                store = open_store(url, create=False)
            except Exception as exc:
                with contextlib.suppress(OSError):
                    _send(sock, False, exc)
                sock.close()
                continue
            try:
                _send(sock, True, None)
            except OSError:  # that crawler is gone already
                store.close()
                sock.close()
                continue
            stores[sock] = store
        buffers = {sock: bytearray() for sock in stores}
        with selectors.DefaultSelector() as ready:
            for sock in stores:
                sock.setblocking(False)
                ready.register(sock, selectors.EVENT_READ, data=sock)
            while stores:
                if len(stores) == 1 and not any(buffers.values()):
                    # No one to take turns with: block on the socket.
                    [(sock, store)] = stores.items()
                    sock.setblocking(True)
                    while _answer(sock, store):
                        pass
                    finished = [sock]
                else:
                    readable = [key.data for key, _ in ready.select()]
                    finished = [
                        sock
                        for sock in readable
                        if not _answer_ready(sock, stores[sock], buffers[sock])
                    ]
                for sock in finished:
                    buffers.pop(sock, None)
                    ready.unregister(sock)
                    stores.pop(sock).close()
                    sock.close()
    finally:
        for store in stores.values():
            store.close()


if __name__ == "__main__":
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, signal.SIG_IGN)
    serve([socket.socket(fileno=int(sys.argv[1]))], sys.argv[2])
