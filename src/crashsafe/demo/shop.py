"""The demo shop: listing pages linking products, counted server-side.

Listing ``/list/N`` links its products and ``/list/N+1``; a product page shows sku, name
and price. ``/stats`` counts requests as the server saw them, ``/catalogue`` is the
ground truth every crawl is checked against, ``/log?since=T`` lists page requests after
time ``T`` (Unix seconds).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from crashsafe.demo.server import AppThread


@dataclass(frozen=True, slots=True)
class ShopOptions:
    """The shop's shape and misbehaviour.

    Attributes:
        listings: listing pages; each links ``per_listing`` products.
        latency_ms: delay before every page answer, like a real site.
        error_rate: share of page requests answered 500/503 (seeded, reproducible).
        seed: for the error draw.
    """

    listings: int = 25
    per_listing: int = 20
    latency_ms: float = 0.0
    error_rate: float = 0.0
    seed: int = 0

    @property
    def products(self) -> int:
        return self.listings * self.per_listing

    @property
    def pages(self) -> int:
        return self.listings + self.products


def sku(n: int) -> str:
    return f"SKU-{n:05d}"


def product(n: int) -> dict[str, str]:
    """Name and price of product ``n``: derived from ``n``, the same in every run."""
    digest = hashlib.sha256(str(n).encode()).digest()
    cents = 100 + int.from_bytes(digest[:4], "big") % 99_900
    adjective = ["Red", "Blue", "Steel", "Oak", "Tiny", "Grand", "Swift", "Quiet"][digest[4] % 8]
    noun = ["Lamp", "Chair", "Kettle", "Clock", "Mug", "Desk", "Fan", "Rug"][digest[5] % 8]
    return {"sku": sku(n), "name": f"{adjective} {noun} {n}", "price": f"{cents / 100:.2f}"}


class Shop:
    def __init__(self, options: ShopOptions) -> None:
        self.options = options
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[float, str]] = []
        self._rng = random.Random(options.seed)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/list/{n}", self.listing)
        app.router.add_get("/product/{sku}", self.product_page)
        app.router.add_get("/robots.txt", self.robots)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/catalogue", self.catalogue)
        app.router.add_get("/log", self.request_log)
        return app

    async def _page_gate(self, request: web.Request) -> web.Response | None:
        """Count the request, wait the latency, maybe fail; None means answer normally."""
        self.counts["pages"] += 1
        self.counts[request.path] += 1
        self.log.append((time.time(), request.path))
        if self.options.latency_ms:
            await asyncio.sleep(self.options.latency_ms / 1000)
        if self.options.error_rate and self._rng.random() < self.options.error_rate:
            self.counts["errors"] += 1
            return web.Response(status=self._rng.choice([500, 503]), text="try again")
        return None

    async def listing(self, request: web.Request) -> web.Response:
        if (fail := await self._page_gate(request)) is not None:
            return fail
        o = self.options
        try:
            n = int(request.match_info["n"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 0 <= n < o.listings:
            raise web.HTTPNotFound()
        first = n * o.per_listing
        links = "\n".join(
            f'<li><a class="product" href="/product/{sku(i)}">{product(i)["name"]}</a></li>'
            for i in range(first, first + o.per_listing)
        )
        nxt = f'<a class="next" href="/list/{n + 1}">next</a>' if n + 1 < o.listings else ""
        body = f"<html><body><h1>Listing {n}</h1><ul>\n{links}\n</ul>{nxt}</body></html>"
        return web.Response(text=body, content_type="text/html")

    async def product_page(self, request: web.Request) -> web.Response:
        if (fail := await self._page_gate(request)) is not None:
            return fail
        code = request.match_info["sku"]
        try:
            n = int(code.removeprefix("SKU-"))
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 0 <= n < self.options.products or code != sku(n):
            raise web.HTTPNotFound()
        p = product(n)
        body = (
            f'<html><body><h1 class="name">{p["name"]}</h1>'
            f'<span class="sku">{p["sku"]}</span> <span class="price">{p["price"]}</span>'
            "</body></html>"
        )
        return web.Response(text=body, content_type="text/html")

    async def robots(self, request: web.Request) -> web.Response:
        self.counts["robots"] += 1
        return web.Response(text="User-agent: *\nDisallow: /admin\n")

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        o = self.options
        distinct = sum(1 for k in self.counts if k.startswith("/"))
        return {
            "requests": self.counts["pages"],
            "distinct_pages": distinct,
            "repeated": self.counts["pages"] - distinct,
            "errors": self.counts["errors"],
            "robots": self.counts["robots"],
            "minimum": o.pages,
        }

    async def catalogue(self, request: web.Request) -> web.Response:
        return web.json_response({p["sku"]: p for p in map(product, range(self.options.products))})

    async def request_log(self, request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        return web.json_response([[t, path] for t, path in self.log if t >= since])


class ShopThread(AppThread):
    """The demo shop on its own thread, for ``crashsafe demo`` and tests."""

    def __init__(self, options: ShopOptions | None = None, *, port: int = 0) -> None:
        self.shop = Shop(options or ShopOptions())
        super().__init__(self.shop.app(), port=port)
