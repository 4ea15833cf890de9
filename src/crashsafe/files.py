"""Files a job creates: private to their owner, and locks never opened through a link.

Databases, checkpoints, dead letters and exports hold what was crawled or classified, and
sometimes what it cost; they are created ``0600`` (folders ``0700``) whatever the umask
says. Lock files are opened with ``O_NOFOLLOW``: a lock file planted as a symbolic link to
another file (``results.jsonl.lock -> ~/.bashrc``) would otherwise be truncated and written
through the link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from crashsafe.errors import ConfigError

FILE_MODE = 0o600
FOLDER_MODE = 0o700


def open_private(path: Path, flags: int, *, follow: bool = True) -> int:
    """``os.open`` creating ``path`` (if ``flags`` say so) as ``0600``; with
    ``follow=False`` a symbolic link at ``path`` is refused instead of followed."""
    extra = os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(path, flags | extra, FILE_MODE)
    except IsADirectoryError:
        raise ConfigError(
            f"{path} is a folder where crashsafe needs a file: move it away, or choose another path"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise ConfigError(
                f"{path} is a symbolic link: crashsafe does not open its lock files through "
                "links (one could point at any file); remove it"
            ) from None
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise ConfigError(
                f"cannot write {path}: {exc.strerror} (a read-only file system, or no "
                "permission); choose a writable place"
            ) from None
        raise


def create_private(path: Path) -> None:
    """Create ``path`` empty as ``0600`` if it does not exist (so that a library which
    creates it later, SQLite say, finds it with the right mode)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        return
    os.close(fd)


def private_folder(path: Path) -> None:
    """``mkdir -p`` with every folder it creates ``0700`` (``Path.mkdir(parents=True)``
    gives the parents it creates the umask's mode, ``0755`` under the usual ``022``)."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    try:
        for folder in reversed(missing):
            folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
        path.mkdir(mode=FOLDER_MODE, exist_ok=True)
    except FileExistsError:  # exist_ok covers folders only: a file is in the way
        raise ConfigError(
            f"{path} is a file where crashsafe needs a folder (for lock files): move it "
            "away, or choose another path"
        ) from None


@contextlib.contextmanager
def atomic_text(path: Path) -> Iterator[IO[str]]:
    """Write ``path`` whole or not at all: a temporary file beside it (``0600``), fsync'd,
    then renamed over it. A kill or an error half-way leaves the previous file as it was
    and no truncated one. A symbolic link stays: the file it names is the one replaced.
    What is not a file (a FIFO, ``/dev/stdout``, a device) is written as it is, in
    place: renaming over it would put a file where it was."""
    try:
        mode: int | None = os.stat(path).st_mode  # (through links)
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        with open(path, "w", encoding="utf-8", newline="") as stream:
            yield stream
        return
    path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, follow=False)
    except ConfigError:  # say which file could not be written: the one asked for
        raise ConfigError(
            f"cannot write {path}: its folder {path.parent} cannot be written (a read-only "
            "file system, or no permission); choose a writable place"
        ) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a power cut
    finally:
        os.close(folder)
