"""A members-only shop: a site that takes everything a Scrapy user reaches for.

- ``GET /login`` is a form with a CSRF token; ``POST /login`` (form body) answers 302 to
  ``/account`` and sets the ``session`` cookie. Every ``/account``, ``/category``,
  ``/api`` and ``/product`` page without that cookie redirects to ``/login``.
- ``/account`` links the categories; a category page names the search API.
- ``POST /api/search`` takes a JSON body ``{"category": C, "page": N}`` and answers the
  products of that page and the next page's number; it needs the header
  ``X-Shop-Client`` (a default header of the spider). The same URL with two bodies is two
  requests.
- ``/product/ID`` shows sku, name and price, but not the category: a spider carries it in
  ``meta`` from the search that found the product.
- ``/sitemap.xml.gz`` (gzip) lists the public guides ``/guide/SLUG``.

``/truth`` is what a correct crawl stores; ``/stats`` counts requests as the server saw
them (a request is its method, path and body), ``/log?since=T`` lists them.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from crashsafe.demo.server import AppThread

SECRET = "members-demo"
PROTECTED = ("/account", "/category/", "/api/", "/product/")


@dataclass(frozen=True, slots=True)
class MembersOptions:
    categories: int = 5
    pages_per_category: int = 3
    per_page: int = 8
    guides: int = 10
    latency_ms: float = 0.0

    @property
    def products(self) -> int:
        return self.categories * self.pages_per_category * self.per_page


def _digest(text: str) -> str:
    return hashlib.sha256(f"{SECRET}:{text}".encode()).hexdigest()[:16]


class Members:
    def __init__(self, options: MembersOptions | None = None) -> None:
        self.options = options or MembersOptions()
        self.requests: Counter[str] = Counter()
        self.log: list[tuple[float, str]] = []
        self.sessions = 0

    # -- the data -------------------------------------------------------------------------
    def category_name(self, c: int) -> str:
        return f"cat-{c}"

    def product(self, pid: int) -> dict[str, Any]:
        o = self.options
        category = pid // (o.pages_per_category * o.per_page)
        price = f"{(pid * 37) % 400 + 5}.{pid % 100:02d}"
        return {"sku": f"M{pid:05d}", "name": f"Member thing {pid}", "price": price,
                "category": self.category_name(category)}  # fmt: skip

    def truth(self) -> dict[str, Any]:
        products = {p["sku"]: p for p in map(self.product, range(self.options.products))}
        guides = {f"guide:{g}": {"title": f"Guide number {g}"} for g in range(self.options.guides)}
        return {"products": products, "guides": guides}

    # -- the site -------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._count])
        r = app.router
        r.add_get("/login", self.login_form)
        r.add_post("/login", self.login)
        r.add_get("/account", self.account)
        r.add_get("/category/{c}", self.category)
        r.add_post("/api/search", self.search)
        r.add_get("/product/{pid}", self.product_page)
        r.add_get("/sitemap.xml.gz", self.sitemap)
        r.add_get("/guide/{g}", self.guide)
        r.add_get("/truth", self.truth_page)
        r.add_get("/stats", self.stats)
        r.add_get("/log", self.log_page)
        return app

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path in ("/truth", "/stats", "/log"):
            response: web.StreamResponse = await handler(request)
            return response
        body = await request.read()
        key = f"{request.method} {request.path_qs} {hashlib.sha256(body).hexdigest()[:12]}"
        self.requests[key] += 1
        self.log.append((time.time(), key))
        if self.options.latency_ms:
            await asyncio.sleep(self.options.latency_ms / 1000)
        if request.path.startswith(PROTECTED):
            session = request.cookies.get("session", "")
            user, _, sig = session.partition(".")
            if not user or sig != _digest(user):
                raise web.HTTPFound("/login")
        response = await handler(request)
        return response

    async def login_form(self, request: web.Request) -> web.Response:
        token = _digest("csrf")
        return _html(
            "<form method=post action=/login><input name=user><input name=password "
            f"type=password><input type=hidden name=csrf value={token}></form>"
        )

    async def login(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("csrf") != _digest("csrf") or (form.get("user"), form.get("password")) != (
            "demo",
            "secret",
        ):
            return _html("<p class=error>wrong user, password or token</p>", status=403)
        self.sessions += 1
        user = f"demo{self.sessions}"
        response = web.HTTPFound("/account")
        response.set_cookie("session", f"{user}.{_digest(user)}", path="/", httponly=True)
        raise response

    async def account(self, request: web.Request) -> web.Response:
        links = "".join(
            f'<a class="category" href="/category/{c}">{self.category_name(c)}</a>'
            for c in range(self.options.categories)
        )
        return _html(f"<h1>Your account</h1>{links}")

    async def category(self, request: web.Request) -> web.Response:
        c = int(request.match_info["c"])
        if not 0 <= c < self.options.categories:
            raise web.HTTPNotFound()
        name = self.category_name(c)
        return _html(f'<h1 class="name">{name}</h1><div id="search" data-api="/api/search">')

    async def search(self, request: web.Request) -> web.Response:
        if "X-Shop-Client" not in request.headers:
            return web.json_response({"error": "X-Shop-Client header missing"}, status=400)
        try:
            query = await request.json()
            name, page = str(query["category"]), int(query["page"])
        except (ValueError, KeyError, TypeError):
            return web.json_response({"error": "body must be {category, page}"}, status=400)
        o = self.options
        try:
            c = [self.category_name(i) for i in range(o.categories)].index(name)
        except ValueError:
            return web.json_response({"products": [], "next_page": None})
        first = (c * o.pages_per_category + page) * o.per_page
        ids = list(range(first, first + o.per_page)) if 0 <= page < o.pages_per_category else []
        next_page = page + 1 if page + 1 < o.pages_per_category else None
        return web.json_response({"products": ids, "next_page": next_page})

    async def product_page(self, request: web.Request) -> web.Response:
        pid = int(request.match_info["pid"])
        if not 0 <= pid < self.options.products:
            raise web.HTTPNotFound()
        p = self.product(pid)
        return _html(
            f'<span class="sku">{p["sku"]}</span><h1 class="name">{p["name"]}</h1>'
            f'<span class="price">{p["price"]}</span>'
        )

    async def sitemap(self, request: web.Request) -> web.Response:
        base = f"{request.scheme}://{request.host}"
        urls = "".join(
            f"<url><loc>{base}/guide/{g}</loc><lastmod>2026-11-{g % 28 + 1:02d}</lastmod></url>"
            for g in range(self.options.guides)
        )
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{urls}</urlset>'
        )
        return web.Response(body=gzip.compress(xml.encode()), content_type="application/gzip")

    async def guide(self, request: web.Request) -> web.Response:
        g = int(request.match_info["g"])
        if not 0 <= g < self.options.guides:
            raise web.HTTPNotFound()
        return _html(f'<h1 class="title">Guide number {g}</h1>')

    async def truth_page(self, request: web.Request) -> web.Response:
        return web.json_response(self.truth())

    async def stats(self, request: web.Request) -> web.Response:
        total = sum(self.requests.values())
        distinct = len(self.requests)
        return web.json_response(
            {"requests": total, "distinct": distinct, "repeated": total - distinct}
        )

    async def log_page(self, request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        return web.json_response([[t, k] for t, k in self.log if t >= since])


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(
        text=f"<html><body>{body}</body></html>", status=status, content_type="text/html"
    )


class MembersThread(AppThread):
    """The members shop on its own thread (tests, ``crashsafe demo-site --members``)."""

    def __init__(self, options: MembersOptions | None = None, *, port: int = 0) -> None:
        self.members = Members(options)
        super().__init__(self.members.app(), port=port)


def main() -> None:  # pragma: no cover - by hand: python -m crashsafe.demo.members [PORT]
    import sys

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8001
    web.run_app(Members().app(), host="127.0.0.1", port=port)


if __name__ == "__main__":  # pragma: no cover
    main()


__all__ = ["Members", "MembersOptions", "MembersThread"]
