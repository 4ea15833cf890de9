"""Errors raised by crashsafe.

Every error a user can cause derives from :class:`CrashsafeError`; its message says
what went wrong and what to do next. The CLI prints the message and exits non-zero
instead of showing a traceback.

::

    CrashsafeError
     ├── ConfigError          bad option, unknown database URL, spider that cannot load
     │    └── SpiderLoadError  SPIDER argument does not name a Spider class
     ├── SpiderError          the spider fails every page the same way: fix it first
     ├── EndpointError        an LLM endpoint that cannot be used: wrong URL, key, model
     ├── StoreError           the database refused an operation
     │    ├── SchemaError      database written by a newer crashsafe, or not ours
     │    └── FolderUnwritable a folder of files or WARC archives: disk full, read-only
     ├── WorkerBusyError      another process holds the same lock (e.g. a checkpoint)
     └── WebhookRejected      a webhook whose signature or timestamp does not check out
                              (crashsafe.effects.receiver)
"""

from __future__ import annotations


class CrashsafeError(Exception):
    """crashsafe failed; the message says why and what to do."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(CrashsafeError):
    """Invalid configuration: check the options and the spider's settings."""


class SpiderLoadError(ConfigError):
    """The SPIDER argument does not name a Spider: use path/file.py[:Class] or module:Class."""


class SpiderError(CrashsafeError):
    """The spider failed the first pages of the crawl all with the same error."""


class EndpointError(CrashsafeError):
    """The endpoint refuses every call (unreachable, wrong key, wrong path or model): the
    job stops at once instead of retrying for minutes."""


class StoreError(CrashsafeError):
    """The database refused an operation."""


class SchemaError(StoreError):
    """The database schema is not one this version of crashsafe understands."""


class FolderUnwritable(StoreError):
    """A folder crashsafe writes files to (downloads, the WARC archive) cannot be written:
    a full disk, a read-only file system, no permission. A crawl stops at once, the pages
    in flight back in the queue: free some space or fix the folder, and run it again."""


class WorkerBusyError(CrashsafeError):
    """Another process holds the lock for this job: stop it, or use a different file."""
