"""The physical limit: every URL known up front, aiohttp at a fixed concurrency, each page
parsed with parsel, results committed to SQLite in groups. Not a crawler (no frontier, no
discovery, no durability of progress): the floor of what the work costs in Python.

    python benchmarks/peers/ceiling.py BASE_URL LISTINGS PER_LISTING CONCURRENCY DB
"""

import asyncio
import sqlite3
import sys

import aiohttp
from parsel import Selector


async def main() -> None:
    base, listings, per, concurrency, db_path = sys.argv[1], *map(int, sys.argv[2:5]), sys.argv[5]
    urls = [f"{base}/list/{n}" for n in range(listings)]
    urls += [f"{base}/product/SKU-{n:05d}" for n in range(listings * per)]
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE IF NOT EXISTS p (sku TEXT PRIMARY KEY, name TEXT, price TEXT)")
    pending: list[tuple[str, str, str]] = []
    queue = iter(urls)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as s:

        async def worker() -> None:
            for url in queue:
                async with s.get(url) as resp:
                    sel = Selector(text=await resp.text())
                if "/product/" in url:
                    pending.append(
                        (
                            sel.css(".sku::text").get(),
                            sel.css(".name::text").get(),
                            sel.css(".price::text").get(),
                        )
                    )
                    if len(pending) >= 100:
                        db.executemany("INSERT OR REPLACE INTO p VALUES (?, ?, ?)", pending)
                        db.commit()
                        pending.clear()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    db.executemany("INSERT OR REPLACE INTO p VALUES (?, ?, ?)", pending)
    db.commit()


if __name__ == "__main__":
    asyncio.run(main())
