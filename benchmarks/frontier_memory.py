"""Memory as the frontier grows: crashsafe keeps it in SQLite, not in the process.

    .venv/bin/python benchmarks/frontier_memory.py [--seconds 5 20] [--fanout 100]

A spider on the demo shop yields ``--fanout`` new URLs per page, so the frontier grows by
about ``pages/s x fanout`` per second. Each run is stopped with SIGINT after ``--seconds``;
the table shows pending URLs then and the crawl process's peak RSS (from wait4). The peer,
measured in the same run, is the in-memory frontier other crawlers keep: a Python process
holding the same number of URLs in a set and a deque (Scrapy's and Crawlee's default
dedup filter and queue are of that kind).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from crashsafe.demo.process import ShopProcess
from crashsafe.demo.shop import ShopOptions
from crashsafe.store import open_store

SPIDER = """
from crashsafe import Spider

class FanOut(Spider):
    name = "fanout"
    fanout = {fanout}

    def parse(self, page):
        base = page.url.split("?")[0]
        seed = abs(hash(page.url))  # only to make URLs unique; ids never use hash()
        for k in range(self.fanout):
            yield f"{{base}}?v={{seed}}-{{k}}"
"""

PEER = """
import collections, resource, sys
n = int(sys.argv[1])
seen, queue = set(), collections.deque()
for k in range(n):
    url = f"http://127.0.0.1:8000/product/SKU-{k % 500:05d}?v={k}-{k % 100}"
    seen.add(url)
    queue.append(url)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def crawl_for(seconds: float, shop_url: str, folder: Path, fanout: int) -> tuple[int, float]:
    spider = folder / "fanout.py"
    spider.write_text(SPIDER.format(fanout=fanout))
    db = folder / f"fanout-{seconds:g}.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "crashsafe", "crawl", str(spider), "--db", f"sqlite:///{db}",
         "--start-url", f"{shop_url}/product/SKU-00000", "--no-progress"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    _, _, usage = os.wait4(proc.pid, 0)
    store = open_store(f"sqlite:///{db}")
    try:
        pending = store.stats("fanout").pending
    finally:
        store.close()
    return pending, usage.ru_maxrss / 1024


def peer_rss(n: int) -> float:
    out = subprocess.run([sys.executable, "-c", PEER, str(n)], capture_output=True, text=True)
    return int(out.stdout.strip()) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, nargs="+", default=[5.0, 20.0])
    parser.add_argument("--fanout", type=int, default=100)
    args = parser.parse_args()
    rows = []
    with ShopProcess(ShopOptions()) as shop, tempfile.TemporaryDirectory(dir=".") as tmp:
        for seconds in args.seconds:
            pending, rss = crawl_for(seconds, shop.url, Path(tmp), args.fanout)
            rows.append((seconds, pending, rss, peer_rss(pending)))
            print(f"  {seconds:g} s: {pending:,} pending, peak RSS {rss:.0f} MB", flush=True)
    print(f"\n{'crawl time':>10} {'pending URLs':>13} {'crashsafe RSS MB':>17} "
          f"{'in-memory frontier RSS MB':>26}")  # fmt: skip
    for seconds, pending, rss, peer in rows:
        print(f"{seconds:>9g}s {pending:>13,} {rss:>17.0f} {peer:>26.0f}")


if __name__ == "__main__":
    main()
