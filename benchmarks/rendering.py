"""Rendered pages: crashsafe beside Crawlee's PlaywrightCrawler on the JavaScript demo shop,
same Chromium, same run.

    .venv/bin/pip install -e '.[bench]' 'crawlee[playwright]'
    .venv/bin/python benchmarks/rendering.py [--products 200] [--concurrency 4 8]
                                             [--repeat 3] [--only NAME ...]

The shop (``demo-site --js``) builds every product page with a script that fetches the
product's data; listings are plain HTML. Contenders, each from scratch as a subprocess:

- ``crashsafe render=True``: every page rendered (as Crawlee does);
- ``crashsafe auto``: ``DemoShopRendered`` (render = "auto"): listings as fetched, product
  pages rendered;
- ``crawlee playwright``: PlaywrightCrawler, images and fonts blocked, no fingerprints;

then, on a shop where one product page in ten needs the browser (``--js-share 0.1``),
``crashsafe auto`` against ``crashsafe render=True``.

Prints medians of pages/s, CPU seconds per 1 000 pages (the contender's process tree, the
browser included), peak RSS of the browser's processes (sampled every 0.1 s; Chromium's
processes share memory, so RSS overstates it), and that each stored every product.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import median  # noqa: E402

from crashsafe.demo.process import ShopProcess  # noqa: E402
from crashsafe.demo.shop import ShopOptions  # noqa: E402

PY = sys.executable


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    browser_rss_mb: float
    items: int
    returncode: int


def _tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
                parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            except (OSError, ValueError):
                continue
    tree, grew = {root}, True
    while grew:
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sorted(tree)


def _browser_rss(root: int) -> int:
    """RSS of the Chromium processes under ``root`` (bytes)."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"chrom" not in f.read().split(b"\0")[0]:
                    continue
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return total


def run(cmd: list[str], count_items: callable) -> Run:  # type: ignore[valid-type]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _browser_rss(proc.pid))
            done.wait(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(err.decode(errors="replace")[-3000:])
    cpu = usage.ru_utime + usage.ru_stime
    return Run(wall, cpu, peak / 2**20, count_items(), code)


def crashsafe_items(db: Path, crawl: str) -> callable:  # type: ignore[valid-type]
    def count() -> int:
        from crashsafe.store import open_store

        if not db.exists():
            return 0
        store = open_store(f"sqlite:///{db}", readonly=True)
        try:
            return sum(1 for r in store.iter_records(crawl) if r.data.get("price"))
        finally:
            store.close()

    return count


def crawlee_items(storage: Path) -> callable:  # type: ignore[valid-type]
    def count() -> int:
        folder = storage / "datasets" / "default"
        items = 0
        for path in folder.glob("*.json"):
            if path.name.startswith("__"):
                continue
            data = json.loads(path.read_text())
            items += bool(data.get("price"))
        return items

    return count


def contenders(base: str, tmp: Path, c: int, chromium: str, mixed: bool) -> dict[str, tuple]:
    def cs(name: str, *extra: str) -> tuple:
        db = tmp / f"{name}.db"
        cmd = [PY, "-m", "crashsafe", "crawl", "crashsafe.demo.rendered:DemoShopRendered",
               "--no-progress", "--db", f"sqlite:///{db}", "--start-url", f"{base}/list/0",
               "--concurrency", str(c), "--set", f"browser_concurrency={c}",
               "--set", f"browser_executable={chromium}", *extra]  # fmt: skip
        return cmd, crashsafe_items(db, "demo-shop-js")

    runs = {
        f"crashsafe render=True c={c}": cs("render", "--set", "render=true"),
        f"crashsafe auto c={c}": cs("auto"),
    }
    if not mixed and importlib.util.find_spec("crawlee") is not None:
        storage = tmp / "crawlee"
        runs[f"crawlee playwright c={c}"] = (
            [PY, str(HERE / "peers" / "crawlee_render_shop.py"), f"{base}/list/0", str(c),
             str(storage), chromium],
            crawlee_items(storage),
        )  # fmt: skip
    return runs


def table(title: str, results: dict[str, list[Run]], pages: int, products: int) -> None:
    print(f"\n{title}")
    width = max(len(k) for k in results) + 2
    head = (f"{'contender':<{width}} {'pages/s':>8} {'CPU s/1k pages':>15} "
            f"{'browser RSS MB':>15} {'products stored':>16}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for name, runs in results.items():
        rate = pages / median([r.wall for r in runs])
        cpu = median([r.cpu for r in runs]) / pages * 1000
        rss = median([r.browser_rss_mb for r in runs])
        stored = f"{min(r.items for r in runs)}/{products}"
        print(f"{name:<{width}} {rate:>8.1f} {cpu:>15.1f} {rss:>15.0f} {stored:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="+", default=[], metavar="NAME")
    args = parser.parse_args()
    from crashsafe.crawl.browser import find_chromium

    chromium = find_chromium(None)
    listings = max(1, args.products // 20)
    products, pages = listings * 20, listings * 21
    for share, title in ((1.0, "every product page built by JavaScript"),
                         (0.1, "one product page in ten built by JavaScript")):  # fmt: skip
        results: dict[str, list[Run]] = {}
        options = ShopOptions(listings=listings, per_listing=20, js=share)
        with ShopProcess(options) as shop:
            for rep in range(args.repeat):
                for c in args.concurrency:
                    with tempfile.TemporaryDirectory(prefix="crashsafe-render-") as tmp:
                        runs = contenders(shop.url, Path(tmp), c, chromium, share < 1)
                        if args.only:
                            runs = {k: v for k, v in runs.items()
                                    if any(w in k for w in args.only)}  # fmt: skip
                        for name, (cmd, items) in runs.items():
                            shop.reset()
                            r = run(cmd, items)
                            if r.returncode != 0:
                                print(f"  {name}: exit {r.returncode}")
                                continue
                            results.setdefault(name, []).append(r)
                            print(f"  {title[:30]}, run {rep + 1}, {name}: "
                                  f"{pages / r.wall:.1f} pages/s, {r.items} products",
                                  flush=True)  # fmt: skip
        table(f"{pages} pages ({products} products), {title}, medians of {args.repeat}",
              results, pages, products)  # fmt: skip


if __name__ == "__main__":
    main()
