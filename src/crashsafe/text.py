"""Text from strangers, made safe for where it goes: a terminal, a spreadsheet."""

from __future__ import annotations

import re
from typing import Any

# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides that
# reorder what a terminal shows (CVE-2021-42574, "Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# OWASP CSV injection: a cell starting with one of these is read as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x1b`` for ESC), so that text from a
    site (a ``Location`` header, an error body) cannot drive the terminal it is shown on."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: a string that a spreadsheet would run as a formula
    (``=HYPERLINK(...)``) gets a leading ``'``, as OWASP recommends."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value
