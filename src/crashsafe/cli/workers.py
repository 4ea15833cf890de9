"""``crashsafe crawl --workers N``: N crawl processes for the cores.

The command's own process starts N ``crashsafe crawl`` processes. On SQLite each is given
one end of a socket pair, and this process serves their store calls itself
(``store.server.serve``): one writer, so the workers never wait on each other's SQLite
lock. On PostgreSQL each worker opens its own connection (the server takes their
transactions side by side) and this process only waits for them. Each worker is a full
crawler with its own leases and liveness lock, so the guarantee is per worker as always:
a kill costs at most ``concurrency + lease_ahead`` pages per worker.

Signals: the workers run in sessions of their own, so a Ctrl-C in the terminal reaches
this process only, which passes each SIGINT/SIGTERM on to every worker once (a second
Ctrl-C aborts them, as for one crawl). If this process is killed, the workers stop too:
each holds the read end of a pipe whose write end only this process has, and stops
gracefully when it reads end-of-file (on SQLite their store socket closes as well). If
a worker dies, its liveness lock dies with it, and the others take over its URLs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from crashsafe.interrupts import parent_gone
from crashsafe.store.server import serve


def run_workers(
    n: int,
    crawl_args: Sequence[str],
    db_url: str,
    *,
    progress: bool,
    serve_store: bool = True,
    metrics_port: int | None = None,
) -> list[int]:
    """Run ``crashsafe crawl *crawl_args`` in ``n`` processes, serve their store at
    ``db_url`` (``serve_store``; else each opens its own) until all have ended, and
    return their exit codes (negative: a signal). The first worker shows the progress
    line when ``progress`` is true."""
    pairs = [socket.socketpair() for _ in range(n)] if serve_store else []
    life, ours = os.pipe()  # ours is never written: the workers read EOF when we die
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(n):
            cmd = [sys.executable, "-m", "crashsafe", "crawl", *crawl_args]
            cmd += ["--parent-fd", str(life)]
            fds: tuple[int, ...] = (life,)
            if serve_store:
                fds += (pairs[i][1].fileno(),)
                cmd += ["--store-fd", str(fds[1])]
            if i or not progress:
                cmd.append("--no-progress")
            if metrics_port is not None:
                cmd += ["--metrics-port", str(metrics_port + i)]
            procs.append(
                subprocess.Popen(
                    cmd,
                    pass_fds=fds,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # signals reach them through us, once
                )
            )
            if serve_store:
                pairs[i][1].close()  # theirs now: its end closes when the worker ends
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        os.close(ours)
        raise
    finally:
        os.close(life)

    interrupted = False

    def forward(sig: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if serve_store:
            serve([ours for ours, _ in pairs], db_url)
        return [proc.wait() for proc in procs]
    finally:
        for sig, handler in previous.items():
            # Interrupted, the command only reports now and exits 130: a Ctrl-C more
            # (the second of a double Ctrl-C, after the workers are gone) must not kill
            # it half-way through its summary.
            signal.signal(sig, signal.SIG_IGN if interrupted else handler)
        for proc in procs:  # only if serving (or waiting) failed
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        os.close(ours)


def stop_with_parent(fd: int) -> None:
    """In a worker: stop gracefully (SIGTERM to itself) once the command that started it
    is gone, however it went (``fd`` is the read end of its pipe)."""

    def watch() -> None:
        while True:
            try:
                if not os.read(fd, 1):
                    break
            except InterruptedError:
                continue
            except OSError:
                break
        parent_gone()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="crashsafe-parent", daemon=True).start()
