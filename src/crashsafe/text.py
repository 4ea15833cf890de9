"""Text from strangers, made safe for where it goes: a terminal, a spreadsheet."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides that
# reorder what a terminal shows (CVE-2021-42574, "Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A credential in an Authorization value: "Bearer abc...", "Basic dXNlcjpwYXNz".
_BEARER = re.compile(r"(?i)\b(bearer\s+)(?=[^\s\"',;]*[\d._~+/=-])[^\s\"',;]{8,}")
_BASIC = re.compile(r"(?i)\b(basic\s+)([A-Za-z0-9+/]{6,}={0,2})")
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


def without_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (of 4 characters or more) and any bearer or basic
    credential replaced by ``[redacted]``: an error body may echo the request's
    ``Authorization`` header, its cookies, and ends up in the dead letter."""
    from urllib.parse import quote

    # (as sent, and as a site may echo it: JSON with "/" escaped, percent-encoded)
    forms = {
        f for s in secrets if len(s) >= 4 for f in (s, s.replace("/", "\\/"), quote(s, safe=""))
    }
    for secret in sorted(forms, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    text = _BEARER.sub(r"\1[redacted]", text)
    return _BASIC.sub(lambda m: m[1] + "[redacted]" if _user_pass(m[2]) else m[0], text)


def _user_pass(token: str) -> bool:
    """Whether ``token`` is base64 of ``user:password`` (not a word after "basic")."""
    import base64
    import binascii

    try:
        return b":" in base64.b64decode(token + "=" * (-len(token) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False


_SECRET_SEGMENT = re.compile(r"^(?=.*\d)(?=.*[A-Za-z]).{8,}$|^.{16,}$")


def shown_endpoint(url: str) -> str:
    """A webhook URL as the console, ``/metrics`` and ``deliver`` show it: its user's
    password, every query value and each path segment that looks like a key (16
    characters or more, or 8 with letters and digits: Slack's and Discord's webhook URLs
    carry their secret in the path) shown as ``***``, and then a short hash of the whole
    URL: enough to tell endpoints apart, nothing a dashboard's reader could call them
    with."""
    import hashlib
    from urllib.parse import urlsplit, urlunsplit

    from crashsafe.store import masked

    parts = urlsplit(masked(url))
    path = "/".join("***" if _SECRET_SEGMENT.match(s) else s for s in parts.path.split("/"))
    query = "&".join(
        f"{name}=***" if sep else name
        for name, sep, _ in (p.partition("=") for p in parts.query.split("&") if p)
    )
    shown = urlunsplit((parts.scheme, parts.netloc, path, query, ""))
    if shown != url:  # two endpoints masked alike stay apart (a Prometheus label each)
        shown += "#" + hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:6]
    return shown
