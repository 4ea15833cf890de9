"""The WARC archive: every fetched exchange as a ``request`` and a ``response`` record.

One :class:`WarcArchive` per worker process writes ``.warc.gz`` files that replay and
indexing tools (pywb, ``warcio index``) read as they are. Each record is its own gzip
member, and each exchange (both members) is built whole in memory and handed to the kernel
with one ``os.write``: no buffer in user space to lose on a kill, no second write to miss.
Records are not fsync'd one by one (a disk flush per page); rotation and
:meth:`WarcArchive.close` do.

One write is not all-or-nothing, though. What can tear the last member of a file:

- a SIGKILL while the kernel copies a write of more than one page: Linux stops between
  pages once a fatal signal is pending (``generic_perform_write``), and the file ends at a
  page boundary inside the exchange (measured: 2 kills in 60 tore 1 MB exchanges);
- a power cut or a kernel crash, before the page cache reached the disk;
- a full disk half-way through a write (that part is cut off again at once).

Such a file is good up to its last whole member, and is repaired at the next start: a new
archive for the same worker cuts the torn tail off that worker's newest file (a writer
holds an ``flock`` on its file, so a live one is never cut). Until then, read it with
:func:`read_archive`. ``warcio`` does not notice a torn tail: for most cut points it yields
a last record shorter than its Content-Length without a word (``warcio check`` exits 0);
only a cut inside the WARC headers makes it raise, ``ArchiveLoadFailed`` or an
``AttributeError`` (no target URI).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from io import BytesIO
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
from warcio.limitreader import LimitReader  # type: ignore[import-untyped]
from warcio.recordloader import ArcWarcRecord  # type: ignore[import-untyped]
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]

from crashsafe import __version__
from crashsafe.errors import ConfigError, FolderUnwritable
from crashsafe.files import open_private, private_folder

DEFAULT_MAX_BYTES = 100 * 2**20
SCAN_CHUNK = 2**16
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
# Headers that describe the bytes on the wire, not the decoded body we store: kept under
# another name, so the record says what the server sent without a replay tool trying to
# gunzip or de-chunk a body that is neither any more.
_WIRE_HEADERS = frozenset({"content-encoding", "transfer-encoding"})


class WarcArchive:
    """The WARC files of one worker, ``crashsafe-<UTC time>-<worker>-<seq>.warc.gz``.

    A file is created on the first write (never opened for appending: a name taken, by
    another process of the same worker in the same second say, moves on to the next
    sequence number) and a new one is started once a file has reached ``max_bytes``.
    Creating the archive repairs the worker's newest file if a crash tore its tail.
    Not thread-safe: one archive per worker process, written from one thread.

    Args:
        folder: Where the files go; created ``0700`` if missing, files are ``0600``.
        worker: The worker's id, part of the names and the ``warcinfo`` record
            (characters other than ``[A-Za-z0-9_.-]`` become ``_``).
        max_bytes: Size after which the next exchange goes into a new file.
        clock: Seconds since the epoch, for the names.

    Raises:
        ConfigError: ``folder`` cannot be created, or the file to repair not written.
    """

    def __init__(
        self,
        folder: Path,
        worker: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.folder = folder
        self.worker = _UNSAFE.sub("_", worker)[:64] or "worker"
        self.max_bytes = max_bytes
        self._clock = clock
        self._fd: int | None = None
        self._path: Path | None = None
        self._size = 0  # bytes written to the current file, all of them whole exchanges
        self._seq = 0
        self._stamp = ""
        self._paths: list[Path] = []
        self._buffer = BytesIO()
        self._writer = WARCWriter(self._buffer, gzip=True)  # one gzip member per record
        try:
            private_folder(folder)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the WARC folder {folder}: {exc.strerror or exc}; "
                "choose a writable place"
            ) from None
        # Only the newest file of a series can be torn: a worker rotates after fsync'ing
        # the last one. Every series is looked at, not only this worker's: a worker named
        # by its PID never meets its series again after a restart.
        for newest in _newest_of_each(folder):
            trim_torn_tail(newest)

    def fits(self, nbytes: int) -> bool:
        """Whether about ``nbytes`` more go in the open file without a rotation (which
        fsyncs it): False when no file is open yet (opening one creates it)."""
        return self._fd is not None and self._size + nbytes < self.max_bytes

    @property
    def paths(self) -> list[Path]:
        """The files this archive created, oldest first."""
        return list(self._paths)

    def __enter__(self) -> WarcArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_exchange(
        self,
        *,
        url: str,
        method: str,
        request_headers: Sequence[tuple[str, str]],
        request_body: bytes | None,
        status: int,
        reason: str,
        response_headers: Sequence[tuple[str, str]],
        body: bytes,
        http_version: str = "HTTP/1.1",
    ) -> None:
        """Append one exchange: a ``response`` and a ``request`` record, one write.

        Args:
            url: The URL fetched (the records' ``WARC-Target-URI``).
            method: The request method, ``"GET"``.
            request_headers: The headers sent.
            request_body: The body sent, if any.
            status: The response status code.
            reason: The reason phrase, ``"OK"``.
            response_headers: The headers received.
            body: The body as decoded (no content or transfer coding left).
            http_version: The protocol on the status lines.

        Raises:
            ConfigError: The folder is read-only or not ours to write.
            StoreError: The disk is full, or another write error.
        """
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        request_line = f"{method} {target} {http_version}"
        request_http = StatusAndHeaders(request_line, list(request_headers), is_http_request=True)
        payload = request_body or b""
        request = self._writer.create_warc_record(
            url, "request", payload=BytesIO(payload), length=len(payload),
            http_headers=request_http,
        )  # fmt: skip
        response_http = StatusAndHeaders(
            f"{status} {reason}", _stored_headers(response_headers, len(body)), http_version
        )
        response = self._writer.create_warc_record(
            url, "response", payload=BytesIO(body), length=len(body), http_headers=response_http
        )
        exchange = self._render(lambda: self._writer.write_request_response_pair(request, response))
        if self._fd is None:
            self._open_next()
        if self._size == 0:  # a new file, or one whose first write failed
            exchange = self._warcinfo_bytes() + exchange  # the same single write
        self._write(exchange)
        if self._size >= self.max_bytes:
            self._finish_file()

    def close(self) -> None:
        """Make the current file durable (fsync) and close it. A later write starts a
        new file."""
        self._finish_file()

    def _warcinfo_bytes(self) -> bytes:
        assert self._path is not None
        info = {"software": f"crashsafe {__version__}", "worker": self.worker}
        record = self._writer.create_warcinfo_record(self._path.name, info)
        return self._render(lambda: self._writer.write_record(record))

    def _render(self, write: Callable[[], None]) -> bytes:
        """What ``write`` makes warcio write, as bytes (nothing reaches the file yet)."""
        self._buffer.seek(0)
        self._buffer.truncate()
        write()
        return self._buffer.getvalue()

    def _open_next(self) -> None:
        # The clock may step back (NTP); names must still sort in the order written.
        self._stamp = max(self._stamp, time.strftime("%Y%m%d%H%M%S", time.gmtime(self._clock())))
        while True:
            path = self.folder / f"crashsafe-{self._stamp}-{self.worker}-{self._seq:05d}.warc.gz"
            self._seq += 1
            try:
                # O_EXCL: never append to a file another process (or run) is writing.
                fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _write_error(path, exc) from None
            except ConfigError as exc:  # (open_private's words for a read-only folder)
                raise FolderUnwritable(str(exc)) from None
            break
        fcntl.flock(fd, fcntl.LOCK_EX)  # a live file: trim_torn_tail leaves it alone
        self._fd, self._path, self._size = fd, path, 0
        self._paths.append(path)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None and self._path is not None
        view = memoryview(data)
        try:
            while view:  # os.write may write less: a full disk, a signal handler
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            # Cut off the part that did go in, so the file ends on a whole exchange again,
            # and write the next one right after it (truncating does not move the file
            # position: the next write would leave a hole of zeros before it).
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
                os.lseek(self._fd, self._size, os.SEEK_SET)
            raise _write_error(self._path, exc) from None
        self._size += len(data)

    def _finish_file(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        folder = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(folder)  # the new file's name survives a power cut too
        finally:
            os.close(folder)


def _stored_headers(headers: Sequence[tuple[str, str]], length: int) -> list[tuple[str, str]]:
    """The response headers for the decoded body: Content-Length its length, the wire's
    codings renamed. A replay tool trusts these headers: with ``Content-Encoding: gzip``
    kept it would gunzip plain bytes, and a stale Content-Length cuts the body short."""
    stored = []
    for name, value in headers:
        lowered = name.lower()
        if lowered in _WIRE_HEADERS:
            stored.append((f"X-Crashsafe-Original-{name}", value))
        elif lowered != "content-length":
            stored.append((name, value))
    stored.append(("Content-Length", str(length)))
    return stored


def _write_error(path: Path, exc: OSError) -> FolderUnwritable:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return FolderUnwritable(
            f"disk full while writing the WARC file {path}: free some space and run the "
            "same command again (the pages in flight are fetched again)"
        )
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return FolderUnwritable(
            f"cannot write {path}: {exc.strerror} (a read-only file system, or no "
            "permission); choose a writable place"
        )
    return FolderUnwritable(f"cannot write the WARC file {path}: {exc.strerror or exc}")


_ANY_SERIES = re.compile(r"crashsafe-(\d{14})-(.+)-(\d{5,})\.warc\.gz")


def _newest_of_each(folder: Path) -> list[Path]:
    """The newest file of each worker's series in ``folder``."""
    newest: dict[str, tuple[str, int, Path]] = {}
    for p in folder.iterdir():
        if (m := _ANY_SERIES.fullmatch(p.name)) is not None:
            key = (m[1], int(m[3]), p)
            if m[2] not in newest or key[:2] > newest[m[2]][:2]:
                newest[m[2]] = key
    return [path for *_, path in newest.values()]


def trim_torn_tail(path: Path) -> int:
    """Cut off a torn last member of ``path`` (see the module docstring), making it a
    clean WARC file again; a file an archive is still writing is left as it is.

    Returns:
        The number of bytes cut off.
    """
    fd = open_private(path, os.O_RDWR, follow=False)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0
        with os.fdopen(os.dup(fd), "rb") as stream:
            whole = _whole_length(stream)
        torn = os.fstat(fd).st_size - whole
        if torn:
            os.ftruncate(fd, whole)
            os.fsync(fd)
        return torn
    finally:
        os.close(fd)


def whole_length(path: Path) -> int:
    """How many bytes at the start of ``path`` are whole gzip members: all of the file
    unless its tail was torn (see the module docstring). zlib checks each member's CRC, so
    a member counts only if every byte of it arrived."""
    with path.open("rb") as stream:
        return _whole_length(stream)


def _whole_length(stream: BinaryIO) -> int:
    whole = consumed = 0
    member = zlib.decompressobj(wbits=31)  # 31: gzip framing
    data = b""
    while True:
        if not data:
            data = stream.read(SCAN_CHUNK)
            if not data:
                return whole
        try:
            member.decompress(data, SCAN_CHUNK)  # only the framing matters: bound the output
        except zlib.error:
            return whole  # not gzip from here on: zeros after a power cut, say
        left = member.unused_data if member.eof else member.unconsumed_tail
        consumed += len(data) - len(left)
        data = left
        if member.eof:
            whole = consumed
            member = zlib.decompressobj(wbits=31)


def read_archive(path: Path) -> Iterator[ArcWarcRecord]:
    """The records of ``path`` up to its last whole one.

    A torn tail is left out without an error; read each record's content before moving on
    to the next, as with warcio's ``ArchiveIterator``.
    """
    with path.open("rb") as stream:
        length = _whole_length(stream)
        stream.seek(0)
        yield from ArchiveIterator(LimitReader(stream, length))
