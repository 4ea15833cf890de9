"""Start-up: from process start to the first request a site receives, crashsafe beside Scrapy.

    .venv/bin/python benchmarks/startup.py [--repeat 9] [--baseline SRC ...]

Every restart after a kill pays it. A one-page site on 127.0.0.1 (a thread of this
process) notes when each run's first request arrives; each contender is a fresh
subprocess, runs interleaved, medians (and the fastest) printed. crashsafe crawls the
demo spider on a fresh SQLite database (the first request is its robots.txt); Scrapy
(if installed) runs the same kind of spider with ``ROBOTSTXT_OBEY``. ``--baseline SRC``
adds crashsafe from another version's source folder (``git archive <commit> src | tar -x
-C /tmp/before``; compile it first, ``python -m compileall -q /tmp/before/src``, or its
first runs pay for byte-compiling).
"""

from __future__ import annotations

import argparse
import http.server
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SCRAPY_SPIDER = """
import scrapy

class One(scrapy.Spider):
    name = "one"
    custom_settings = {"ROBOTSTXT_OBEY": True, "LOG_LEVEL": "ERROR",
                       "TELNETCONSOLE_ENABLED": False}

    def __init__(self, start, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response):
        yield {"title": response.css("title::text").get()}
"""


class Site:
    """A one-page site that notes the arrival of the first request after ``reset``."""

    def __init__(self) -> None:
        self.first: float | None = None
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if site.first is None:
                    site.first = time.monotonic()
                body = (b"<html><title>one</title><p class=sku>SKU-1</p>"
                        b"<p class=name>Lamp</p><p class=price>9.90</p></html>")  # fmt: skip
                self.send_response(404 if self.path == "/robots.txt" else 200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/"


def contenders(site: Site, tmp: Path, baselines: list[str]) -> dict[str, tuple[list[str], dict]]:
    crawl = [sys.executable, "-m", "crashsafe", "crawl", "crashsafe.demo.spider:DemoShop",
             "--start-url", f"{site.url}product/1", "--no-progress"]  # fmt: skip
    runs: dict[str, tuple[list[str], dict]] = {
        "crashsafe": ([*crawl, "--db", f"sqlite:///{tmp / 'now.db'}"], {})
    }
    for i, src in enumerate(baselines, 1):
        runs[f"crashsafe @baseline {i}"] = (
            [*crawl, "--db", f"sqlite:///{tmp / f'base{i}.db'}"],
            {"PYTHONPATH": src},
        )
    if importlib.util.find_spec("scrapy") is not None:
        spider = tmp / "one.py"
        spider.write_text(SCRAPY_SPIDER)
        runs["scrapy"] = ([sys.executable, "-m", "scrapy", "runspider", str(spider),
                           "-a", f"start={site.url}"], {})  # fmt: skip
    else:
        print("(scrapy is not installed: pip install -e '.[bench]'; skipping it)")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--baseline", nargs="*", default=[], metavar="SRC")
    args = parser.parse_args()
    site = Site()
    times: dict[str, list[float]] = {}
    for rep in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="crashsafe-startup-") as tmp:
            for name, (cmd, extra) in contenders(site, Path(tmp), args.baseline).items():
                site.first = None
                started = time.monotonic()
                done = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True,
                                      timeout=120)  # fmt: skip
                if done.returncode != 0 or site.first is None:
                    print(f"  {name}: exit {done.returncode}, no request")
                    continue
                times.setdefault(name, []).append(site.first - started)
        print(f"  run {rep + 1} of {args.repeat}", flush=True)
    print(f"\nfrom process start to the first request, {args.repeat} runs each")
    print(f"{'contender':<28}{'median s':>10}{'fastest s':>11}")
    for name, values in times.items():
        print(f"{name:<28}{statistics.median(values):>10.3f}{min(values):>11.3f}")
    site.server.shutdown()


if __name__ == "__main__":
    main()
