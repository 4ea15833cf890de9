"""``crashsafe crawl --workers N``: N crawl processes for the cores, one store server.

The command's own process starts N ``crashsafe crawl`` processes, each given one end of a
socket pair, and serves their store calls itself (``store.process.serve``): one writer,
so the workers never wait on each other's SQLite lock. Each worker is a full crawler with
its own leases and liveness lock, so the guarantee is per worker as always: a kill costs
at most ``concurrency + lease_ahead`` pages per worker.

Signals: the workers run in sessions of their own, so a Ctrl-C in the terminal reaches
this process only, which passes each SIGINT/SIGTERM on to every worker once (a second
Ctrl-C aborts them, as for one crawl). If this process is killed, the workers see their
store socket close and stop; if a worker dies, its store is closed, which frees its
liveness lock, and the others take over its URLs.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from crashsafe.store.process import serve


def run_workers(n: int, crawl_args: Sequence[str], db_url: str, *, progress: bool) -> list[int]:
    """Run ``crashsafe crawl *crawl_args`` in ``n`` processes, serve their store at
    ``db_url`` until all have ended, and return their exit codes (negative: a signal).
    The first worker shows the progress line when ``progress`` is true."""
    pairs = [socket.socketpair() for _ in range(n)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (_, theirs) in enumerate(pairs):
            cmd = [sys.executable, "-m", "crashsafe", "crawl", *crawl_args,
                   "--store-fd", str(theirs.fileno())]  # fmt: skip
            if i or not progress:
                cmd.append("--no-progress")
            procs.append(
                subprocess.Popen(
                    cmd,
                    pass_fds=(theirs.fileno(),),
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # signals reach them through us, once
                )
            )
            theirs.close()  # theirs now: its end closes when the worker ends
    except BaseException:
        for proc in procs:
            proc.kill()
            proc.wait()
        raise

    interrupted = False

    def forward(sig: int, _frame: FrameType | None) -> None:
        nonlocal interrupted
        interrupted = True
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(sig)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve([ours for ours, _ in pairs], db_url)
        return [proc.wait() for proc in procs]
    finally:
        for sig, handler in previous.items():
            # Interrupted, the command only reports now and exits 130: a Ctrl-C more
            # (the second of a double Ctrl-C, after the workers are gone) must not kill
            # it half-way through its summary.
            signal.signal(sig, signal.SIG_IGN if interrupted else handler)
        for proc in procs:  # only if serving failed: they cannot commit without us
            if proc.poll() is None:
                proc.kill()
                proc.wait()
