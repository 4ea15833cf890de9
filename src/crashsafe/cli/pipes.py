"""Output that a closed pipe cannot kill: ``crashsafe batch ... | head`` must not end a
job mid-batch because ``head`` stopped reading."""

from __future__ import annotations

import contextlib
import errno
import os
from typing import Any, TextIO

from crashsafe.errors import CrashsafeError


class PipeSafe:
    """Wraps a text stream: once the reader at the other end is gone (``EPIPE``), writes
    are dropped instead of raising, and the stream's descriptor is pointed at
    ``/dev/null`` so that Python's own flush at exit does not complain either."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False
        self.full = False  # the disk it goes to is full: every write says so

    def write(self, text: str) -> int:
        if self.full:
            raise _full()
        if not self.gone:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._gone(exc)
        return len(text)

    def flush(self) -> None:
        if not self.gone and not self.full:
            try:
                self._stream.flush()
            except OSError as exc:
                self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        if not full and exc.errno not in (errno.EPIPE, errno.EINVAL):
            raise exc
        self.gone, self.full = not full, full
        with contextlib.suppress(OSError, ValueError):
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        if full:  # one line, not a traceback (and again at every write: whoever catches
            raise _full() from None  # the first, as click's probe of the stream does)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _full() -> CrashsafeError:
    return CrashsafeError(
        "cannot write the output: the disk it goes to is full; free some space and run the "
        "same command again"
    )
