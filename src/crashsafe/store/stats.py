"""Crawl figures from counted rows: the same rules for every backend.

A backend counts rows (frontier states, records, lease grants by outcome, grants still
active, links skipped) in one snapshot; what those counts mean lives here once.
"""

from __future__ import annotations

from collections.abc import Mapping

from crashsafe.store.values import CrawlStats

#: Grant outcomes that made no request ("refused": failed by the address guard before
#: the first hop; queries.sql's requests_after and pages_by_owner say the same).
UNFETCHED = ("released", "skipped", "deferred", "refused")


def crawl_stats(
    crawl: str,
    *,
    states: Mapping[str, int],
    records: int,
    outcomes: Mapping[str, int],
    active: int,
    links: tuple[int, int, int],
) -> CrawlStats:
    """``outcomes`` maps a grant outcome to its count, ``""`` standing for grants with
    none yet (in flight, or lost to a crash); ``active`` counts the grants that are the
    current lease of a URL; ``links`` the links skipped as malformed or unsupported,
    those beyond ``max_links_per_page`` and those outside the allow-list."""
    grants = sum(outcomes.values())
    lost = outcomes.get("", 0) - active  # no outcome and no longer current: lost
    stale = outcomes.get("stale", 0)
    return CrawlStats(
        crawl=crawl,
        pending=states.get("pending", 0),
        leased=states.get("leased", 0),
        done=states.get("done", 0),
        failed=states.get("failed", 0),
        records=records,
        lease_grants=grants,
        requests=grants - sum(outcomes.get(k, 0) for k in UNFETCHED) - active,
        retries=outcomes.get("retry", 0),
        repeated=lost + outcomes.get("abandoned", 0) + stale,
        stale=stale,
        links_skipped=int(links[0]),
        links_cut=int(links[1]),
        links_offsite=int(links[2]),
        outcomes={k or "in flight or lost": v for k, v in outcomes.items()},
    )
