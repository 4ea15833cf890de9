"""What several commands need: which crawl a command is about, durations as typed."""

from __future__ import annotations

from crashsafe.durations import seconds
from crashsafe.errors import ConfigError
from crashsafe.store import RunFigures, Store, masked

CENTURY = 100 * 365 * 86400.0


def crawl_names(store: Store, crawl: str | None) -> list[str]:
    """``[crawl]`` if the database has it (else a ConfigError naming the ones it has), or
    every crawl in it."""
    names = store.crawls()
    if crawl is not None:
        if crawl not in names:
            raise ConfigError(
                f"no crawl named {crawl!r} in {masked(store.url)}; it has: {names or 'none'}"
            )
        return [crawl]
    return names


def one_crawl(store: Store, crawl: str | None) -> str:
    """The crawl a command that works on one crawl is about: ``--crawl``, or the only one."""
    names = crawl_names(store, crawl)
    if not names:
        raise ConfigError(f"{masked(store.url)} holds no crawl yet: run `crashsafe crawl` first")
    if len(names) > 1:
        raise ConfigError(
            f"{masked(store.url)} has {len(names)} crawls ({', '.join(names)}): choose one "
            "with --crawl"
        )
    return names[0]


def parse_duration(text: str, option: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``1w`` as seconds."""
    value = seconds(text)
    if value is None:
        raise ConfigError(f"{option} {text!r}: give a duration like 30s, 15m, 2h or 1d")
    return min(value, CENTURY)  # (PostgreSQL's timestamps end in the year 294276)


def run_line(figures: RunFigures) -> str:
    """``this run: 105 requests, 0 new records, 9 changed, 2 gone``."""
    events = figures.events
    gone = events.get("record.gone", 0)
    return (
        f"this run: {figures.requests:,} requests, {events.get('record.created', 0):,} new "
        f"records, {events.get('record.updated', 0):,} changed"
        + (f", {gone:,} gone" if gone else "")
    )
