"""Crawl throughput: crashsafe vs a plain sequential scraper, on one demo shop.

    .venv/bin/python benchmarks/crawl_throughput.py [--products 10000] [--repeat 3]

Starts the demo shop in its own process, then crawls it with each contender (each into
a fresh SQLite file, as a subprocess), ``--repeat`` times, and prints medians of pages/s,
CPU seconds per 1 000 pages and peak RSS, with each one's ratio to crashsafe. The peer
measured in the same run is the naive sequential scraper (http.client keep-alive +
sqlite3, commit per row), the plain baseline of DESIGN.md's kill test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Measurement, measure, print_table

from crashsafe.demo.process import ShopProcess
from crashsafe.demo.shop import ShopOptions


def contenders(base: str, folder: Path, concurrency: list[int]) -> dict[str, list[str]]:
    py = sys.executable
    runs = {
        f"crashsafe c={c}": [
            py, "-m", "crashsafe", "crawl", "crashsafe.demo.spider:DemoShop", "--no-progress",
            "--db", f"sqlite:///{folder}/crashsafe-c{c}.db", "--start-url", f"{base}/list/0",
            "--concurrency", str(c),
        ]
        for c in concurrency
    }  # fmt: skip
    runs["naive sequential"] = [
        py, "-m", "crashsafe.demo.naive", f"{base}/list/0", str(folder / "naive.db"),
    ]  # fmt: skip
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    args = parser.parse_args()
    listings = max(1, args.products // 20)
    pages = listings + listings * 20
    results: dict[str, list[Measurement]] = {}
    options = ShopOptions(listings=listings, per_listing=20, latency_ms=args.latency_ms)
    with ShopProcess(options) as shop:
        for rep in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                for name, cmd in contenders(shop.url, Path(tmp), args.concurrency).items():
                    before = shop.stats()["requests"]
                    m = measure(cmd)
                    served = shop.stats()["requests"] - before
                    if m.returncode != 0 or served != pages:
                        sys.exit(f"{name}: exit {m.returncode}, {served} requests != {pages}")
                    results.setdefault(name, []).append(m)
                    print(f"  run {rep + 1} {name}: {pages / m.wall:,.0f} pages/s", flush=True)
    print(
        f"\n{pages:,} pages ({listings * 20:,} products), latency {args.latency_ms:g} ms, "
        f"medians of {args.repeat} runs\n"
    )
    print_table(results, pages)


if __name__ == "__main__":
    main()
