"""Downloaded files, stored once per content: ``<folder>/ab/cd/<sha256>``.

A spider asks for a download with ``page.download(url)`` (a :class:`File`), placed in a
record's data or yielded on its own. The crawl downloads it before the page commits,
writes it here, and the record stores a reference (``url``, ``sha256``, ``path``,
``size``, ``content_type``) in the page's transaction, with a ``files`` row.

Why a kill cannot leave a partial file, nor two copies of one content: the bytes go to a
temporary file in ``<folder>/.tmp/`` (named by host and PID), are fsync'd, and are renamed
to the name of their SHA-256; only a rename makes a file appear under ``ab/cd/``, whole.
The same content again finds its name taken and leaves it as it is. A kill between the
rename and the page's commit leaves a file no record refers to yet: the page is fetched
again, its download finds the file there, and the commit refers to it. Temporary files of
dead processes on this host are removed when a crawl opens the folder.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import socket
import time
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crashsafe.errors import ConfigError, FolderUnwritable
from crashsafe.files import open_private, private_folder

TMP = ".tmp"
STALE_TEMP = 24 * 3600.0  # a temporary file this old is left over, whatever host made it
#: The Files a spider callback makes, noted while the crawl runs it (crawl/downloads.py):
#: only a page that made one is searched for them.
wanted: ContextVar[list[File] | None] = ContextVar("wanted", default=None)


@dataclass(frozen=True, slots=True)
class File:
    """A file to download when the page commits; ``page.download(url)`` makes one.

    In a record's data it becomes ``{"url", "sha256", "path", "size", "content_type"}``
    (``path`` relative to the files folder), or ``{"url", "error"}`` when the file cannot
    be had for good (404, too large, disallowed by robots.txt). A download that fails for
    now (timeout, 5xx) retries the whole page later.
    """

    url: str

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise ValueError(
                f"a download needs a URL, got {self.url!r} (did the selector match nothing?)"
            )
        made = wanted.get()
        if made is not None:
            made.append(self)


class FileOutsideCallback(ValueError):
    """A File made by another page's callback (kept across pages): it is not this page's
    download."""

    def __init__(self, url: str) -> None:
        super().__init__(
            f"a File({url!r}) made outside this page's callback (kept from another page?): "
            "call page.download(url) in the callback that yields it"
        )


def _host() -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname())[:64]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class FileStore:
    """The files folder of a crawl (shared by its workers, and by crawls that share it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._tmp = folder / TMP
        try:
            private_folder(self._tmp)
        except (OSError, ConfigError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise FolderUnwritable(
                f"cannot create the files folder {folder}: {why}; choose a writable place "
                "(--files DIR, or the files_dir setting)"
            ) from None
        self._remove_dead_temps()

    def _remove_dead_temps(self) -> None:
        """Temporary files left by killed processes: of this host when their PID is gone,
        of any host (a shared folder) once a day old."""
        prefix = f"{_host()}-"
        old = time.time() - STALE_TEMP
        for entry in self._tmp.iterdir():
            pid = entry.name[len(prefix) :].split("-", 1)[0]
            with contextlib.suppress(FileNotFoundError):
                if (
                    entry.name.startswith(prefix) and pid.isdigit() and not _alive(int(pid))
                ) or entry.stat().st_mtime < old:
                    entry.unlink()

    @staticmethod
    def relative(sha256: str) -> str:
        return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"

    def put(self, content: bytes) -> tuple[str, str]:
        """Store ``content`` under its SHA-256 unless it is there; return the hash and the
        path relative to the folder. Blocking (fsync): run it off the event loop."""
        sha = hashlib.sha256(content).hexdigest()
        rel = self.relative(sha)
        final = self.folder / rel
        if final.exists():
            return sha, rel
        # Random: a process of a restarted container may have the PID and host name of
        # one that left a temporary file behind.
        tmp = self._tmp / f"{_host()}-{os.getpid()}-{secrets.token_hex(8)}"
        try:
            fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, follow=False)
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            private_folder(final.parent)
            os.replace(tmp, final)  # the same content again: the same bytes, harmless
            _fsync_folder(final.parent)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise FolderUnwritable(
                    f"disk full while storing a download in {self.folder}: free some space "
                    "and run the same command again (the pages in flight are fetched again)"
                ) from None
            raise FolderUnwritable(f"cannot store a download in {self.folder}: {exc}") from None
        except ConfigError as exc:  # (open_private's words for a read-only folder)
            raise FolderUnwritable(str(exc)) from None
        return sha, rel


def default_folder(store_url: str) -> Path:
    """``files`` beside an SQLite database; ``./files`` for any other store."""
    from crashsafe.store import sqlite_path

    database = sqlite_path(store_url)
    return Path("files") if database is None else database.parent / "files"


def _fsync_folder(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reference(url: str, sha: str, path: str, size: int, content_type: str | None) -> dict[str, Any]:
    return {"url": url, "sha256": sha, "path": path, "size": size, "content_type": content_type}


def replace_files(data: Any, done: dict[str, dict[str, Any]]) -> Any:
    """``data`` with every :class:`File` replaced by its reference in ``done`` (by URL)."""
    if isinstance(data, File):
        if data.url not in done:
            raise FileOutsideCallback(data.url)
        return done[data.url]
    if isinstance(data, dict):
        return {k: replace_files(v, done) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [replace_files(v, done) for v in data]
    return data
