"""SQLite's errors, in words that say what to do."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path


def why(path: Path, exc: sqlite3.Error) -> str:
    """What SQLite's error means for the user, and what to do ("" if nothing to add).
    A full disk may surface as "disk I/O error" or "cannot rollback": look at the disk."""
    text = str(exc).lower()
    if "full" in text or "disk i/o" in text or "cannot rollback" in text:
        try:
            free = shutil.disk_usage(path.parent).free
        except OSError:
            free = -1
        if "full" in text or 0 <= free < 1 << 20:
            return "disk full: free some space and run the same command again"
        return f"{exc}: the disk or file system failed; check it (free space, errors)"
    if "readonly" in text or "read-only" in text:
        return (
            f"{exc}: the file or its folder is read-only; crashsafe needs to write the "
            "database and its -wal/-shm files beside it"
        )
    if "unable to open" in text:
        return f"{exc}: check that the folder {path.parent} exists and is writable"
    return ""
