"""``GET /metrics``: a snapshot's counts in Prometheus' exposition format.

Every value is computed from stored rows (the same ones ``crashsafe status`` counts), so
any number of consoles and workers agree. Names (docs/console.md has an alert rule):

- ``crashsafe_urls{crawl,state}``: URLs by state: pending, leased, done, failed; and
  skipped (done without a fetch: robots.txt; counted in done too)
- ``crashsafe_records{crawl,state}``: live, gone
- ``crashsafe_requests{crawl,kind}``: total, retries, repeated (after crashes), stale
- ``crashsafe_workers{crawl,alive}``: registered workers, alive "true" or "false"
- ``crashsafe_deliveries{crawl,endpoint,state}``: webhook deliveries by endpoint (its
  URL, secrets masked) and state
- ``crashsafe_paused{crawl}``: 1 while the crawl is paused;
  ``crashsafe_paused_origins{crawl}``: origins paused on their own
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def families(snap: dict[str, Any]) -> Iterator[Metric]:
    urls = GaugeMetricFamily("crashsafe_urls", "URLs by state", labels=["crawl", "state"])
    records = GaugeMetricFamily("crashsafe_records", "Records", labels=["crawl", "state"])
    requests = GaugeMetricFamily(
        "crashsafe_requests", "Requests made, from the lease history", labels=["crawl", "kind"]
    )
    workers = GaugeMetricFamily("crashsafe_workers", "Workers", labels=["crawl", "alive"])
    deliveries = GaugeMetricFamily(
        "crashsafe_deliveries", "Webhook deliveries", labels=["crawl", "endpoint", "state"]
    )
    paused = GaugeMetricFamily("crashsafe_paused", "1: the crawl is paused", labels=["crawl"])
    origins = GaugeMetricFamily(
        "crashsafe_paused_origins", "Origins paused on their own", labels=["crawl"]
    )
    for crawl in snap["crawls"]:
        name = crawl["name"]
        for state, n in crawl["urls"].items():
            urls.add_metric([name, state], n)
        records.add_metric([name, "live"], crawl["records"]["live"])
        records.add_metric([name, "gone"], crawl["records"]["gone"])
        for kind, n in crawl["requests"].items():
            requests.add_metric([name, kind], n)
        alive = sum(1 for w in crawl["workers"] if w["alive"])
        workers.add_metric([name, "true"], alive)
        workers.add_metric([name, "false"], len(crawl["workers"]) - alive)
        for endpoint in crawl["endpoints"]:
            for state in ("pending", "leased", "delivered", "failed"):
                n = endpoint["deliveries"].get(state, 0)
                deliveries.add_metric([name, endpoint["url"], state], n)
        paused.add_metric([name], 1 if crawl["paused"] else 0)
        origins.add_metric([name], len(crawl["paused_origins"]))
    yield from (urls, records, requests, workers, deliveries, paused, origins)


class _Snapshot(Collector):
    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def collect(self) -> Iterator[Metric]:
        return families(self.snap)


def exposition(snap: dict[str, Any]) -> bytes:
    """``snap`` in the exposition format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(snap))
    return generate_latest(registry)
