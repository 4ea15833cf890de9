"""A recrawl of the demo shop: what it transfers and how long it takes, against the first
crawl, unchanged and after a repricing round (issue #29).

    .venv/bin/python benchmarks/recrawl.py [--products 10000] [--repeat 3] [--page-kb 0]

Each repeat: a fresh SQLite crawl of the shop (`crashsafe crawl`, a subprocess), then
`crashsafe recrawl` and the same crawl again with the shop unchanged, then once more after
the shop moved to its next repricing round (about 10 % of prices changed, 2 % of products
discontinued). The shop counts the page bodies it sent (`/stats` bytes; each response's
headers, some 200 bytes, come on top for a 200 and a 304 alike). Medians. ``--page-kb N``
gives every page about N KB of a real page's weight (styles, structured data, a menu and
footer: ``demo-site --page-kb``); the demo's own pages are some 250 bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import median  # noqa: E402

from crashsafe.demo.process import ShopProcess, free_port  # noqa: E402
from crashsafe.demo.shop import ShopOptions  # noqa: E402

PY = sys.executable


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([PY, "-m", "crashsafe", *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out


def stats(url: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(f"{url}/stats") as resp:
        return json.load(resp)  # type: ignore[no-any-return]


def crawl(shop: ShopProcess, db: str) -> tuple[float, dict, dict]:  # type: ignore[type-arg]
    urllib.request.urlopen(urllib.request.Request(f"{shop.url}/reset", method="POST")).read()
    started = time.perf_counter()
    cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", db, "--no-progress",
        "--start-url", f"{shop.url}/list/0")  # fmt: skip
    wall = time.perf_counter() - started
    [status] = json.loads(cli("status", "--db", db, "--json").stdout)
    return wall, stats(shop.url), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--page-kb", type=int, default=0)
    args = parser.parse_args()
    options = ShopOptions(listings=max(1, args.products // 20), per_listing=20, pager=10,
                          page_kb=args.page_kb)  # fmt: skip
    rows: dict[str, list[tuple[float, int, int, int]]] = {}
    port = free_port()  # the same shop URLs for every crawl of a repeat
    for rep in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="crashsafe-recrawl-") as tmp:
            db = f"sqlite:///{Path(tmp) / 'shop.db'}"
            for name, round_ in (("first crawl", 0), ("recrawl, unchanged", 0),
                                 ("recrawl, next round", 1)):  # fmt: skip
                with ShopProcess(dataclasses.replace(options, round=round_), port=port) as shop:
                    if name != "first crawl":
                        cli("recrawl", "--db", db)
                    wall, served, status = crawl(shop, db)
                fetched = status.get("last_pass_fetches", {})
                parsed = fetched.get("fetched", {}).get("pages", 0)
                rows.setdefault(name, []).append(
                    (wall, served["bytes"], served["not_modified"], parsed)
                )
                print(f"  run {rep + 1}, {name}: {wall:.1f} s, {served['bytes']:,} body bytes, "
                      f"{served['requests']:,} requests, {served['not_modified']:,} 304s, "
                      f"{parsed:,} parsed", flush=True)  # fmt: skip
    first_wall = median([r[0] for r in rows["first crawl"]])
    first_bytes = median([r[1] for r in rows["first crawl"]])
    weight = f", {args.page_kb} KB of page weight added" if args.page_kb else ""
    print(f"\n{options.pages:,} pages{weight}, medians of {args.repeat}")
    print(f"{'':<22} {'seconds':>8} {'body bytes':>12} {'304s':>7} {'parsed':>7} "
          f"{'time':>6} {'bytes':>6}")  # fmt: skip
    for name, rs in rows.items():
        wall, size = median([r[0] for r in rs]), median([r[1] for r in rs])
        n304, parsed = median([r[2] for r in rs]), median([r[3] for r in rs])
        print(f"{name:<22} {wall:>8.2f} {size:>12,.0f} {n304:>7,.0f} {parsed:>7,.0f} "
              f"{wall / first_wall:>6.0%} {size / first_bytes:>6.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
