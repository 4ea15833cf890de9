"""Durations as people type them: ``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``1w``."""

from __future__ import annotations

import re

UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)\s*")


def seconds(text: str) -> float | None:
    """``text`` in seconds, or None if it is not a duration."""
    match = _DURATION.fullmatch(text)
    return None if match is None else float(match[1]) * UNITS[match[2]]
