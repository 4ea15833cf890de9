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
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

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
        """Serve ``/metrics`` on 127.0.0.1:``port`` from a daemon thread, to requests
        addressed to it there: a web page elsewhere cannot read it through a name that
        points at 127.0.0.1 (DNS rebinding), as with the console."""
        import threading
        from socketserver import ThreadingMixIn
        from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

        from prometheus_client import make_wsgi_app

        app = make_wsgi_app(self.registry)
        hosts = {f"127.0.0.1:{port}", f"localhost:{port}"}

        def guarded(environ: dict[str, Any], start_response: Any) -> Any:
            if environ.get("HTTP_HOST", "") not in hosts:
                start_response("421 Misdirected Request", [("Content-Type", "text/plain")])
                return [b"this endpoint answers on its own address only\n"]
            return app(environ, start_response)

        class Server(ThreadingMixIn, WSGIServer):
            daemon_threads = True

        class Quiet(WSGIRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = make_server("127.0.0.1", port, guarded, Server, Quiet)
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def requested(self, status: int | None) -> None:
        status_class = f"{status // 100}xx" if status else "error"
        self._requests.labels(self.crawl, status_class).inc()

    def committed(self, seconds: float, outcomes: Sequence[str]) -> None:
        self._commit.labels(self.crawl).observe(seconds)
        for outcome in outcomes:
            self._pages.labels(self.crawl, outcome).inc()
