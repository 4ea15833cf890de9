"""crashsafe vs Scrapy vs Crawlee on the demo shop, side by side in one run.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python benchmarks/peers.py [--products 10000] [--latency-ms 0 20]
                                         [--concurrency 16] [--also-concurrency 64]
                                         [--pager 10] [--repeat 3] [--workers N]
                                         [--only NAME ...] [--baseline SRC]

For each latency, the demo shop runs in its own process and every contender crawls it
from scratch as a subprocess, ``--repeat`` times, interleaved: crashsafe (fsync'd SQLite
commits), Scrapy without and with JOBDIR (its resumable mode) and under crashsafe's Scrapy
adapter (crashsafe.contrib.scrapy), Crawlee for Python
(ParselCrawler, persistent storage), and the ceiling: a minimal loop over the URLs known
up front (aiohttp + parsel + grouped SQLite commits), i.e. the work without a crawler.
``--also-concurrency`` runs crashsafe and the ceiling once more at that concurrency.
crashsafe runs twice per concurrency c: with the default ``lease_ahead`` 0 (a page holds
its slot until its commit, a kill repeats at most c pages) and with ``lease_ahead`` c (at
most c requests at a time, but up to 2c pages between lease and commit).
``--workers N`` adds crashsafe with ``crawl --workers N`` at each concurrency (lease
ahead, N processes of concurrency/N pages each). ``--only`` keeps the contenders whose
name contains one of the given words. ``--baseline SRC`` also runs each crashsafe contender
with another version's source folder first on the path (``git worktree add /tmp/before
<commit>``, then ``--baseline /tmp/before/src``), named ``... @baseline``: a change
measured against what it changes, in the same run.
Each listing links the ``--pager`` listings after it, like a page-number bar, so that at
latency no crawler waits on a chain of 500 listings.
Prints medians of pages/s, CPU seconds per 1 000 pages (the contender's processes and
their children), peak RSS, ratios to crashsafe, and at latency the bound that
concurrency / latency puts on any client.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import Measurement, measure, median, print_table  # noqa: E402

from crashsafe.demo.process import ShopProcess  # noqa: E402
from crashsafe.demo.shop import ShopOptions  # noqa: E402

PY = sys.executable


def crashsafe(base: str, db: Path, c: int, ahead: int = 0, workers: int = 1) -> list[str]:
    return [
        PY, "-m", "crashsafe", "crawl", "crashsafe.demo.spider:DemoShop", "--no-progress",
        "--db", f"sqlite:///{db}", "--start-url", f"{base}/list/0",
        "--concurrency", str(c // workers), "--set", f"lease_ahead={ahead // workers}",
        "--workers", str(workers),
    ]  # fmt: skip


def contenders(
    base: str, tmp: Path, c: int, listings: int, also: list[int], workers: int
) -> dict[str, list[str]]:
    peers = HERE / "peers"
    runs = {
        f"crashsafe c={c}": crashsafe(base, tmp / "crashsafe.db", c),
        f"crashsafe c={c} ahead {c}": crashsafe(base, tmp / "crashsafe-ahead.db", c, c),
        "scrapy": [PY, str(peers / "scrapy_shop.py"), f"{base}/list/0", str(c),
                   str(tmp / "scrapy.jsonl")],
        "scrapy JOBDIR": [PY, str(peers / "scrapy_shop.py"), f"{base}/list/0", str(c),
                          str(tmp / "scrapy-job.jsonl"), str(tmp / "jobdir")],
        "scrapy + crashsafe adapter": [PY, str(peers / "scrapy_shop.py"), f"{base}/list/0",
                                       str(c), str(tmp / "scrapy-cs.jsonl"),
                                       f"--crashsafe=sqlite:///{tmp / 'scrapy-cs.db'}"],
        "crawlee": [PY, str(peers / "crawlee_shop.py"), f"{base}/list/0", str(c),
                    str(tmp / "crawlee-storage")],
        f"ceiling c={c}": [PY, str(peers / "ceiling.py"), base, str(listings), "20",
                           str(c), str(tmp / "ceiling.db")],
    }  # fmt: skip
    for n in also:
        runs[f"crashsafe c={n}"] = crashsafe(base, tmp / f"crashsafe-{n}.db", n)
        runs[f"crashsafe c={n} ahead {n}"] = crashsafe(base, tmp / f"ahead-{n}.db", n, n)
        runs[f"ceiling c={n}"] = [PY, str(peers / "ceiling.py"), base, str(listings), "20",
                                  str(n), str(tmp / f"ceiling-{n}.db")]  # fmt: skip
    if workers > 1:
        for n in (c, *also):
            runs[f"crashsafe c={n} ahead {n} {workers} workers"] = crashsafe(
                base, tmp / f"workers-{n}.db", n, n, workers
            )
    missing = [m for m in ("scrapy", "crawlee") if importlib.util.find_spec(m) is None]
    for name in missing:
        print(f"({name} is not installed: pip install -e '.[bench]'; skipping it)")
        runs = {k: v for k, v in runs.items() if not k.startswith(name)}
    return runs


def with_baseline(runs: dict[str, list[str]], src: str) -> dict[str, list[str]]:
    """Every crashsafe run once more as ``@baseline``, on its own database."""
    out: dict[str, list[str]] = {}
    for name, cmd in runs.items():
        out[name] = cmd
        if name.startswith("crashsafe"):
            db = next(a for a in cmd if a.startswith("sqlite:///"))
            out[f"{name} @baseline"] = [
                *(a if a != db else db.replace(".db", "-baseline.db") for a in cmd),
                f"--baseline={src}",
            ]
    return out


def env_for(cmd: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command without its ``--baseline=`` marker, and the environment it needs."""
    env = dict(os.environ)
    marks = [a for a in cmd if a.startswith("--baseline=")]
    if marks:
        env["PYTHONPATH"] = marks[0].removeprefix("--baseline=")
    return [a for a in cmd if a not in marks], env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 20.0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--also-concurrency", type=int, nargs="*", default=[64])
    parser.add_argument("--pager", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME")
    parser.add_argument("--baseline", metavar="SRC", help="another version's src folder")
    args = parser.parse_args()
    listings = max(1, args.products // 20)
    pages = listings * 21
    for latency in args.latency_ms:
        results: dict[str, list[Measurement]] = {}
        served: dict[str, int] = {}
        options = ShopOptions(
            listings=listings, per_listing=20, latency_ms=latency, pager=args.pager
        )
        with ShopProcess(options) as shop:
            for rep in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="crashsafe-peers-") as tmp:
                    runs = contenders(
                        shop.url,
                        Path(tmp),
                        args.concurrency,
                        listings,
                        args.also_concurrency,
                        args.workers,
                    )
                    if args.only:
                        runs = {k: v for k, v in runs.items() if any(w in k for w in args.only)}
                    if args.baseline:
                        runs = with_baseline(runs, args.baseline)
                    for name, marked in runs.items():
                        cmd, env = env_for(marked)
                        shop.reset()
                        m = measure(cmd, env=env)
                        served[name] = shop.stats()["requests"]
                        if m.returncode != 0:
                            print(f"  {name}: exit {m.returncode}")
                            continue
                        results.setdefault(name, []).append(m)
                        print(f"  latency {latency:g} ms, run {rep + 1}, {name}: "
                              f"{pages / m.wall:,.0f} pages/s ({served[name]} requests)",
                              flush=True)  # fmt: skip
        print(f"\n{pages:,} pages, latency {latency:g} ms, concurrency {args.concurrency}, "
              f"pager {args.pager}, medians of {args.repeat} runs")  # fmt: skip
        print_table(results, pages)
        if latency:
            for c in (args.concurrency, *args.also_concurrency):
                bound = c / (latency / 1000)
                rates = {k: pages / median([m.wall for m in ms])
                         for k, ms in results.items() if f"c={c}" in k.split()}  # fmt: skip
                print(f"bound at c={c}: {bound:,.0f} pages/s; "
                      + ", ".join(f"{k} {r / bound:.0%}" for k, r in rates.items()))  # fmt: skip
        print("requests the shop counted (last run): "
              + ", ".join(f"{name} {n:,}" for name, n in served.items()))  # fmt: skip
        print()


if __name__ == "__main__":
    main()
