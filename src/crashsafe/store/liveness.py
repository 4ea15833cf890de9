"""Liveness locks for SQLite workers: an OS file lock that dies with its process.

Each worker holds ``flock(LOCK_EX)`` on ``<db>-workers/<owner>.lock`` while it lives. The
kernel drops the lock when the process dies, however it dies (SIGKILL and OOM included),
so anybody who can take the lock knows the owner is gone and may reclaim its leases at
once instead of waiting for them to expire. Lease expiry stays the backstop, e.g. for a
database shared over a filesystem whose locks do not cross machines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
from pathlib import Path

from crashsafe.errors import StoreError
from crashsafe.files import open_private, private_folder


def new_owner_id(run: str = "") -> str:
    """An owner id unique across machines, processes and restarts; ``run`` (a command's
    own id, :func:`new_run_id`) leads it, so that a run's grants can be told apart."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{run}.{host}-{os.getpid()}-{secrets.token_hex(4)}".lstrip(".")


def new_run_id() -> str:
    """The id of one command's run (its workers' owner ids start with it)."""
    return secrets.token_hex(4)


class LockDir:
    """The folder of liveness lock files beside one database file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._held: dict[str, int] = {}
        if folder.exists() and not folder.is_dir():
            raise StoreError(
                f"{folder} is a file where crashsafe needs a folder (for the lock files of "
                "the database's workers): move or delete it (it is not crashsafe's), then "
                "run the command again"
            )

    def _path(self, owner: str) -> Path:
        # Owner ids are ours, but never let one name a path outside the folder.
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in owner)
        return self.folder / f"{safe}.lock"

    def acquire(self, owner: str) -> None:
        """Take ``owner``'s lock for the life of this process (or until release)."""
        private_folder(self.folder)
        fd = open_private(self._path(owner), os.O_RDWR | os.O_CREAT, follow=False)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._held[owner] = fd

    def release(self, owner: str) -> None:
        fd = self._held.pop(owner, None)
        if fd is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path(owner).unlink()
            os.close(fd)

    def is_alive(self, owner: str) -> bool:
        """True while some process holds ``owner``'s lock."""
        if owner in self._held:
            return True
        path = self._path(owner)
        try:  # read-only: the question is asked by read-only commands too (status)
            fd = open_private(path, os.O_RDONLY, follow=False)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        else:
            with contextlib.suppress(OSError):  # (a read-only file system keeps it)
                path.unlink()
            return False
        finally:
            os.close(fd)
