"""A worker's own Prometheus counters (``crawl --metrics-port P``), served on 127.0.0.1:P
while it runs. The store's counts (``crashsafe ui``'s ``/metrics``) say where a crawl
stands; these say how one process is doing: its requests by status class and how long
its commits take.

- ``crashsafe_requests_total{crawl,status_class}``: requests this worker made, by the
  answer's class (``2xx``, ``3xx``, ``4xx``, ``5xx``; ``error`` when none came)
- ``crashsafe_pages_committed_total{crawl,outcome}``: pages it committed, by outcome
- ``crashsafe_commit_seconds{crawl}``: a histogram of its group commits' round trips
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WorkerMetrics:
    def __init__(self, crawl: str) -> None:
        self.crawl = crawl
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "crashsafe_requests", "Requests this worker made, by the answer's class",
            ["crawl", "status_class"], registry=self.registry,
        )  # fmt: skip
        self._pages = Counter(
            "crashsafe_pages_committed", "Pages this worker committed, by outcome",
            ["crawl", "outcome"], registry=self.registry,
        )  # fmt: skip
        self._commit = Histogram(
            "crashsafe_commit_seconds", "Round trip of a group commit (and its claim)",
            ["crawl"], buckets=BUCKETS, registry=self.registry,
        )  # fmt: skip

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on 127.0.0.1:``port`` from a daemon thread."""
        start_http_server(port, addr="127.0.0.1", registry=self.registry)

    def requested(self, status: int | None) -> None:
        status_class = f"{status // 100}xx" if status else "error"
        self._requests.labels(self.crawl, status_class).inc()

    def committed(self, seconds: float, outcomes: Sequence[str]) -> None:
        self._commit.labels(self.crawl).observe(seconds)
        for outcome in outcomes:
            self._pages.labels(self.crawl, outcome).inc()
