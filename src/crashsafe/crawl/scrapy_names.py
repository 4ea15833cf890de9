"""Scrapy's names for the settings crashsafe has too, so ``-s CONCURRENT_REQUESTS=8`` (or
a spider's ``custom_settings``) means what a Scrapy user meant; and a close match for a
setting crashsafe does not know."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable

from crashsafe.errors import ConfigError


def _same(text: str) -> str:
    return text


def _plus_one(text: str) -> str:  # RETRY_TIMES counts retries; max_attempts counts tries
    return str(int(text) + 1)


def _zero_is_none(text: str) -> str:  # Scrapy's 0 means no limit
    return "none" if text.strip() in ("0", "") else text


#: Scrapy setting -> (crashsafe setting, how its value text becomes ours).
SCRAPY_SETTINGS: dict[str, tuple[str, Callable[[str], str]]] = {
    "CONCURRENT_REQUESTS": ("concurrency", _same),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("per_host_concurrency", _zero_is_none),
    "DOWNLOAD_DELAY": ("per_host_delay", _same),
    "DOWNLOAD_TIMEOUT": ("timeout", _same),
    "RETRY_TIMES": ("max_attempts", _plus_one),
    "ROBOTSTXT_OBEY": ("obey_robots", _same),
    "USER_AGENT": ("user_agent", _same),
    "DEPTH_LIMIT": ("max_depth", _zero_is_none),
    "REDIRECT_MAX_TIMES": ("max_redirects", _same),
    "DOWNLOAD_MAXSIZE": ("max_response_bytes", _same),
    "COOKIES_ENABLED": ("cookies_enabled", _same),
    "HTTPERROR_ALLOWED_CODES": ("handle_statuses", _same),
    "CLOSESPIDER_PAGECOUNT": ("max_pages", _zero_is_none),
    "CLOSESPIDER_ITEMCOUNT": ("max_items", _zero_is_none),
    "LOGSTATS_INTERVAL": ("log_interval", _same),
}


def from_scrapy(name: str, text: str) -> tuple[str, str]:
    """``(crashsafe name, value text)`` for a Scrapy setting; other names as they are."""
    if name in SCRAPY_SETTINGS:
        ours, convert = SCRAPY_SETTINGS[name]
        try:
            return ours, convert(text)
        except ValueError:
            raise ConfigError(f"setting {name} ({ours}): cannot use {text!r}") from None
    return name, text


def unknown(name: str, known: Iterable[str]) -> ConfigError:
    """The error for a setting nobody knows, with the closest names (ours or Scrapy's)."""
    known = sorted(known)
    candidates = {n: n for n in known} | {s.lower(): s for s in SCRAPY_SETTINGS}
    close = difflib.get_close_matches(name.lower(), list(candidates), n=1, cutoff=0.6)
    hint = ""
    if close:
        shown = []
        for match in close:
            spelled = candidates[match]
            ours = SCRAPY_SETTINGS.get(spelled, (spelled, _same))[0]
            shown.append(f"{ours} (Scrapy's {spelled})" if spelled != ours else ours)
        hint = f"; did you mean {' or '.join(dict.fromkeys(shown))}?"
    return ConfigError(f"unknown setting {name!r}{hint} Known: {', '.join(known)}")
