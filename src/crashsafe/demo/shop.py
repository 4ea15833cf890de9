"""The demo shop: listing pages linking products, counted server-side.

Listing ``/list/N`` links its products and ``/list/N+1`` (and, with ``pager``, the
listings after it too, like a shop's page-number bar); a product page shows sku, name,
price and a picture (``/image/N.png``, shared by many products). ``/stats`` counts page
requests as the server saw them (by path, query ignored), ``/catalogue`` is the ground
truth every crawl is checked against, ``/log?since=T[&agent=UA]`` lists page requests
after time ``T`` (Unix seconds) with their User-Agent (or only those from ``UA``),
``POST /reset`` zeroes the counters (the kill test runs several crawls against one shop).
Pages carry validators (``ETag``, ``Last-Modified``) and answer a conditional request
that still holds with ``304 Not Modified`` (``not_modified`` in ``/stats``; ``bytes``
counts the page bodies sent).

With ``js`` (``demo-site --js``), product pages are built by JavaScript: their HTML holds
no name, sku or price until ``/static/shop.js`` runs and fills them in from
``/api/product/SKU`` (a share of them with ``js`` < 1, drawn per product: see
:func:`needs_js`). Script and API requests are counted apart from pages (``api`` in
``/stats``).
"""

from __future__ import annotations

import asyncio
import hashlib
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
        error_rate: share of pages whose first ``error_attempts`` requests are answered
            500/503 (which pages is drawn from ``seed``: reproducible).
        error_attempts: how many requests of such a page fail before it answers.
        tracking: listings also link a third of the previous listing's products with
            ``utm_source``/``ref`` parameters: the same product under a second URL.
        dup_links: listings link each product twice and link back to the previous one.
        pager: listings link this many following listings (``next`` and ``page`` links), so
            discovering the listings is not one long chain of requests.
        seed: for the error draw.
        round: the shop as of this repricing round (0: as first published). Each round
            changes the price of about ``PRICE_CHANGES`` of the products and
            discontinues about ``DISCONTINUED`` (their page answers 404 and no listing
            links them): a recrawl after a round has changes to find.
        js: share of product pages built by JavaScript (0: none, 1: all).
        page_kb: about this many kilobytes of a real page's weight around each page's
            content (a stylesheet, structured data, a site menu and footer, none of which
            the demo spider reads or follows): the demo's pages are some 250 bytes
            otherwise, where real shops' pages are tens to hundreds of kilobytes.
    """

    listings: int = 25
    per_listing: int = 20
    latency_ms: float = 0.0
    error_rate: float = 0.0
    error_attempts: int = 1
    tracking: bool = False
    dup_links: bool = False
    pager: int = 1
    seed: int = 0
    round: int = 0
    js: float = 0.0
    page_kb: int = 0

    @property
    def products(self) -> int:
        return self.listings * self.per_listing

    @property
    def pages(self) -> int:
        return self.listings + self.products


def sku(n: int) -> str:
    return f"SKU-{n:05d}"


PRICE_CHANGES = 0.10  # share of products whose price a round changes
DISCONTINUED = 0.02  # share of products a round discontinues
IMAGES = 7  # distinct product pictures: products share them (one file per content)


def product(n: int, round: int = 0) -> dict[str, str]:
    """Name and price of product ``n`` as of ``round``: derived from ``n`` and the rounds
    that changed its price, the same in every run."""
    changed = [r for r in range(1, round + 1) if _draw(r, f"price:{n}") < PRICE_CHANGES]
    if changed:
        base = product(n)
        cents = 100 + int(_draw(changed[-1], f"cents:{n}") * 99_900)
        return {**base, "price": f"{cents / 100:.2f}"}
    digest = hashlib.sha256(str(n).encode()).digest()
    cents = 100 + int.from_bytes(digest[:4], "big") % 99_900
    adjective = ["Red", "Blue", "Steel", "Oak", "Tiny", "Grand", "Swift", "Quiet"][digest[4] % 8]
    noun = ["Lamp", "Chair", "Kettle", "Clock", "Mug", "Desk", "Fan", "Rug"][digest[5] % 8]
    return {"sku": sku(n), "name": f"{adjective} {noun} {n}", "price": f"{cents / 100:.2f}"}


def _draw(seed: int, path: str) -> float:
    """A number in [0, 1) fixed by seed and path."""
    digest = hashlib.sha256(f"{seed}:{path}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def discontinued(n: int, round: int) -> bool:
    """Whether product ``n`` is gone as of ``round`` (once gone, it stays gone)."""
    return any(_draw(r, f"gone:{n}") < DISCONTINUED for r in range(1, round + 1))


def needs_js(n: int, options: ShopOptions) -> bool:
    """Whether product ``n``'s page is built by JavaScript in a shop with ``options``."""
    return options.js >= 1 or (options.js > 0 and _draw(options.seed + 2, f"js:{n}") < options.js)


#: What a JavaScript product page runs: the product's data from the API, into the page.
SHOP_JS = """
fetch('/api' + location.pathname)
  .then(function (r) { return r.json(); })
  .then(function (p) {
    document.querySelector('.name').textContent = p.name;
    document.querySelector('.sku').textContent = p.sku;
    var price = document.createElement('span');
    price.className = 'price';
    price.textContent = p.price;
    document.querySelector('.sku').after(' ', price);
  });
"""


ROUND_ZERO = 1_767_225_600  # 2026-01-01 UTC: when the shop was first published
ROUND_SECONDS = 86_400  # a repricing round a day


def _http_date(round: int) -> str:
    from email.utils import formatdate

    return formatdate(ROUND_ZERO + round * ROUND_SECONDS, usegmt=True)


def image(n: int) -> bytes:
    """Product ``n``'s picture: one of ``IMAGES`` contents, some kilobytes each."""
    seed = hashlib.sha256(f"image:{n % IMAGES}".encode()).digest()
    return b"\x89PNG\r\n\x1a\n" + seed * (64 + n % IMAGES)


def page_weight(kb: int) -> tuple[str, str]:
    """What ``page_kb`` adds to a page: (in its head, after its content), about ``kb``
    kilobytes together, the same for every page: a quarter stylesheet, a quarter
    structured data (a script that is not run), half a menu and a footer of elements
    with text (links to help pages the demo spider does not follow)."""
    if kb <= 0:
        return "", ""
    size = kb * 1024
    css = "".join(
        f".c{i} {{ margin: {i % 7}px {i % 5}px; color: #{i * 2654435761 % 0xFFFFFF:06x} }}\n"
        for i in range(size // 4 // 45 + 1)
    )
    data = ",".join(
        f'{{"@type":"ListItem","position":{i},"name":"Section {i}"}}'
        for i in range(size // 4 // 50 + 1)
    )
    items: list[str] = []
    filled = 0
    while filled < size // 2:
        n = len(items)
        items.append(
            f'<li class="m{n % 9}"><a href="/help/{n}">Help topic {n}</a>'
            f"<p>Delivery, returns and warranty, part {n}.</p></li>"
        )
        filled += len(items[-1])
    head = (
        f"<style>{css}</style>"
        f'<script type="application/ld+json">{{"itemListElement":[{data}]}}</script>'
    )
    return head, f'<footer><ul class="site">{"".join(items)}</ul></footer>'


class Shop:
    def __init__(self, options: ShopOptions) -> None:
        self.options = options
        self._weight = page_weight(options.page_kb)
        self.counts: Counter[str] = Counter()
        self.errors = 0
        self.log: list[tuple[float, str, str]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/list/{n}", self.listing)
        app.router.add_get("/product/{sku}", self.product_page)
        app.router.add_get("/image/{n}.png", self.image_file)
        app.router.add_get("/api/product/{sku}", self.product_api)
        app.router.add_get("/static/shop.js", self.script)
        app.router.add_get("/robots.txt", self.robots)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/reset", self.reset)
        app.router.add_get("/catalogue", self.catalogue)
        app.router.add_get("/log", self.request_log)
        return app

    async def _page_gate(self, request: web.Request) -> web.Response | None:
        """Count the request, wait the latency, maybe fail; None means answer normally."""
        path = request.path
        self.counts[path] += 1
        self.log.append((time.time(), path, request.headers.get("User-Agent", "")))
        o = self.options
        if o.latency_ms:
            await asyncio.sleep(o.latency_ms / 1000)
        if (
            o.error_rate
            and self.counts[path] <= o.error_attempts
            and _draw(o.seed, path) < o.error_rate
        ):
            self.errors += 1
            status = 500 if _draw(o.seed + 1, path) < 0.5 else 503
            return web.Response(status=status, text="try again")
        return None

    def _links(self, n: int) -> list[str]:
        """The product links of listing ``n``, with the chaos options applied."""
        o = self.options
        first = n * o.per_listing
        links = [
            f"/product/{sku(i)}"
            for i in range(first, first + o.per_listing)
            if not discontinued(i, o.round)
        ]
        if o.dup_links:
            links += links
        if o.tracking and n > 0:
            previous = range(first - o.per_listing, first, 3)
            links += [f"/product/{sku(i)}?utm_source=list{n}&ref=shop" for i in previous]
        return links

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
        items = "\n".join(
            f'<li><a class="product" href="{href}">{href.rsplit("/", 1)[1]}</a></li>'
            for href in self._links(n)
        )
        nxt = f'<a class="next" href="/list/{n + 1}">next</a>' if n + 1 < o.listings else ""
        nxt += "".join(
            f' <a class="page" href="/list/{k}">{k}</a>'
            for k in range(n + 2, min(n + 1 + o.pager, o.listings))
        )
        if o.dup_links and n > 0:
            nxt = f'<a class="prev" href="/list/{n - 1}">previous</a> ' + nxt
        body = f"<html><body><h1>Listing {n}</h1><ul>\n{items}\n</ul>{nxt}</body></html>"
        return self._page(request, body)

    async def product_page(self, request: web.Request) -> web.Response:
        if (fail := await self._page_gate(request)) is not None:
            return fail
        n = self._product_number(request.match_info["sku"])
        o = self.options
        if needs_js(n, o):
            body = (
                '<html><head><script src="/static/shop.js" defer></script></head><body>'
                '<h1 class="name"></h1><span class="sku"></span>'
                f'<img class="photo" src="/image/{n}.png"></body></html>'
            )
            return self._page(request, body)
        p = product(n, o.round)
        body = (
            f'<html><body><h1 class="name">{p["name"]}</h1>'
            f'<span class="sku">{p["sku"]}</span> <span class="price">{p["price"]}</span>'
            f'<img class="photo" src="/image/{n}.png">'
            "</body></html>"
        )
        return self._page(request, body)

    def _page(self, request: web.Request, body: str) -> web.Response:
        """An HTML page with its validators (RFC 9110 8.8): a strong ``ETag`` from its
        content and a ``Last-Modified`` from the round that last changed it; a request
        whose ``If-None-Match`` (or, without one, ``If-Modified-Since``) still holds is
        answered ``304 Not Modified`` without the body. Body bytes sent are counted."""
        if self.options.page_kb:  # a real page's weight around the content
            head, tail = self._weight
            if "<head>" in body:
                body = body.replace("<head>", f"<head>{head}", 1)
            else:
                body = body.replace("<body>", f"<head>{head}</head><body>", 1)
            body = body.replace("</body>", f"{tail}</body>", 1)
        data = body.encode()
        etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
        modified = _http_date(self._changed_in(request.path))
        headers = {"ETag": etag, "Last-Modified": modified}
        match = request.headers.get("If-None-Match")
        since = request.headers.get("If-Modified-Since")
        if (match is not None and etag in {m.strip() for m in match.split(",")}) or (
            match is None and since == modified
        ):
            self.counts["not_modified"] += 1
            return web.Response(status=304, headers=headers)
        self.counts["bytes"] += len(data)
        return web.Response(body=data, content_type="text/html", charset="utf-8",
                            headers=headers)  # fmt: skip

    def _changed_in(self, path: str) -> int:
        """The round that last changed the page at ``path`` (0: as first published). A
        listing changes when one of its products is discontinued."""
        o = self.options
        if path.startswith("/product/"):
            try:
                n = int(path.rsplit("-", 1)[1])
            except ValueError:
                return 0
            rounds = [r for r in range(1, o.round + 1)
                      if _draw(r, f"price:{n}") < PRICE_CHANGES or discontinued(n, r)]  # fmt: skip
            return rounds[-1] if rounds else 0
        return o.round

    def _product_number(self, code: str) -> int:
        try:
            n = int(code.removeprefix("SKU-"))
        except ValueError:
            raise web.HTTPNotFound() from None
        o = self.options
        if not 0 <= n < o.products or code != sku(n) or discontinued(n, o.round):
            raise web.HTTPNotFound()
        return n

    async def product_api(self, request: web.Request) -> web.Response:
        """A product's data as JSON, for the script of its JavaScript page."""
        self.counts["api"] += 1
        n = self._product_number(request.match_info["sku"])
        return web.json_response(product(n, self.options.round))

    async def script(self, request: web.Request) -> web.Response:
        self.counts["api"] += 1
        return web.Response(text=SHOP_JS, content_type="application/javascript")

    async def image_file(self, request: web.Request) -> web.Response:
        if (fail := await self._page_gate(request)) is not None:
            return fail
        try:
            n = int(request.match_info["n"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 0 <= n < self.options.products:
            raise web.HTTPNotFound()
        return web.Response(body=image(n), content_type="image/png")

    async def robots(self, request: web.Request) -> web.Response:
        self.counts["robots.txt"] += 1
        return web.Response(text="User-agent: *\nDisallow: /admin\n")

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())

    async def reset(self, request: web.Request) -> web.Response:
        self.counts.clear()
        self.errors = 0
        self.log.clear()
        return web.json_response(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        """Page requests as the server saw them; ``minimum`` is what a perfect crawler
        needs: every page once, plus the answers that were errors."""
        pages = {k: v for k, v in self.counts.items() if k.startswith("/")}
        requests = sum(pages.values())
        minimum = self.options.pages + self.errors
        return {
            "requests": requests,
            "distinct_pages": len(pages),
            "repeated": requests - len(pages) - self.errors,
            "errors": self.errors,
            "robots": self.counts["robots.txt"],
            "api": self.counts["api"],
            "not_modified": self.counts["not_modified"],
            "bytes": self.counts["bytes"],
            "minimum": minimum,
            "over_minimum": requests - minimum,
        }

    async def catalogue(self, request: web.Request) -> web.Response:
        o = self.options
        live = (n for n in range(o.products) if not discontinued(n, o.round))
        return web.json_response({sku(n): product(n, o.round) for n in live})

    async def request_log(self, request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        agent = request.query.get("agent")
        return web.json_response(
            [[t, path, ua] for t, path, ua in self.log if t >= since and agent in (None, ua)]
        )


class ShopThread(AppThread):
    """The demo shop on its own thread, for ``crashsafe demo`` and tests."""

    def __init__(self, options: ShopOptions | None = None, *, port: int = 0) -> None:
        self.shop = Shop(options or ShopOptions())
        super().__init__(self.shop.app(), port=port)
