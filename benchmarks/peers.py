"""crashsafe vs Scrapy vs Crawlee on the demo shop, side by side in one run.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/peers.py [--products 10000] [--latency-ms 0 20]
                                         [--concurrency 16] [--repeat 3]

For each latency, the demo shop runs in its own process and every contender crawls it
from scratch as a subprocess, ``--repeat`` times, interleaved: crashsafe (fsync'd SQLite
commits), Scrapy without and with JOBDIR (its resumable mode), Crawlee for Python
(ParselCrawler, persistent storage), and the ceiling: a minimal loop over the URLs known
up front (aiohttp + parsel + grouped SQLite commits), i.e. the work without a crawler.
Prints medians of pages/s, CPU seconds per 1 000 pages, peak RSS and ratios to crashsafe.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import Measurement, measure, print_table  # noqa: E402

from crashsafe.demo.process import ShopProcess  # noqa: E402
from crashsafe.demo.shop import ShopOptions  # noqa: E402

PY = sys.executable


def contenders(base: str, tmp: Path, c: int, listings: int) -> dict[str, list[str]]:
    peers = HERE / "peers"
    runs = {
        f"crashsafe c={c}": [
            PY, "-m", "crashsafe", "crawl", "crashsafe.demo.spider:DemoShop", "--no-progress",
            "--db", f"sqlite:///{tmp}/crashsafe.db", "--start-url", f"{base}/list/0",
            "--concurrency", str(c),
        ],
        "scrapy": [PY, str(peers / "scrapy_shop.py"), f"{base}/list/0", str(c),
                   str(tmp / "scrapy.jsonl")],
        "scrapy JOBDIR": [PY, str(peers / "scrapy_shop.py"), f"{base}/list/0", str(c),
                          str(tmp / "scrapy-job.jsonl"), str(tmp / "jobdir")],
        "crawlee": [PY, str(peers / "crawlee_shop.py"), f"{base}/list/0", str(c),
                    str(tmp / "crawlee-storage")],
        "ceiling (no crawler)": [PY, str(peers / "ceiling.py"), base, str(listings), "20",
                                 str(c), str(tmp / "ceiling.db")],
    }  # fmt: skip
    missing = [m for m in ("scrapy", "crawlee") if importlib.util.find_spec(m) is None]
    for name in missing:
        print(f"({name} is not installed: pip install -e '.[bench]'; skipping it)")
        runs = {k: v for k, v in runs.items() if not k.startswith(name)}
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    listings = max(1, args.products // 20)
    pages = listings * 21
    for latency in args.latency_ms:
        results: dict[str, list[Measurement]] = {}
        served: dict[str, int] = {}
        options = ShopOptions(listings=listings, per_listing=20, latency_ms=latency)
        with ShopProcess(options) as shop:
            for rep in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="crashsafe-peers-") as tmp:
                    for name, cmd in contenders(shop.url, Path(tmp), args.concurrency,
                                                listings).items():  # fmt: skip
                        shop.reset()
                        m = measure(cmd)
                        served[name] = shop.stats()["requests"]
                        if m.returncode != 0:
                            print(f"  {name}: exit {m.returncode}")
                            continue
                        results.setdefault(name, []).append(m)
                        print(f"  latency {latency:g} ms, run {rep + 1}, {name}: "
                              f"{pages / m.wall:,.0f} pages/s ({served[name]} requests)",
                              flush=True)  # fmt: skip
        print(f"\n{pages:,} pages, latency {latency:g} ms, concurrency {args.concurrency}, "
              f"medians of {args.repeat} runs")  # fmt: skip
        print_table(results, pages)
        print("requests the shop counted (last run): "
              + ", ".join(f"{name} {n:,}" for name, n in served.items()))  # fmt: skip
        print()


if __name__ == "__main__":
    main()
