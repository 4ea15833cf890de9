"""Politeness across workers: which due URLs a claim may grant, origin by origin.

Every worker claims from one frontier, so per-origin limits hold for all of them only if
the claim honours them: at most ``per_host`` URLs of an origin leased at a time, and
grants for an origin spaced by its delay (the crawl's ``per_host_delay``, or the
origin's robots.txt Crawl-delay when larger). The backend locks the candidate origins'
rows of the ``hosts`` table while a claim counts, so two claims never both take the last
slot of an origin.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from crashsafe.store.values import Politeness


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a canonical URL (no parsing: canonical URLs have it
    before their third slash)."""
    return "/".join(url.split("/", 3)[:3])


def choose_politely(
    candidates: Sequence[tuple[Any, ...]],
    held: Sequence[str],
    hosts: Mapping[str, tuple[float, float]],
    politeness: Politeness,
    limit: int,
) -> tuple[list[int], dict[str, float]]:
    """Pick up to ``limit`` of ``candidates`` (``(frontier id, url)``, in the order they
    are due) so that no origin goes past ``politeness``.

    ``held`` are the URLs leased now (by any worker), ``hosts`` maps an origin to its
    Crawl-delay and the seconds until its next grant may be made. Returns the ids chosen
    and, for each origin granted under a delay, that delay (its next grant waits as long).
    """
    busy = Counter(origin_of(url) for url in held)
    chosen: list[int] = []
    spaced: dict[str, float] = {}
    for fid, url in candidates:
        origin = origin_of(url)
        if politeness.per_host is not None and busy[origin] >= politeness.per_host:
            continue
        robots_delay, wait = hosts.get(origin, (0.0, 0.0))
        delay = max(politeness.delay, robots_delay)
        if delay > 0:
            if origin in spaced or wait > 0:
                continue  # one grant per delay: the next waits for a later claim
            spaced[origin] = delay
        busy[origin] += 1
        chosen.append(fid)
        if len(chosen) == limit:
            break
    return chosen, spaced
